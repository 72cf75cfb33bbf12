"""lecture_code.export: ONNX export (both exporters), validation against PyTorch, summary, atomic writes.

A small stand-in with DLRM's signature (dense float32 [B, 13], sparse int64 [B, 26] raw ids → logits [B])
keeps the generic tests fast; the real DLRM is exported with every hashing kind when it is importable.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from lecture_code.export import cli as export_cli
from lecture_code.export import onnx_export as export_module
from lecture_code.export.onnx_export import ONNXValidationError, export_onnx, summarize_onnx, validate_onnx

# fp32 (atol, rtol) for onnxruntime vs torch: the same products summed in another order (MLAS vs MKL GEMMs)
# give errors of a few 1e-7 on these outputs; 1e-5 leaves room without hiding a wrong op (those are >1e-2).
ATOL, RTOL = 1e-5, 1e-4
EXAMPLE_BATCH = 8
NUM_DENSE, NUM_SPARSE = 13, 26


class StandInDLRM(nn.Module):
    """DLRM's signature and shape of computation in a few ops: bottom MLP, modulus hash into one table with
    per-feature offsets, pairwise dot interaction (lower triangle), top MLP → logits ``[B]``."""

    def __init__(self, rows_per_feature=(3, 5, 7, 11), dim: int = 4):
        super().__init__()
        rows = torch.tensor([rows_per_feature[f % len(rows_per_feature)] for f in range(NUM_SPARSE)])
        self.register_buffer("rows", rows)
        self.register_buffer("offsets", torch.cumsum(rows, 0) - rows)
        self.bottom = nn.Sequential(nn.Linear(NUM_DENSE, 8), nn.ReLU(), nn.Linear(8, dim), nn.ReLU())
        self.table = nn.Embedding(int(rows.sum()), dim)
        n = NUM_SPARSE + 1
        i, j = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("pairs", i * n + j)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)  # [B, D]
        e = self.table(torch.remainder(sparse, self.rows) + self.offsets)  # [B, F, D]
        z = torch.cat([x.unsqueeze(1), e], dim=1)  # [B, F+1, D]
        dots = torch.bmm(z, z.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)  # [B]


def standin_inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random inputs: log1p-like dense values, raw 32-bit ids (never zeros, never ones)."""
    dense = torch.log1p(torch.rand(batch, NUM_DENSE) * 100)
    sparse = torch.randint(2, 1 << 32, (batch, NUM_SPARSE), dtype=torch.int64)
    return dense, sparse


@pytest.fixture
def standin(seed):
    return StandInDLRM().eval()


def _onnx_files(directory):
    return sorted(p.name for p in directory.iterdir())


def _assert_dynamic_batch(path, output_name):
    graph = onnx.load(str(path)).graph
    for value in (*graph.input, *graph.output):
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch", value.name
    assert [i.name for i in graph.input] == ["dense", "sparse"]
    assert [o.name for o in graph.output] == [output_name]


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_standin_exports_and_matches_torch(standin, tmp_path, dynamo):
    path = export_onnx(standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "standin.onnx", dynamo=dynamo)
    assert path == tmp_path / "standin.onnx" and _onnx_files(tmp_path) == ["standin.onnx"]
    _assert_dynamic_batch(path, "probability")

    report = validate_onnx(path, standin, standin_inputs, n_trials=3, atol=ATOL, rtol=RTOL)
    assert report["checker"] == "ok"
    assert report["exporter"] == ("dynamo" if dynamo else "torchscript")
    sizes = [t["batch_size"] for t in report["trials"]]
    assert EXAMPLE_BATCH not in sizes and len(set(sizes)) == 3  # other batch sizes: the axis is dynamic
    assert report["max_abs_err"] < ATOL
    # Parameter names are the model's own (the probability wrapper adds no "model." prefix).
    names = {t.name for t in onnx.load(str(path)).graph.initializer}
    assert {"table.weight", "bottom.0.weight", "top.2.bias"} <= names


def test_logits_output_matches_forward(standin, tmp_path):
    path = export_onnx(
        standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx", output="logits", dynamo=False
    )
    _assert_dynamic_batch(path, "logits")
    (tmp_path / "plain").write_bytes(b"")  # the atomic write leaves the mode a plain write would have
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777
    report = validate_onnx(path, standin, standin_inputs, atol=ATOL, rtol=RTOL)
    assert report["output"] == "logits" and report["max_abs_err"] < ATOL


def test_validate_catches_a_model_that_drifted(standin, tmp_path):
    """A file exported before the weights changed must fail validation (the check can fail)."""
    path = export_onnx(
        standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx", output="logits", dynamo=False
    )
    with torch.no_grad():
        standin.top[2].bias += 0.5
    with pytest.raises(ONNXValidationError, match="disagree on output 'logits'"):
        validate_onnx(path, standin, standin_inputs, atol=ATOL, rtol=RTOL)


def test_validate_rejects_a_file_the_checker_rejects(tmp_path, standin):
    path = export_onnx(standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx", dynamo=False)
    model = onnx.load(str(path))
    model.graph.node[0].op_type = "NoSuchOp"
    onnx.save(model, str(path))
    with pytest.raises(ONNXValidationError, match="onnx.checker"):
        validate_onnx(path, standin, standin_inputs)


class SearchsortedModel(nn.Module):
    """Neither exporter converts aten::searchsorted (ONNX has no such operator): every export fails."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(NUM_DENSE, 1)
        self.register_buffer("vocabulary", torch.arange(3, 300, 7))

    def forward(self, dense, sparse):
        pos = torch.searchsorted(self.vocabulary, sparse[:, 0])
        return self.linear(dense).squeeze(1) + pos.float()


def test_failed_export_leaves_no_file(tmp_path):
    with pytest.raises(RuntimeError, match="searchsorted"):
        export_onnx(SearchsortedModel(), standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx")
    assert _onnx_files(tmp_path) == []  # no half-written file, no temporary left behind


def test_failed_export_keeps_the_existing_file(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"the previous, good export")
    with pytest.raises(RuntimeError, match="ONNX export of SearchsortedModel failed"):
        export_onnx(SearchsortedModel(), standin_inputs(EXAMPLE_BATCH), path)
    assert path.read_bytes() == b"the previous, good export"
    assert _onnx_files(tmp_path) == ["m.onnx"]


def test_falls_back_to_torchscript_when_dynamo_fails(standin, tmp_path, monkeypatch):
    def broken_dynamo(*args, **kwargs):
        raise RuntimeError("torch.export could not trace this model")

    monkeypatch.setitem(export_module._EXPORTERS, "dynamo", broken_dynamo)
    with pytest.warns(
        UserWarning, match="dynamo exporter failed.*could not trace.*exported with torchscript"
    ):
        path = export_onnx(standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx")
    assert validate_onnx(path, standin, standin_inputs, atol=ATOL, rtol=RTOL)["exporter"] == "torchscript"


def test_export_restores_training_mode(standin, tmp_path):
    standin.train()
    export_onnx(standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx", dynamo=False)
    assert standin.training


def test_export_rejects_a_batch_of_one(standin, tmp_path):
    with pytest.raises(ValueError, match="at least 2"):
        export_onnx(standin, standin_inputs(1), tmp_path / "m.onnx")


def test_summary_counts_every_node(standin, tmp_path):
    path = export_onnx(standin, standin_inputs(EXAMPLE_BATCH), tmp_path / "m.onnx", dynamo=False)
    summary = summarize_onnx(path)
    graph = onnx.load(str(path)).graph
    assert summary.nodes == len(graph.node) == sum(summary.op_counts.values())
    assert list(summary.op_counts.values()) == sorted(summary.op_counts.values(), reverse=True)
    assert summary.inputs == [("dense", "float32", ["batch", 13]), ("sparse", "int64", ["batch", 26])]
    assert summary.outputs == [("probability", "float32", ["batch"])]
    n_params = sum(p.numel() for p in standin.parameters())
    assert summary.parameters >= n_params  # weights plus the constant buffers (rows, offsets, pairs)
    text = str(summary)
    assert "dense" in text and "Gemm" in text and "Sigmoid" in text


# --------------------------------------------------------------------------------------------------------
# The real DLRM (lecture_code.model), every hashing kind
# --------------------------------------------------------------------------------------------------------


def _dlrm_setup(rng: np.random.Generator, num_features: int, max_rows: int = 12):
    """Metadata duck type (sorted random vocabularies) and inputs mixing seen, unseen and missing ids."""
    from types import SimpleNamespace

    vocabularies = [
        np.sort(rng.choice(1 << 32, size=int(rng.integers(1, max_rows)), replace=False))
        for _ in range(num_features)
    ]
    meta = SimpleNamespace(
        vocabularies=vocabularies, num_embeddings_per_feature=tuple(len(v) + 1 for v in vocabularies)
    )

    def make_inputs(batch: int):
        dense = torch.from_numpy(np.log1p(rng.exponential(10.0, (batch, NUM_DENSE))).astype(np.float32))
        columns = []
        for vocab in vocabularies:
            seen = rng.choice(vocab, size=batch)
            unseen = rng.integers(0, 1 << 32, size=batch)
            ids = np.where(rng.random(batch) < 0.6, seen, unseen)
            columns.append(np.where(rng.random(batch) < 0.1, -1, ids))  # missing = -1
        return dense, torch.from_numpy(np.stack(columns, axis=1).astype(np.int64))

    return meta, make_inputs


@pytest.fixture
def dlrm_module():
    from lecture_code import model

    return model


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("hashing", ["vocabulary", "index", "modulus"])
def test_dlrm_every_hashing_kind_exports(dlrm_module, seed, tmp_path, hashing, dynamo):
    """Few features keep the dynamo export short; the ops per feature are the same as with 26."""
    meta, make_inputs = _dlrm_setup(np.random.default_rng(seed), num_features=3)
    model = dlrm_module.DLRM.from_metadata(meta, preset="small", interaction="dot", hashing=hashing)
    path = export_onnx(model, make_inputs(EXAMPLE_BATCH), tmp_path / "dlrm.onnx", dynamo=dynamo)
    _assert_dynamic_batch(path, "probability")
    report = validate_onnx(path, model, make_inputs, n_trials=3, atol=ATOL, rtol=RTOL)
    assert report["exporter"] == ("dynamo" if dynamo else "torchscript")
    assert report["max_abs_err"] < ATOL


@pytest.mark.slow
def test_dlrm_criteo_width_default_exporter(dlrm_module, seed, tmp_path):
    """26 sparse features as in Criteo, the exporter export_onnx picks by default, both output kinds."""
    meta, make_inputs = _dlrm_setup(np.random.default_rng(seed), num_features=NUM_SPARSE)
    model = dlrm_module.DLRM.from_metadata(meta, preset="small", interaction="dot", hashing="modulus")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default exporter must not need its fallback for the DLRM
        path = export_onnx(model, make_inputs(EXAMPLE_BATCH), tmp_path / "dlrm.onnx")
    report = validate_onnx(path, model, make_inputs, atol=ATOL, rtol=RTOL)
    assert report["exporter"] == "dynamo" and report["max_abs_err"] < ATOL
    summary = summarize_onnx(path)
    assert summary.op_counts["Gemm"] == len(model.config.dense_arch_layer_sizes) + len(
        model.config.over_arch_layer_sizes
    )
    assert summary.op_counts.get("Sigmoid") == 1 and "Loop" not in summary.op_counts
    # One embedding Gather per table (plus the per-feature column selects), no Constant chains.
    assert summary.op_counts["Gather"] >= NUM_SPARSE and "Constant" not in summary.op_counts
    assert summary.parameters >= sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------------------
# The command line: python -m lecture_code.export --data DIR --checkpoint CKPT --out FILE
# --------------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_data_dir(tmp_path):
    """A real preprocessed folder (metadata + vocabularies) from 2,000 synthetic Criteo rows."""
    from lecture_code.data.preprocess import preprocess
    from lecture_code.data.synthetic import generate_criteo_tsv

    raw = generate_criteo_tsv(tmp_path / "raw.tsv", 2000, seed=3)
    preprocess(raw, tmp_path / "processed", show_progress=False)
    return tmp_path / "processed"


def test_cli_exports_a_trained_checkpoint_with_its_config(
    dlrm_module, tiny_data_dir, tmp_path, capsys, monkeypatch
):
    """The checkpoint's config picks the architecture (here the modulus hash), its state dict the weights;
    ``--screenshot`` writes the overview and the crop with a sidecar each (the browser part is stubbed here:
    tests/export/test_netron_render.py renders for real)."""
    import json

    from lecture_code.data.metadata import load_metadata
    from lecture_code.export import netron

    asked = {}

    def fake_screenshot(onnx_path, png_path, *, crop_op, crop_ranks_above):
        asked.update(onnx=Path(onnx_path), crop_op=crop_op, ranks_above=crop_ranks_above)
        png, crop_png = Path(png_path), Path(png_path).with_name("shot_crop.png")
        png.write_bytes(b"overview"), crop_png.write_bytes(b"crop")
        crop = {"png": crop_png, "box": [10, 20, 30, 40], "nodes": 5, "ops": {"MatMul": 1, "Gemm": 2}}
        return {"png": png, "nodes": 50, "graph_px": (300, 200), "chromium": "stub", "crop": crop}

    monkeypatch.setattr(netron, "screenshot_netron", fake_screenshot)

    model = dlrm_module.DLRM.from_metadata(load_metadata(tiny_data_dir), hashing="modulus")
    with torch.no_grad():
        model.over_arch.model[-1].bias.fill_(0.731)  # a value a fresh init would not have
    config = {"preset": "small", "interaction": "dot", "hashing": "modulus", "data_dir": str(tiny_data_dir)}
    torch.save({"model": model.state_dict(), "step": 7, "config": config}, tmp_path / "checkpoint.pt")

    out = tmp_path / "dlrm.onnx"
    shot = tmp_path / "shot.png"
    argv = ["--checkpoint", str(tmp_path / "checkpoint.pt"), "--out", str(out), "--exporter", "torchscript"]
    export_cli.main([*argv, "--screenshot", str(shot), "--crop-ranks-above", "3"])
    printed = capsys.readouterr().out
    assert "onnxruntime vs torch: max abs error" in printed and "sparse" in printed

    assert asked == {"onnx": out, "crop_op": "MatMul", "ranks_above": 3}  # the default op, the given ranks
    overview = json.loads(shot.with_suffix(".json").read_text())
    crop = json.loads((tmp_path / "shot_crop.json").read_text())
    assert overview["command"].endswith(f"--screenshot {shot} --crop-ranks-above 3")
    assert overview["crop"] == {
        "png": "shot_crop.png", "op": "MatMul", "ranks_above": 3, "box_px": [10, 20, 30, 40], "nodes": 5,
    }  # fmt: skip
    assert crop["crop_of"] == "shot.png" and crop["ops_in_crop"] == {"MatMul": 1, "Gemm": 2}
    assert crop["command"] == overview["command"] and "crop" not in crop

    summary = summarize_onnx(out)
    assert summary.metadata["lecture_code.exporter"] == "torchscript"
    assert summary.op_counts["Mod"] == 1  # the modulus hash (one remainder for all features), as configured
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    biases = [w for w in weights.values() if w.shape == (1,)]
    assert any(np.allclose(b, 0.731) for b in biases)  # the checkpoint's weights, not a fresh init
