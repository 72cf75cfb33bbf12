"""README rows from the sidecars of ``perf_screenshots/`` (notebooks 02–03): the step-time experiments.

Each picture there has a JSON sidecar with the measured rows (``lecture_code.perf.sidecars``). The README's
"Measured so far" table takes one row per experiment below, every number read from its sidecar's ``results``.
This module reads the JSON directly (no torch import), so regenerating the page stays quick.
"""

from __future__ import annotations

import json
from pathlib import Path

from lecture_code.paths import REPO_ROOT
from lecture_code.results.section import Headline, num

__all__ = ["EXPERIMENTS", "screenshot_headlines"]

# sidecar name → what the README row says it measured
EXPERIMENTS = {
    "kaggle_tables": "DLRM training step (Kaggle MLPs, batch 2048): the synthetic data's tables vs Kaggle's",
    "host_sync": "finding 1: `loss.item()` every step vs the loss kept on the device",
    "hash_all_features": "all 26 features hashed, B = 2048: one module per feature vs all features in one op",
    "hashing_stages": "finding 3: step time at each stage of fixing the id → row lookup",
    "eager_vs_compiled": "eager vs `torch.compile` DLRM training step",
}


def _row_text(row: dict) -> str:
    if "ms_per_step" in row:
        text = (
            f"{row['label']}: {num(row['ms_per_step'])} ms/step ({num(row['ms_min'])}–{num(row['ms_max'])})"
        )
        if "gpu_busy_ms" in row:
            text += f", GPU busy {num(row['gpu_busy_ms'])} ms"
        if "embedding_mb" in row:
            text += f", tables {num(row['embedding_mb'])} MB"
        if "peak_step_mib" in row:
            text += f", {num(row['peak_step_mib'])} MiB per step"
        return text
    return f"{row['label']}: {num(row['ms'])} ms" + (
        f", host {num(row['host_us'])} µs" if "host_us" in row else ""
    )


def screenshot_headlines(folder: Path | None = None) -> list[tuple[Headline, dict, Path]]:
    """``(row, sidecar, sidecar path)`` for each experiment whose sidecar exists."""
    folder = folder or REPO_ROOT / "perf_screenshots"
    out = []
    for name, what in EXPERIMENTS.items():
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        sidecar = json.loads(path.read_text(encoding="utf-8"))
        number = "; ".join(_row_text(r) for r in sidecar.get("results", []))
        out.append((Headline(what, number), sidecar, path))
    return out
