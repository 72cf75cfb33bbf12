"""The screenshot command draws every picture (but Netron) with a sidecar on a tiny run: on the CPU here, on
the GPU of a GPU machine (where the GPU-only measurements join in)."""

from __future__ import annotations

import json

import pytest
import torch

from lecture_code.environment import device
from lecture_code.perf import sidecars
from lecture_code.perf.host_sync import LAUNCH_BLOCKING
from lecture_code.perf.kaggle_tables import kaggle_tables
from lecture_code.perf.screenshots import PICTURES, SETTINGS, Context, Skip, draw_kaggle_tables, main

EXPECTED = [
    "dlrm_timeline",
    "dlrm_op_breakdown",
    "host_sync",
    "host_sync_timeline",
    "step_anatomy",
    "kaggle_tables",
    "kaggle_tables_timeline",
    "hash_cost",
    "hash_all_features",
    "hashing_stages",
    "eager_vs_compiled",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _spread_ok(row: dict) -> bool:
    return row["ms_min"] <= row["ms_per_step"] <= row["ms_max"]


def test_tiny_run_draws_every_picture_with_a_sidecar(tiny_data_dir, tmp_path):
    out = tmp_path / "shots"
    argv = ["--tiny", "--data", str(tiny_data_dir), "--out", str(out), "--run-dir", str(tmp_path / "runs")]
    threads = torch.get_num_threads()
    made = main([*argv, "--skip", "netron"])
    assert torch.get_num_threads() == threads  # main restores what bench.setup changed
    assert sorted(p.stem for p in made) == sorted(EXPECTED)
    assert list(PICTURES) == [
        "profile",
        "host_sync",
        "step_anatomy",
        "kaggle_tables",
        "hash_cost",
        "hashing_stages",
        "eager_vs_compiled",
        "netron",
    ]
    info = {}
    for name in EXPECTED:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5_000
        info[name] = json.loads((out / f"{name}.json").read_text())
        assert info[name]["picture"] == png.name and info[name]["format"] == sidecars.FORMAT
        assert info[name]["command"].startswith("python -m lecture_code.perf.screenshots --tiny")
        for key in ("device", "torch", "triton", "date", "settings"):
            assert info[name][key], key
        assert info[name]["settings"]["batch_size"] == 64
        assert sidecars.current(name, out) is not None

    stages = info["hashing_stages"]["results"]
    assert len(stages) == 5 and all(_spread_ok(r) and len(r["samples_ms"]) == 2 for r in stages)
    on_gpu = device().type == "cuda"  # the device main measures on
    sync = info["host_sync"]["results"]
    labels = ["B=64: loss.item() every step", "B=64: loss summed on the device"]
    assert [r["label"] for r in sync] == labels + ([f"B=64: {LAUNCH_BLOCKING}"] if on_gpu else [])
    assert all(_spread_ok(r) for r in sync)
    assert ("child process" if on_gpu else "on a GPU only") in info["host_sync"]["note"]
    compiled = info["eager_vs_compiled"]["results"]
    assert [r["label"] for r in compiled] == ["eager", "torch.compile"]
    assert compiled[1]["first_step_s"] > compiled[0]["first_step_s"]  # the compile is paid on the first call

    anatomy = info["step_anatomy"]
    assert [r["batch_size"] for r in anatomy["results"]] == list(SETTINGS["tiny"].anatomy_batches)
    assert all((r["gpu_busy_ms"] is not None) == on_gpu for r in anatomy["results"])
    first = "B=64: the step takes" if on_gpu else "No GPU in this run"
    assert anatomy["explanation"][0].startswith(first)
    timeline = info["dlrm_timeline"]
    assert timeline["light_profile"]["steps"] == timeline["heavy_profile"]["steps"] == 3
    assert timeline["unprofiled"]["repeats"] == 2
    kaggle = info["kaggle_tables"]
    assert kaggle["kaggle_cap"] == 200 and kaggle["results"][1]["table_rows"] == sum(kaggle_tables(cap=200))
    features = info["hash_all_features"]["results"]
    assert len(features) == 4 and features[0]["aten_ops"] > features[1]["aten_ops"]


def test_only_draws_what_is_asked(tiny_data_dir, tmp_path):
    out = tmp_path / "one"
    made = main(["--tiny", "--data", str(tiny_data_dir), "--out", str(out), "--only", "hash_cost"])
    assert [p.name for p in made] == ["hash_cost.png", "hash_all_features.png"]
    names = ["hash_all_features.json", "hash_all_features.png", "hash_cost.json", "hash_cost.png"]
    assert sorted(p.name for p in out.iterdir()) == names


def test_cpu_settings_skip_the_kaggle_tables(tmp_path):
    ctx = Context(tmp_path, tmp_path, None, SETTINGS["cpu"], "test")
    with pytest.raises(Skip, match="GPU"):
        draw_kaggle_tables(ctx)
    assert SETTINGS["gpu"].kaggle_tables and SETTINGS["gpu"].kaggle_cap is None  # the real sizes on a GPU


def test_current_refuses_missing_and_older_sidecars(tmp_path):
    assert sidecars.current("nothing", tmp_path) is None
    (tmp_path / "old.json").write_text(json.dumps({"picture": "old.png", "results": []}))
    assert sidecars.current("old", tmp_path) is None  # written before the format number existed
    (tmp_path / "new.json").write_text(json.dumps({"format": sidecars.FORMAT, "results": [1]}))
    png, info = sidecars.current("new", tmp_path)
    assert png == tmp_path / "new.png" and info["results"] == [1]
