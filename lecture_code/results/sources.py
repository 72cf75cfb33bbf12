"""The benchmark results the page is made from: the latest CSV (or JSON sidecar) per workload and device.

A benchmark (``lecture_code.bench.save``) writes ``benchmarks/results/<workload>/<name>_<device>_<date>.csv``
with stamp columns (device, torch, triton, date) on every row, and its plot beside it with the same stem
(``.png``). ``bench_preprocess`` writes ``preprocess.csv`` with ``stamp_*`` columns; the DLRM adaptation
writes a JSON file with a ``stamp`` object. :func:`latest_results` reads them all and keeps, per workload,
file name and device, only the newest date: an older run of the same thing on the same device never reaches
the page.
Git-ignored trial runs (``benchmarks/results/tmp/``) are skipped.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

from lecture_code.paths import REPO_ROOT, RESULTS_DIR

__all__ = ["ResultFile", "latest_results", "read_result"]

SKIPPED_FOLDERS = {"tmp"}  # trial runs, git-ignored
_DATED = re.compile(r"^(?P<name>.+)_(?P<slug>[a-z0-9-]+)_(?P<date>\d{4}-\d{2}-\d{2})$")


@dataclass
class ResultFile:
    """One result file and what it says about itself.

    Attributes:
        path: relative to the repository root (as RESULTS.md links it).
        workload: the folder under ``benchmarks/results/``.
        name: the file's stem without device and date (``pointwise``, ``lora_overhead``).
        stamp: device, versions and date, as the file records them (keys as written, ``stamp_`` dropped).
        rows: the CSV's rows (strings), or ``[the JSON object]`` for a JSON sidecar.
        plot: the PNG beside it with the same stem, relative to the repository root, if there is one.
        notes: a ``README.md`` in the same folder, relative to the repository root, if there is one.
    """

    path: Path
    workload: str
    name: str
    stamp: dict[str, str]
    rows: list[dict]
    plot: Path | None = None
    notes: Path | None = None

    @property
    def device(self) -> str:
        return self.stamp.get("device", "unknown device")

    @property
    def date(self) -> str:
        return self.stamp.get("date", "")[:10]


def _stamp_of_csv(rows: list[dict]) -> dict[str, str]:
    """The stamp columns of a CSV: ``device, torch, triton, date`` or ``stamp_*`` (bench_preprocess)."""
    first = rows[0]
    stamp = {k.removeprefix("stamp_"): v for k, v in first.items() if k.startswith("stamp_")}
    for key in ("device", "torch", "triton", "date"):
        if key in first:
            stamp[key] = first[key]
    return stamp


def read_result(path: Path, root: Path = REPO_ROOT) -> ResultFile | None:
    """Read one CSV or JSON result file (``None`` for an empty CSV: it says nothing)."""
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            return None
        stamp = _stamp_of_csv(rows)
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows, stamp = [data], {k: str(v) for k, v in data.get("stamp", {}).items()}
    match = _DATED.match(path.stem)
    plot = path.with_suffix(".png")
    notes = path.parent / "README.md"
    return ResultFile(
        path=path.relative_to(root),
        workload=path.parent.name,
        name=match["name"] if match else path.stem,
        stamp=stamp,
        rows=rows,
        plot=plot.relative_to(root) if plot.exists() else None,
        notes=notes.relative_to(root) if notes.exists() else None,
    )


def latest_results(results_dir: Path = RESULTS_DIR, root: Path = REPO_ROOT) -> list[ResultFile]:
    """The newest result per (workload, name, device), ordered by workload, name, device."""
    newest: dict[tuple[str, str, str], ResultFile] = {}
    for path in sorted([*results_dir.glob("*/*.csv"), *results_dir.glob("*/*.json")]):
        if path.parent.name in SKIPPED_FOLDERS:
            continue
        result = read_result(path, root)
        if result is None:
            continue
        key = (result.workload, result.name, result.device)
        if key not in newest or (result.stamp.get("date", ""), str(result.path)) > (
            newest[key].stamp.get("date", ""),
            str(newest[key].path),
        ):
            newest[key] = result
    return [newest[k] for k in sorted(newest)]
