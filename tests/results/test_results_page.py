"""RESULTS.md and the README's table are generated, in sync, and say only what the result files show."""

from __future__ import annotations

import csv
import re

import pytest
from result_csvs import write_csv

from lecture_code.paths import REPO_ROOT
from lecture_code.results.goals import GOALS
from lecture_code.results.page import BEGIN, END, render, stale, with_block
from lecture_code.results.sources import latest_results


def test_the_committed_page_and_readme_table_are_in_sync():
    assert stale() == [], (
        "run `make results` (python -m lecture_code.results) and commit RESULTS.md and README.md"
    )


def test_every_table_number_of_a_section_is_the_csvs(tmp_path):
    """The pointwise table's cells are the CSV's ``% of copy`` at the largest size, read independently."""
    csv_path = next((REPO_ROOT / "benchmarks" / "results" / "pointwise").glob("pointwise_*.csv"))
    rows = list(csv.DictReader(csv_path.open()))
    largest = max(int(r["rows"]) for r in rows)
    page = (REPO_ROOT / "RESULTS.md").read_text()
    section = page[page.index("## Pointwise") : page.index("\n## ", page.index("## Pointwise") + 1)]
    for r in rows:
        if int(r["rows"]) == largest and r["provider"] == "triton v1":
            line = next(
                ln for ln in section.splitlines() if ln.startswith(f"| {r['kernel']} | {r['dtype']} | ")
            )
            assert float(line.split(" | ")[2].rstrip("%")) == float(f"{float(r['% of copy']):.3g}")


def _pointwise_rows(
    device: str, date: str, providers=("eager", "torch.compile", "triton v1"), pct=97.5
) -> list[dict]:
    stamp = {"device": device, "torch": "2.0", "triton": "3.0", "date": date}
    rows = []
    for size in (1024, 8192):
        for p in providers:
            ours = p == "triton v1"
            rows.append(
                {"kernel": "bias_relu", "dtype": "fp32", "rows": size, "cols": 4096, "provider": p, "ms": 0.1,
                 "host us": 5.0, "GB/s": 1000.0, "copy GB/s": 2000.0, "% of copy": pct if ours else 50.0,
                 "x compile": 0.9 if size == 1024 and ours else 1.0, **stamp}
            )  # fmt: skip
    return rows


@pytest.fixture
def repo(tmp_path):
    """A repository with a README holding the markers and no result files yet."""
    (tmp_path / "README.md").write_text(f"# R\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    return tmp_path


def test_only_the_newest_file_per_workload_and_device_counts(repo):
    results = repo / "benchmarks" / "results" / "pointwise"
    write_csv(
        results / "pointwise_gpu-a_2026-01-01.csv", _pointwise_rows("GPU A", "2026-01-01T10:00:00", pct=80.0)
    )
    write_csv(results / "pointwise_gpu-a_2026-02-01.csv", _pointwise_rows("GPU A", "2026-02-01T10:00:00"))
    write_csv(results / "pointwise_gpu-b_2025-12-01.csv", _pointwise_rows("GPU B", "2025-12-01T10:00:00"))
    write_csv(
        repo / "benchmarks" / "results" / "tmp" / "pointwise_gpu-a_2027-01-01.csv",
        _pointwise_rows("GPU A", "2027"),
    )
    found = latest_results(repo / "benchmarks" / "results", repo)
    assert [(r.device, r.date) for r in found] == [("GPU A", "2026-02-01"), ("GPU B", "2025-12-01")]
    page = render(repo)[repo / "RESULTS.md"]
    assert "pointwise_gpu-a_2026-02-01.csv" in page and "pointwise_gpu-a_2026-01-01.csv" not in page
    assert "— GPU A" in page and "— GPU B" in page  # two devices: a section each, named
    assert "80.0%" not in page  # the old run's figure never reaches the page


def test_a_missing_baseline_and_an_unmeasured_goal_say_not_measured(repo):
    results = repo / "benchmarks" / "results" / "pointwise"
    write_csv(results / "pointwise_gpu_2026-01-01.csv", _pointwise_rows("GPU", "2026-01-01T00:00:00"))
    page = render(repo)[repo / "RESULTS.md"]
    line = next(ln for ln in page.splitlines() if ln.startswith("| bias_relu | fp32 | 97.5% |"))
    assert line.split(" | ")[3] == "not measured"  # the CSV has no cuda rows
    goals = page[page.index("## Pointwise") :]
    assert re.search(r"≥ 95% of the copy reference .*\| lowest 97.5% .*\| met \|", goals)
    assert re.search(r"x compile ≥ 1\) \| lowest 0.900 .*\| not met \|", goals)
    dlrm = page[page.index("## The fused DLRM training step") :]
    assert "No result under `benchmarks/results/dlrm_step/` yet" in dlrm
    assert "| not measured | not measured |" in dlrm


def test_a_csv_without_a_builder_is_listed_without_numbers(repo):
    write_csv(repo / "benchmarks" / "results" / "multi_lora" / "sweep_gpu_2026-01-01.csv",
               [{"T": 16, "us": 7.5, "device": "GPU", "date": "2026-01-01"}])  # fmt: skip
    page = render(repo)[repo / "RESULTS.md"]
    section = page[page.index("## Multi-LoRA") :]  # a file of the workload that no builder reads
    assert "sweep_gpu_2026-01-01.csv" in section and "`T`, `us`" in section
    assert "7.5" not in section and "| not read from this file yet | not measured |" in section


def test_the_readme_block_is_replaced_and_nothing_else(repo):
    write_csv(repo / "benchmarks" / "results" / "pointwise" / "pointwise_gpu_2026-01-01.csv",
               _pointwise_rows("GPU", "2026-01-01T00:00:00"))  # fmt: skip
    readme = render(repo)[repo / "README.md"]
    assert readme.startswith("# R\n\nbefore\n\n" + BEGIN) and readme.endswith(END + "\n\nafter\n")
    assert "old" not in readme and "Triton v1 97.5%" in readme and "GPU, 2026-01-01" in readme
    with pytest.raises(ValueError, match="no block between"):
        with_block("# a README without markers\n", "x")


def test_every_goal_names_its_issue_and_a_known_workload():
    from lecture_code.results.workloads import ORDER

    for goal in GOALS:
        assert goal.workload in ORDER and goal.op in ("<=", ">=")
    assert GOALS[0].met(500e3) and not GOALS[0].met(499e3)
