"""The screenshot command draws every picture (but Netron) with a sidecar on a tiny CPU run."""

from __future__ import annotations

import json

from lecture_code.perf.screenshots import PICTURES, main

EXPECTED = [
    "dlrm_timeline",
    "dlrm_op_breakdown",
    "host_sync",
    "host_sync_timeline",
    "hash_cost",
    "hashing_stages",
    "eager_vs_compiled",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_tiny_run_draws_every_picture_with_a_sidecar(tiny_data_dir, tmp_path):
    out = tmp_path / "shots"
    argv = ["--tiny", "--data", str(tiny_data_dir), "--out", str(out), "--run-dir", str(tmp_path / "runs")]
    made = main([*argv, "--skip", "netron"])
    assert sorted(p.stem for p in made) == sorted(EXPECTED)
    assert set(PICTURES) == {
        "profile",
        "host_sync",
        "hash_cost",
        "hashing_stages",
        "eager_vs_compiled",
        "netron",
    }
    for name in EXPECTED:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5_000
        info = json.loads((out / f"{name}.json").read_text())
        assert info["picture"] == png.name
        assert info["command"].startswith("python -m lecture_code.perf.screenshots --tiny")
        for key in ("device", "torch", "triton", "date", "settings"):
            assert info[key], key
        assert info["settings"]["batch_size"] == 64
    stages = json.loads((out / "hashing_stages.json").read_text())["results"]
    assert len(stages) == 4 and all(r["ms_per_step"] > 0 for r in stages)
    compiled = json.loads((out / "eager_vs_compiled.json").read_text())["results"]
    assert [r["label"] for r in compiled] == ["eager", "torch.compile"]
    assert compiled[1]["first_step_s"] > compiled[0]["first_step_s"]  # the compile is paid on the first call


def test_only_draws_what_is_asked(tiny_data_dir, tmp_path):
    out = tmp_path / "one"
    made = main(["--tiny", "--data", str(tiny_data_dir), "--out", str(out), "--only", "hash_cost"])
    assert [p.name for p in made] == ["hash_cost.png"]
    assert sorted(p.name for p in out.iterdir()) == ["hash_cost.json", "hash_cost.png"]
