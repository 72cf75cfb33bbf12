"""DLRM-step and multi-LoRA summaries: they read the CSVs the benchmarks write, check issues 9 and 11's goals.

The first two tests run each benchmark's quick mode (on the CPU here, on the GPU of a GPU machine) into a
temporary folder (the columns as they are, not as we remember them); the rest use made-up GPU-sized rows with
known answers. Nothing is written under ``benchmarks/results/``.
"""

from __future__ import annotations

import csv
import re

import pytest
from result_csvs import STAMP, dlrm_rows, write_csv

from lecture_code.results.page import BEGIN, END, render
from lecture_code.results.section import num, pct


@pytest.fixture
def repo(tmp_path):
    """A repository with a README holding the markers and no result files yet."""
    (tmp_path / "README.md").write_text(f"# R\n\n{BEGIN}\nold\n{END}\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    return tmp_path


def _section(page: str, title: str) -> str:
    start = page.index(f"## {title}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end > 0 else len(page)]


def test_the_dlrm_step_benchmarks_own_csv_is_summarised(repo):
    from benchmarks import bench_dlrm_step

    rows = bench_dlrm_step.main(
        [
            "--quick",
            "--only",  # two eager rows: the fused one costs 10 s interpreted (test_dlrm_step.py runs it)
            "eager, sparse grads",
            "eager, dense grads",
            "--results-dir",
            str(repo / "benchmarks" / "results"),
        ]
    )
    page = render(repo)[repo / "RESULTS.md"]
    section = _section(page, "The fused DLRM training step")
    for r in rows:  # every measured ms of the CSV is in its row and column, as the page rounds it
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {r['implementation']}"))
        column = 1 if r["ids"] == "uniform" else 2
        assert line.split(" | ")[column].startswith(num(r["ms_per_step"]) + " (")
    assert "| eager, dense grads |" in section and "| eager, sparse grads |" in section
    assert "not measured (this file: small preset, batch 16)" in section  # no goal claimed on a CPU run
    assert "| met |" not in section and "not met" not in section
    (csv_path,) = (repo / "benchmarks" / "results" / "dlrm_step").glob("dlrm_step_*.csv")
    # the file is named after the device that ran it (dlrm_step_cpu-..., or the GPU's name on a GPU machine)
    assert f"`benchmarks/results/dlrm_step/{csv_path.name}`" in section and "No result under" not in section


def test_the_multi_lora_benchmarks_own_csv_is_summarised(repo, monkeypatch):
    from benchmarks import bench_multi_lora

    monkeypatch.setattr(bench_multi_lora, "QUICK", [(5, 2, 4, (16,), 16)])  # one tiny shape: seconds
    bench_multi_lora.main(["--quick", "--results-dir", str(repo / "benchmarks" / "results")])
    csv_path = next((repo / "benchmarks" / "results" / "multi_lora").glob("multi_lora_*.csv"))
    rows = list(csv.DictReader(csv_path.open()))
    page = render(repo)[repo / "RESULTS.md"]
    section = _section(page, "Multi-LoRA serving")
    line = next(ln for ln in section.splitlines() if ln.startswith("| T=5 L=2 r=4 N=16 |"))
    header = next(ln for ln in section.splitlines() if ln.startswith("| shape |"))
    cells = dict(zip(header.split(" | "), line.split(" | "), strict=True))
    assert {r["provider"] for r in rows} <= set(cells)
    for r in rows:  # each provider's column holds that provider's time (3 significant figures)
        assert float(cells[r["provider"]].replace(",", "")) == pytest.approx(float(r["us"]), rel=5e-3)
    # the issue's shapes are not in a quick run: every cell and goal of its table says so
    assert re.search(r"\| 16 \| not measured \| not measured \|", section)
    assert section.count("| not measured | not measured |") >= 5 and "| met |" not in section


GPU_MS = {
    "eager, sparse grads": 4.6,
    "packed + index_add_, CUDA graph": 0.71,
    "fused": 1.2,
    "fused, CUDA graph": 0.30,
}


def test_dlrm_step_goals_take_the_best_fused_version_and_the_worse_id_distribution(repo):
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-24.csv", dlrm_rows(GPU_MS))
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    # zipf is 1.1× slower here: 0.33 ms, the worse one, decides; best of ours is "fused, CUDA graph"
    assert re.search(
        r"\| kaggle, batch 2048 \| .* \| 0\.330 ms, zipf ids, fused, CUDA graph \| met \|", section
    )
    # 4.6 / 0.30 = 15.3× on uniform and on zipf alike (both scaled by 1.1; the first is named): met
    assert re.search(r"× eager \| .* \| 15\.3× \(4\.60 / 0\.300 ms\), uniform ids.* \| met \|", section)
    # 0.71 / 0.30 = 2.37×: met
    assert re.search(r"× two tricks \| .* \| 2\.37× .* \| met \|", section)
    assert re.search(r"peak memory \| .* \| 100% \(2,200 / 2,200 MiB\).* \| met \|", section)
    assert "| fused, CUDA graph (ours) | 0.300 (0.270–0.360) | 0.330 (0.270–0.360) |" in section


def test_dlrm_step_goal_counts_fp32_and_names_a_tf32_row_beside_it(repo):
    ms = {**GPU_MS, "fused, CUDA graph": 0.5, "fused + compiled MLPs, atomic SGD, TF32, CUDA graph": 0.30}
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-24.csv", dlrm_rows(ms))
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    # the TF32 row (0.33 ms on zipf) would meet 0.35 ms, but the goal is judged at fp32: 0.55 ms, not met
    assert re.search(
        r"\| kaggle, batch 2048 \| .* \| 0\.550 ms \(with TF32 MLP matmuls, not counted: 0\.330 ms, "
        r"fused \+ compiled MLPs, atomic SGD, TF32, CUDA graph\), zipf ids, fused, CUDA graph \| not met \|",
        section,
    )
    assert re.search(r"× two tricks \| .* \| 1\.42× .*fused, CUDA graph \| not met \|", section)


def test_dlrm_step_bf16_goals_read_their_own_row_and_its_auc_gap(repo):
    bf16 = "fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph"
    rows = dlrm_rows({**GPU_MS, bf16: 0.25})
    for r in rows:
        r.update(
            auc_gap=4e-4 if r["implementation"] == bf16 else "",
            auc_steps=300 if r["implementation"] == bf16 else 0,
        )
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-24.csv", rows)
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    # the fp32 goals still count "fused, CUDA graph" (0.30 ms), never the faster bf16 row
    assert re.search(
        r"\| kaggle, batch 2048 \| .* \| 0\.330 ms, zipf ids, fused, CUDA graph \| met \|", section
    )
    assert re.search(
        r"kaggle, batch 2048, × two tricks \| .* \| 2\.37× .*fused, CUDA graph \| met \|", section
    )
    # 0.71 / 0.25 = 2.84× ≥ 2.5, and the AUC gap of its 300-step run 4e-4 ≤ 1e-3
    assert re.search(
        r"bf16 × two tricks \| .* \| 2\.84× \(0\.710 / 0\.250 ms\).*bf16 MLPs, CUDA graph \| met \|", section
    )
    assert re.search(
        r"bf16 AUC gap \| .* \| AUC within 4\.0e-04 of fp32 eager's over 300 steps.* \| met \|", section
    )
    for r in rows:  # a shorter run does not answer the goal: not measured, never met
        r.update(auc_steps=100 if r["implementation"] == bf16 else 0)
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-25.csv", rows)
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    assert re.search(r"bf16 AUC gap \| .* \| not measured \| not measured \|", section)


def test_dlrm_step_goals_not_met_and_not_measured(repo):
    slow = {**GPU_MS, "fused, CUDA graph": 0.5}
    rows = dlrm_rows(slow, dists=("uniform",), peak={"fused, CUDA graph": 3000.0})
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-24.csv", rows)
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    # only uniform ids measured: the goals are for both distributions, so none is claimed
    assert section.count("zipf ids: not measured | not measured |") == 4
    rows = dlrm_rows(slow, peak={"fused, CUDA graph": 3000.0})
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-25.csv", rows)
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    assert re.search(r"\| kaggle, batch 2048 \| .* \| 0\.550 ms, zipf .* \| not met \|", section)
    assert re.search(r"two tricks \| .* \| 1\.42× .* \| not met \|", section)
    assert re.search(r"peak memory \| .* \| 136% .* \| not met \|", section)


def test_a_failed_dlrm_implementation_shows_its_error_and_no_number(repo):
    rows = dlrm_rows(GPU_MS)
    for r in rows:
        if r["implementation"] == "fused, CUDA graph":
            r.update(ms_per_step="", ms_min="", ms_max="", error="skipped: past --time-limit")
    write_csv(repo / "benchmarks/results/dlrm_step/dlrm_step_nvidia_2026-11-24.csv", rows)
    section = _section(render(repo)[repo / "RESULTS.md"], "The fused DLRM training step")
    assert "| fused, CUDA graph (ours) | — (skipped: past --time-limit) |" in section
    # the best measured fused version is now "fused" (1.2 ms): the goal is not met
    assert re.search(r"\| kaggle, batch 2048 \| .* \| 1\.32 ms, zipf ids, fused \| not met \|", section)


def _multi_lora_rows(ours_us: dict[int, float], pct_copy: dict[int, float]) -> list[dict]:
    rows = []
    for T, us in ours_us.items():
        for provider, value in (("ours", us), ("torch loop", 772.0), ("torch gather+bmm", 33.0)):
            rows.append(
                {"shape": f"T={T} L=8 r=16 N=4096", "T": T, "L": 8, "r": 16, "slices": 1,
                 "provider": provider, "us": value, "host us": 4.0, "GB/s": 1.0,
                 "% copy": pct_copy[T] if provider == "ours" else 5.0, "MB moved": 1.0, "goal": "", "met": "",
                 **STAMP, "dtype": "bfloat16"}
            )  # fmt: skip
    return rows


def test_multi_lora_goals_per_issue_row(repo):
    rows = _multi_lora_rows({16: 9.0, 256: 41.0, 4096: 44.0}, {16: 10.0, 256: 50.0, 4096: 79.0})
    write_csv(repo / "benchmarks/results/multi_lora/multi_lora_nvidia_2026-11-24.csv", rows)
    page = render(repo)
    section = _section(page[repo / "RESULTS.md"], "Multi-LoRA serving")
    assert re.search(r"\| T=16 µs \| .* \| 9\.00 µs \(ours, T=16 L=8 r=16 N=4096\) \| met \|", section)
    assert re.search(r"\| T=256 µs \| .* \| 41\.0 µs .* \| not met \|", section)
    assert re.search(r"\| T=4096 µs \| .* \| 44\.0 µs .* \| met \|", section)
    assert re.search(r"\| T=4096 % copy \| .* \| 79\.0% .* \| not met \|", section)
    assert re.search(r"\| T=16384 % copy \| .* \| not measured \| not measured \|", section)
    row = "| 16 | 9.00 | 10.0% | not measured | not measured | not measured | 33.0 | not measured | 772 |"
    assert row in section  # tokens, ours µs, % copy, (graph); vllm, (graph); gather+bmm, (graph); loop
    readme = page[repo / "README.md"]
    assert "T=16 L=8 r=16 N=4096: ours 9.00, torch gather+bmm 33.0, torch loop 772 µs" in readme


def test_no_csv_means_not_measured_anywhere(repo):
    page = render(repo)
    results = page[repo / "RESULTS.md"]
    for title, folder in (
        ("The fused DLRM training step", "dlrm_step"),
        ("Multi-LoRA serving", "multi_lora"),
    ):
        section = _section(results, title)
        assert f"No result under `benchmarks/results/{folder}/` yet" in section
        assert "| met |" not in section and "not met" not in section
    readme = page[repo / "README.md"]
    assert "DLRM training step" not in readme and "multi-LoRA" not in readme


def _ddp_rows(preset: str, eff2: float, rate2: float) -> list[dict]:
    def row(backend, n, ms, rate, eff, error=""):
        return {"backend": backend, "world_size": n, "batch_per_rank": 2048, "global_batch": 2048 * n,
                "ms_per_step": ms, "samples_per_s": rate, "error": error, "scaling_efficiency": eff,
                "preset": preset, **STAMP}  # fmt: skip

    return [
        row("eager", 1, 5.0, 4.0e5, 1.0),
        row("eager", 2, "", "", "", error="RuntimeError: boom"),
        row("fused-graph", 1, 0.5, 4.0e6, 1.0),
        row("fused-graph", 2, 0.6, rate2, eff2),
    ]


@pytest.mark.parametrize(
    "preset, eff2, rate2, verdicts",
    [("kaggle", 0.95, 1.1e7, ["met", "met"]), ("kaggle", 0.75, 6.0e6, ["not met", "not met"]),
     ("small", 0.95, 1.1e7, ["not measured", "not measured"])],
)  # fmt: skip
def test_the_ddp_section_reads_its_rows_and_checks_the_graph_steps_scaling(
    repo, preset, eff2, rate2, verdicts
):
    write_csv(
        repo / "benchmarks" / "results" / "ddp" / "ddp_2x-gpu_2026-01-01.csv", _ddp_rows(preset, eff2, rate2)
    )
    section = _section(render(repo)[repo / "RESULTS.md"], "The DLRM step on several GPUs")
    assert "| eager | 0.400M (5.00 ms) | RuntimeError: boom |" in section  # a failed row says why, no number
    scaled = f"{num(rate2 / 1e6)}M (0.600 ms, {pct(100 * eff2)} scaling)"
    assert f"| fused-graph | 4.00M (0.500 ms) | {scaled} |" in section
    goal_lines = [ln for ln in section.splitlines() if ln.startswith("| kaggle, 2 ranks,")]
    assert [ln.rstrip(" |").rsplit("| ", 1)[1] for ln in goal_lines] == verdicts


def test_the_four_rank_goal_and_the_terabyte_section_read_their_own_rows(repo):
    rows = _ddp_rows("kaggle", 0.95, 1.1e7)
    rows.append(
        {
            **rows[-1],
            "world_size": 4,
            "global_batch": 8192,
            "samples_per_s": 1.2e7,
            "scaling_efficiency": 0.75,
        }
    )
    write_csv(repo / "benchmarks" / "results" / "ddp" / "ddp_4x-gpu_2026-01-01.csv", rows)
    sharded = [
        {**r, "backend": "sharded", "preset": "terabyte"} for r in _ddp_rows("terabyte", 0.9, 2.5e6)[2:]
    ]
    write_csv(repo / "benchmarks" / "results" / "ddp" / "ddp-terabyte_4x-gpu_2026-01-01.csv", sharded)
    page = render(repo)[repo / "RESULTS.md"]
    kaggle = _section(page, "The DLRM step on several GPUs")
    four = [ln for ln in kaggle.splitlines() if ln.startswith("| kaggle, 4 ranks, fused-graph, scaling")]
    assert len(four) == 1 and four[0].rstrip(" |").endswith("| not met") and "75.0%" in four[0]
    terabyte = _section(page, "The 1TB-size DLRM on several GPUs")
    assert "| sharded | 4.00M (0.500 ms) | 2.50M (0.600 ms, 90.0% scaling) |" in terabyte
    goal = [ln for ln in terabyte.splitlines() if ln.startswith("| terabyte, 4 ranks, sharded, samples/s")]
    assert len(goal) == 1 and goal[0].rstrip(" |").endswith("| not measured")  # this file has 2 ranks only
    assert "fused-graph, scaling" not in terabyte


def test_a_sweeps_own_csv_is_summarised_with_its_rule_and_fastest_candidate(repo):
    from benchmarks import sweep_lora_small_m

    sweep_lora_small_m.main(["--quick", "--results-dir", str(repo / "benchmarks" / "results")])
    rows = list(csv.DictReader(next((repo / "benchmarks/results/lora_small_m").glob("*.csv")).open()))
    section = _section(render(repo)[repo / "RESULTS.md"], "LoRA at small M")
    line = next(ln for ln in section.splitlines() if ln.startswith(f"| {rows[0]['shape']} |"))
    rule = next(r for r in rows if r["rule"] == "True")
    fastest = min(rows[1:], key=lambda r: float(r["fwd+bwd us"]))  # after the base
    assert line.startswith(f"| {rows[0]['shape']} | 2 of 2 | {num(float(rows[0]['fwd+bwd us']))} |")
    assert f"| {rule['config']}: {num(float(rule['fwd+bwd us']))} |" in line
    assert line.endswith(f"| {fastest['config']}: {num(float(fastest['fwd+bwd us']))} |")


def test_the_lora_kernel_probes_csv_is_summarised_launch_by_launch(repo):
    from benchmarks import probe_lora_kernels

    probe_lora_kernels.main(["--quick", "--results-dir", str(repo / "benchmarks" / "results")])
    rows = list(csv.DictReader(next((repo / "benchmarks/results/lora_kernels").glob("*.csv")).open()))
    section = _section(render(repo)[repo / "RESULTS.md"], "LoRA linear, launch by launch")
    for r in rows:
        vs = f"+{num(float(r['vs floor %']))}%" if r["vs floor %"] else "—"
        assert f"| {r['pass']} | {r['launch']} | {num(float(r['us']))} | {vs} |" in section, r
