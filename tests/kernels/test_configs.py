"""Config carriers (hashing, equality, filling) and the persistent autotune cache (round trip, keys, a corrupt
file, a second process)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
import triton

from kernels import configs, gpu_features
from kernels.configs import BranchConfig, ConfigCache, GemmConfig, KernelConfig, resolve, token_bucket, tune
from kernels.gpu_features import GpuFeatures
from kernels.lora import tune as tune_cli


@dataclass(frozen=True)
class EjkernelLike(KernelConfig):
    """Two int fields, as in ejkernel's bug report."""

    blocksize_m: int | None = None
    blocksize_k: int | None = None


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache folder for the test (the env override), and a clean in-process fast path."""
    monkeypatch.setenv(configs.CACHE_ENV, str(tmp_path))
    configs.forget_resolved()
    yield tmp_path
    configs.forget_resolved()


def test_equal_configs_hash_equal():
    a = GemmConfig(128, 256, 64, 8, 8, 3, "rows", False)
    b = GemmConfig(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3, order="rows",
                   warp_specialize=False)  # fmt: skip
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert len({a, b}) == 1


def test_configs_differing_in_any_field_never_collide():
    base = GemmConfig(128, 256, 64, 8, 8, 3, "rows", False)
    variants = [
        GemmConfig(64, 256, 64, 8, 8, 3, "rows", False),
        GemmConfig(128, 128, 64, 8, 8, 3, "rows", False),
        GemmConfig(128, 256, 32, 8, 8, 3, "rows", False),
        GemmConfig(128, 256, 64, 4, 8, 3, "rows", False),
        GemmConfig(128, 256, 64, 8, 4, 3, "rows", False),
        GemmConfig(128, 256, 64, 8, 8, 4, "rows", False),
        GemmConfig(128, 256, 64, 8, 8, 3, "grouped", False),
        GemmConfig(128, 256, 64, 8, 8, 3, "rows", True),
        GemmConfig(128, 256, 64, 8, 8, 3, "rows", None),
        GemmConfig(128, 256, 64, 8, 8, 3, "rows", False, 2),
    ]
    keys = {base.key()} | {v.key() for v in variants}
    assert len(keys) == len(variants) + 1
    assert len({base, *variants}) == len(variants) + 1


def test_ejkernel_case_1_23_vs_12_3():
    # ejkernel joined the values without their names: "1" + "23" == "12" + "3".
    a, b = EjkernelLike(blocksize_m=1, blocksize_k=23), EjkernelLike(blocksize_m=12, blocksize_k=3)
    assert a != b and hash(a) != hash(b) and a.key() != b.key()
    assert a.key() == ("EjkernelLike", (("blocksize_m", 1), ("blocksize_k", 23)))
    assert {a: "a", b: "b"}[a] == "a"


def test_same_values_in_different_carriers_are_different():
    g, b = GemmConfig(64, 64, 64, 1, 4, 3), BranchConfig(64, 64, 64, 1, 4, 3)
    assert g != b and g.key() != b.key()


def test_filled_takes_only_missing_fields():
    rule = GemmConfig(128, 256, 64, 8, 8, 3, "rows", False, 4)
    partial = GemmConfig(block_m=64, order="grouped")
    assert not partial.is_complete()
    full = partial.filled(rule)
    assert full == GemmConfig(64, 256, 64, 8, 8, 3, "grouped", False, 4) and full.is_complete()
    assert rule.filled(partial) is rule  # nothing missing: the same object
    with pytest.raises(TypeError, match="defaults is a BranchConfig"):
        partial.filled(BranchConfig(64, 64, 64, 1, 4, 3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block_m": 96}, "block_m=96 must be a power of two"),
        ({"num_warps": 3}, "num_warps=3 must be a power of two"),
        ({"num_stages": 0}, "num_stages=0 must be an int ≥ 1"),
        ({"group_m": -1}, "group_m=-1 must be an int ≥ 1"),
        ({"order": "zigzag"}, "order='zigzag' must be 'grouped' or 'rows'"),
    ],
)
def test_invalid_fields_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GemmConfig(**kwargs)


def test_json_round_trip():
    for config in (GemmConfig(128, 256, 64, 8, 8, 3, "rows", True), BranchConfig(64, 128, 64, None, 4, 3)):
        data = json.loads(json.dumps(config.to_json()))
        assert KernelConfig.from_json(data) == config


def test_tuning_key_buckets_tokens_and_names_everything():
    assert [token_bucket(m) for m in (0, 1, 2, 3, 4096, 4097)] == [1, 1, 2, 4, 4096, 8192]
    cpu = torch.device("cpu")
    k = configs.tuning_key("lora_fwd_v3", 3000, (4096, 4096, 16), torch.bfloat16, cpu)
    assert k == configs.tuning_key("lora_fwd_v3", 2049, (4096, 4096, 16), torch.bfloat16, cpu)
    different = [
        configs.tuning_key("lora_fwd_v3", 5000, (4096, 4096, 16), torch.bfloat16, cpu),  # next bucket
        configs.tuning_key("lora_fwd_v3", 3000, (4096, 4096, 64), torch.bfloat16, cpu),
        configs.tuning_key("lora_fwd_v3", 3000, (4096, 4096, 16), torch.float16, cpu),
        configs.tuning_key("lora_bwd_dx", 3000, (4096, 4096, 16), torch.bfloat16, cpu),
    ]
    assert len({k, *different}) == 5
    name = configs.device_name(cpu)  # "cpu-interpreter" under the interpreter
    assert json.loads(configs.key_string(k)) == [
        "lora_fwd_v3", 4096, 4096, 4096, 16, "bfloat16", name, "-", f"triton {triton.__version__}"
    ]  # fmt: skip


def test_persistent_key_names_the_gpu_capability_and_triton(monkeypatch):
    h100 = GpuFeatures("NVIDIA H100 80GB HBM3", (9, 0), 132, 227 * 1024, 228 * 1024)
    monkeypatch.setattr(gpu_features, "features", lambda device: h100)
    k = configs.tuning_key("lora_fwd_v3", 8192, (4096, 4096, 16), torch.bfloat16, torch.device("cuda", 0))
    assert json.loads(configs.key_string(k))[-3:] == [h100.name, "sm_90", f"triton {triton.__version__}"]


@pytest.mark.parametrize("other", ["triton", "capability"])
def test_entry_tuned_under_another_triton_or_capability_is_ignored(cache_dir, monkeypatch, other):
    # Tuned by an installation with another Triton (or on a GPU of another generation sharing the name):
    # a fresh process here must not replay it; it takes the rule, and the other entry stays in the file.
    a100 = GpuFeatures("GPU X", (8, 0), 108, 163 * 1024, 164 * 1024)
    monkeypatch.setattr(gpu_features, "features", lambda device: a100)
    key = configs.tuning_key("unit_test_kernel", 64, (3,), torch.float16, torch.device("cuda", 0))
    tuned, rule = GemmConfig(32, 64, 16, 2, 4, 2, "grouped", False), GemmConfig(64, 64, 64, 1, 4, 3)
    with monkeypatch.context() as m:
        if other == "triton":
            m.setattr(configs, "TRITON_VERSION", "0.0.0-another")
        else:
            m.setattr(gpu_features, "features", lambda device: dataclasses.replace(a100, capability=(9, 0)))
        ConfigCache().put(key, tuned, 0.1)
        assert ConfigCache().get(key) == tuned  # replayed where it was tuned
    configs.forget_resolved()
    assert ConfigCache().get(key) is None
    assert resolve(key, lambda: rule) is rule
    assert len(json.loads((cache_dir / configs.CACHE_FILE).read_text())["entries"]) == 1  # kept, not used


def _fake_run(times_ms):
    """A 'kernel' whose run time depends on its config; counts its calls."""
    calls = []

    def run(config):
        calls.append(config)
        if times_ms[config] is None:
            raise RuntimeError("out of resource: shared memory")
        x = torch.randn(64, 64)
        for _ in range(int(times_ms[config] * 20)):
            x = x @ x.t() / 64
        return x

    return run, calls


def test_tune_picks_fastest_skips_failures_and_persists(cache_dir):
    slow, fast, broken = (
        GemmConfig(64, 64, 64, 1, 4, 3, "rows", False),
        GemmConfig(32, 32, 32, 1, 4, 3),
        GemmConfig(16, 16, 16, 1, 4, 1),
    )
    run, _ = _fake_run({slow: 5.0, fast: 0.5, broken: None})
    key = configs.tuning_key("unit_test_kernel", 100, (7,), torch.float32, torch.device("cpu"))
    with pytest.warns(UserWarning, match="failed \\(RuntimeError: out of resource"):
        best, timings = tune(key, [slow, broken, fast], run)
    assert best == fast and dict(timings)[broken] == float("inf")
    assert resolve(key, lambda: slow) == fast  # the fast path now holds the tuned config
    fresh = ConfigCache()  # as a new process would: read the file
    assert fresh.get(key) == fast
    assert not [p for p in cache_dir.iterdir() if p.name != configs.CACHE_FILE]  # no temp files left behind


def test_a_cpu_key_is_timed_by_the_wall_clock_on_a_gpu_machine_too(cache_dir, monkeypatch):
    # CUDA events around CPU work time nothing (the GPU suite once picked the slow config that way)
    import triton.testing

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(configs, "interpreting", lambda: False)
    monkeypatch.setattr(triton.testing, "do_bench", lambda *a, **k: pytest.fail("CUDA timer for a CPU key"))
    slow, fast = GemmConfig(64, 64, 64, 1, 4, 3, "rows", False), GemmConfig(32, 32, 32, 1, 4, 3)
    run, _ = _fake_run({slow: 5.0, fast: 0.5})
    key = configs.tuning_key("unit_test_kernel", 100, (8,), torch.float32, torch.device("cpu"))
    assert tune(key, [slow, fast], run)[0] == fast


def test_resolve_without_tuning_uses_the_rule(cache_dir):
    key = configs.tuning_key("unit_test_kernel", 5, (1,), torch.float32, torch.device("cpu"))
    rule = GemmConfig(64, 64, 64, 1, 4, 3, "rows", False)
    assert resolve(key, lambda: rule) is rule
    assert not (cache_dir / configs.CACHE_FILE).exists()  # nothing tuned, nothing written


def test_entries_from_several_keys_coexist(cache_dir):
    cache = ConfigCache()
    keys = [configs.tuning_key("k", m, (3,), torch.float16, torch.device("cpu")) for m in (16, 1024)]
    cache.put(keys[0], GemmConfig(64, 64, 64, 1, 4, 3, "rows", False), 1.0)
    ConfigCache().put(keys[1], BranchConfig(32, 64, 64, 2, 4, 3), 2.0)  # another writer
    cache.put(
        keys[0], GemmConfig(128, 64, 64, 1, 4, 3, "rows", False), 0.5
    )  # merges, keeps the other's entry
    fresh = ConfigCache()
    assert fresh.get(keys[0]) == GemmConfig(128, 64, 64, 1, 4, 3, "rows", False)
    assert fresh.get(keys[1]) == BranchConfig(32, 64, 64, 2, 4, 3)


@pytest.mark.parametrize(
    "content", ["{not json", '{"format": 1, "entries": {"k": {"config": {"type": "Nope"}}}}', "[]"]
)
def test_corrupt_cache_is_ignored_with_a_warning_and_rebuilt(cache_dir, content):
    path = cache_dir / configs.CACHE_FILE
    path.write_text(content)
    key = configs.tuning_key("k", 8, (1,), torch.float32, torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="unreadable.*ignoring it"):
        assert ConfigCache().get(key) is None
    with pytest.warns(RuntimeWarning):  # put re-reads the bad file once more, then replaces it
        ConfigCache().put(key, GemmConfig(64, 64, 64, 1, 4, 3, "rows", False))
    assert json.loads(path.read_text())["format"] == configs.CACHE_FORMAT
    assert ConfigCache().get(key) == GemmConfig(64, 64, 64, 1, 4, 3, "rows", False)


def test_second_process_reads_the_cache_and_does_not_tune(cache_dir):
    key = configs.tuning_key("unit_test_kernel", 300, (5,), torch.float16, torch.device("cpu"))
    tuned = GemmConfig(32, 64, 16, 2, 4, 2, "grouped", True)
    ConfigCache().put(key, tuned, 0.1)
    code = (
        "import json, torch; from kernels import configs\n"
        "key = configs.tuning_key('unit_test_kernel', 260, (5,), torch.float16, torch.device('cpu'))\n"
        "def rule(): raise SystemExit('fell back to the rule: the cache was not read')\n"
        "print(json.dumps(configs.resolve(key, rule).to_json()))\n"
    )
    env = {**os.environ, configs.CACHE_ENV: str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert KernelConfig.from_json(json.loads(out.stdout)) == tuned


def test_pretune_command_fills_the_cache(cache_dir, capsys):
    assert tune_cli.main(["tune", "--shape", "16,32,24,4", "--dtype", "float32"]) == 0
    printed = capsys.readouterr().out
    assert "forward v3" in printed and "backward dX" in printed and "branch v1" in printed
    entries = json.loads((cache_dir / configs.CACHE_FILE).read_text())["entries"]
    kernels_tuned = sorted(json.loads(k)[0] for k in entries)
    assert kernels_tuned == ["lora_branch", "lora_bwd_dx_fused", "lora_fwd_v3"]
    assert tune_cli.main(["show"]) == 0 and "lora_fwd_v3" in capsys.readouterr().out
