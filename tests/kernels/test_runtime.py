"""kernels.runtime: the one decision of where kernels run (device, interpreter, sizes) under every setting."""

from __future__ import annotations

import os

import pytest
import torch
import triton

from kernels import runtime

OFF, ON = ["0", "", "false", "off", "no", "2", " 1"], ["1", "true", "TRUE", "on", "yes", "Y"]


@pytest.mark.parametrize(
    "has_gpu, interpret, device, mode",
    [
        pytest.param(True, None, "cuda", "gpu", id="cuda-present"),
        pytest.param(True, "0", "cuda", "gpu", id="cuda-present-interpret-0"),
        pytest.param(True, "1", "cpu", "cpu-interpreter", id="cuda-present-but-interpreting"),
        pytest.param(False, "1", "cpu", "cpu-interpreter", id="no-cuda"),
        pytest.param(False, None, "cpu", "cpu-interpreter", id="no-cuda-unset"),
    ],
)
def test_default_device_and_mode(has_gpu, interpret, device, mode, monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: has_gpu)
    if interpret is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
    assert runtime.default_device() == torch.device(device)
    assert runtime.mode() == mode
    assert runtime.sizes() == (runtime.FULL if mode == "gpu" else runtime.SMALL)
    assert runtime.autotune_configs(["a", "b"]) == (["a"] if interpret == "1" else ["a", "b"])


@pytest.mark.parametrize("value", OFF + ON)
def test_interpreting_reads_the_variable_as_triton_does(value, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert runtime.interpreting() == (value in ON)
    assert runtime.interpreting() == triton.knobs.runtime.interpret  # the installed Triton agrees


@pytest.mark.parametrize(
    "has_gpu, before, after",
    [
        pytest.param(False, None, "1", id="no-cuda-sets-it"),
        pytest.param(False, "0", "0", id="no-cuda-user-choice-kept"),
        pytest.param(True, None, None, id="cuda-leaves-it-unset"),
        pytest.param(True, "1", "1", id="cuda-user-choice-kept"),
    ],
)
def test_ensure_mode_turns_the_interpreter_on_only_without_cuda(has_gpu, before, after, monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: has_gpu)
    # set first, so that monkeypatch records the variable's state before the test (unset on a GPU machine)
    # and restores it, whatever ensure_mode sets; a bare delenv of an unset variable records nothing
    monkeypatch.setenv("TRITON_INTERPRET", "recorded")
    if before is None:
        monkeypatch.delenv("TRITON_INTERPRET")
    else:
        monkeypatch.setenv("TRITON_INTERPRET", before)
    mode = runtime.ensure_mode()
    assert os.environ.get("TRITON_INTERPRET") == after
    assert mode == ("gpu" if has_gpu and after != "1" else "cpu-interpreter")


def test_bf16_dots_upcast_only_when_interpreting(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert runtime.dot_upcast(torch.bfloat16) and not runtime.dot_upcast(torch.float16)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not runtime.dot_upcast(torch.bfloat16)
