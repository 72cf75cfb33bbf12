"""Made-up result CSVs for the tests of the results page and the slides: a writer, a stamp, DLRM-step rows."""

import csv
from pathlib import Path


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


STAMP = {
    "device": "NVIDIA H100 80GB HBM3",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "date": "2026-11-24T10:00:00",
}


def dlrm_rows(
    ms: dict[str, float], preset="kaggle", batch=2048, dists=("uniform", "zipf"), peak=None
) -> list[dict]:
    """``bench_dlrm_step`` rows: ``ms`` per implementation on uniform ids, zipf 1.1× slower, min–max ±."""
    rows = []
    for dist in dists:
        for name, value in ms.items():
            rows.append(
                {"implementation": name, "ids": dist, "ms_per_step": value * (1.1 if dist == "zipf" else 1.0),
                 "ms_min": value * 0.9, "ms_max": value * 1.2, "gpu_ms": value * 0.8, "host_ms": 0.05,
                 "samples_per_s": batch / value * 1e3, "state_mib": 2100.0,
                 "peak_mib": (peak or {}).get(name, 2200.0), "error": "", "batch": batch, "preset": preset,
                 **STAMP}
            )  # fmt: skip
    return rows
