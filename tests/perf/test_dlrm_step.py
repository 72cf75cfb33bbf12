"""The step benchmark's implementations train one model alike; ``bench_dlrm_step --quick`` runs on a CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from benchmarks import bench_dlrm_step
from kernels import runtime
from lecture_code.environment import matmul_precision
from lecture_code.model import DLRMConfig
from lecture_code.perf.dlrm_step import GPU_ONLY, build_step, make_batches

CONFIG = DLRMConfig.preset("small", (3, 40, 7, 120), hashing="modulus", over_arch_layer_sizes=(16, 1))


def _tables(model) -> list[torch.Tensor]:
    state = model.state_dict()
    if "sparse_arch.weight" in state:  # the packed buffer of the two-tricks version
        return list(torch.split(state["sparse_arch.weight"], CONFIG.num_embeddings_per_feature))
    return [state[f"sparse_arch.embeddings.{f}.weight"] for f in range(CONFIG.num_sparse)]


@pytest.mark.skipif(
    not runtime.interpreting(), reason="the fused kernels on CPU tensors need Triton's interpreter"
)
@pytest.mark.parametrize("ids", ["uniform", "zipf"])
def test_every_cpu_implementation_takes_the_eager_sgd_step(ids):
    batches = make_batches(CONFIG, 24, 2, torch.device("cpu"), ids=ids, seed=3)
    results = {}
    for name in ("eager, dense grads", "eager, sparse grads", "packed + index_add_", "fused"):
        torch.manual_seed(5)
        step, model = build_step(name, CONFIG, torch.device("cpu"), batches[0], lr=0.3)
        losses = [step(b) for b in batches]
        results[name] = (losses, _tables(model), [p.detach() for p in model.dense_parameters()])
    ref_losses, ref_tables, ref_dense = results.pop("eager, dense grads")
    for name, (losses, tables, dense) in results.items():
        torch.testing.assert_close(
            torch.stack(losses), torch.stack(ref_losses), atol=1e-5, rtol=1e-5, msg=name
        )
        for t, r in zip(tables, ref_tables, strict=True):
            torch.testing.assert_close(t, r, atol=1e-5, rtol=1e-5, msg=name)
        for t, r in zip(dense, ref_dense, strict=True):
            torch.testing.assert_close(t, r, atol=1e-5, rtol=1e-5, msg=name)


def test_zipf_ids_repeat_and_stay_in_range():
    (batch,) = make_batches(CONFIG, 512, 1, torch.device("cpu"), ids="zipf")
    sizes = torch.tensor(CONFIG.num_embeddings_per_feature)
    assert bool((batch.sparse >= 0).all()) and bool((batch.sparse < sizes).all())
    assert (batch.sparse[:, 3] == 0).float().mean() > 0.1  # the head row of a 120-row table is hot


def test_graph_versions_need_a_gpu():
    (batch,) = make_batches(CONFIG, 8, 1, torch.device("cpu"))
    for name in GPU_ONLY:
        with pytest.raises(RuntimeError, match="needs a GPU"):
            build_step(name, CONFIG, torch.device("cpu"), batch)
        assert torch.get_float32_matmul_precision() == "highest", name  # the TF32 row restores it


@pytest.mark.gpu
def test_graph_versions_train_like_eager_on_a_gpu():
    """Every fp32 or TF32 CUDA-graph version takes eager's SGD steps (losses and table updates), TF32 against
    eager run at TF32 too; building it leaves the process at fp32 precision. (Against fp32 eager the TF32
    step drifts: on an H100 its table updates differ by 5e-4 of their norm after one step, by 12% after
    three at lr 0.3.)"""
    cuda = torch.device("cuda")
    batches = make_batches(CONFIG, 64, 3, cuda, ids="zipf", seed=3)

    def run(name: str, precision: str = "highest"):
        torch.manual_seed(5)
        with matmul_precision(precision):  # eager reads the setting at every call
            step, model = build_step(name, CONFIG, cuda, batches[0], lr=0.3)
            assert torch.get_float32_matmul_precision() == precision, name
            before = [t.clone() for t in _tables(model)]  # a graph version's warm-up steps were undone
            losses = torch.stack([step(b).detach().clone() for b in batches])  # a graph's loss is overwritten
        return losses, [t - b for t, b in zip(_tables(model), before, strict=True)]

    references = {precision: run("eager, dense grads", precision) for precision in ("highest", "high")}
    for name in sorted(n for n in GPU_ONLY if "bf16" not in n):  # bf16 rows: tests/perf/test_bf16_mlps.py
        (losses, updates), (ref_losses, ref_updates) = (
            run(name),
            references["high" if "TF32" in name else "highest"],
        )
        torch.testing.assert_close(
            losses, ref_losses, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
        for u, r in zip(updates, ref_updates, strict=True):
            torch.testing.assert_close(u, r, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_other_batches_are_saved_in_a_folder_of_their_own():
    folders = [bench_dlrm_step.results_folder(b, q) for b, q in [(2048, False), (16, True), (8192, False)]]
    assert folders == ["dlrm_step", "dlrm_step", "dlrm_step_batch8192"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the --quick CPU path; the GPU runs the full benchmark")
def test_quick_benchmark_runs_on_a_cpu(tmp_path, capsys):
    rows = bench_dlrm_step.main(["--quick", "--results-dir", str(tmp_path)])
    assert {r["implementation"] for r in rows} == {
        "eager, sparse grads", "eager, dense grads", "packed + index_add_", "fused"
    }  # fmt: skip
    assert all(not r["error"] and r["ms_per_step"] > 0 for r in rows), rows
    (csv_path,) = (tmp_path / "dlrm_step").glob("dlrm_step_*.csv")
    assert csv_path.with_suffix(".png").stat().st_size > 1000
    with csv_path.open() as f:
        saved = list(csv.DictReader(f))
    assert len(saved) == 8 and {"device", "torch", "triton", "date", "syncs_per_step", "host_clean"} <= set(
        saved[0]
    )
    assert "samples_per_s" in capsys.readouterr().out


def test_isolated_rows_come_from_child_processes_and_a_crash_costs_one_row(monkeypatch, capsys):
    """One real child (CPU quick sizes) gives its rows; a child killed by a device-side assert becomes two
    error rows (uniform, zipf) naming the assert, and the parent goes on."""
    import argparse
    import subprocess

    args = argparse.Namespace(time_limit=120.0, batch_size=8)
    rows = bench_dlrm_step._isolated(["eager, dense grads"], args, torch.device("cpu"), 0.0)
    assert [(r["implementation"], r["ids"]) for r in rows] == [
        ("eager, dense grads", "uniform"),
        ("eager, dense grads", "zipf"),
    ]
    assert all(r["ms_per_step"] > 0 and not r["error"] for r in rows)
    real_rows = rows

    def crash(cmd, **kw):  # the second child replays the real child's rows (one real child is enough)
        if "fused" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "x\ntorch.AcceleratorError: device-side assert\n")
        Path(cmd[cmd.index("--rows-json") + 1]).write_text(json.dumps(real_rows))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bench_dlrm_step.subprocess, "run", crash)
    rows = bench_dlrm_step._isolated(["fused", "eager, dense grads"], args, torch.device("cpu"), 0.0)
    assert [r["implementation"] for r in rows] == [
        "fused",
        "fused",
        "eager, dense grads",
        "eager, dense grads",
    ]
    assert rows[0]["error"] == "torch.AcceleratorError: device-side assert" and rows[0]["ms_per_step"] != 0
    assert not rows[2]["error"]
    assert "'fused' failed in its own process" in capsys.readouterr().out
