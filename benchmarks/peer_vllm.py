"""vLLM's multi-LoRA Triton kernels (``lora_shrink``, ``lora_expand``, ``LoRAKernelMeta``): from vLLM where it
is installed, else loaded from the files :mod:`benchmarks.fetch_peers` extracted (``benchmarks.peers.VLLM``);
and :func:`add_lora`, the two kernels called as vLLM's own multi-LoRA linear calls them.

The kernel files run as published. The vLLM modules they import but that would pull in the whole engine are
stood in for by :func:`stubs`, each holding only the names the kernel files use, with vLLM's defaults:

- ``vllm.envs``: the four flags read, at vLLM's defaults (no batch invariance, no tuned-config folder, PDL
  allowed, no dual stream);
- ``vllm.logger``: ``init_logger`` → a ``logging`` logger with vLLM's ``warning_once`` / ``info_once``;
- ``vllm.platforms``: ``current_platform`` answering ``is_cuda``, ``has_device_capability`` and
  ``is_device_capability`` from torch;
- ``vllm.triton_utils``: ``triton`` and ``triton.language`` themselves;
- ``vllm.utils.torch_utils``: ``direct_register_custom_op`` as vLLM writes it (the op defined in a
  ``torch.library.Library("vllm", "FRAGMENT")`` from its inferred schema, so ``lora_shrink`` is
  ``torch.ops.vllm.lora_shrink`` as in vLLM; registered for CUDA as vLLM does, and for CPU so the
  interpreter's CPU tensors reach the same op) and ``async_tensor_h2d`` (without vLLM's pinned staging:
  it runs once per weight list, whose device pointers vLLM caches).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import types
from pathlib import Path

import torch
import triton
import triton.language as tl

from benchmarks.peers import VLLM, importing_from

PACKAGES = ("vllm", "vllm.lora", "vllm.lora.ops", "vllm.lora.ops.triton_ops", "vllm.utils")
ENVS = {
    "VLLM_BATCH_INVARIANT": False,
    "VLLM_TUNED_CONFIG_FOLDER": None,
    "VLLM_LORA_DISABLE_PDL": False,
    "VLLM_LORA_ENABLE_DUAL_STREAM": False,
}


class _OnceLogger(logging.LoggerAdapter):
    """A logger with vLLM's ``warning_once`` and ``info_once`` (each message logged once)."""

    def __init__(self, name: str):
        super().__init__(logging.getLogger(name), {})
        self.seen: set[tuple[int, str]] = set()

    def _once(self, level: int, msg: str) -> None:
        if (level, msg) not in self.seen:
            self.seen.add((level, msg))
            self.log(level, msg)

    def warning_once(self, msg: str) -> None:
        self._once(logging.WARNING, msg)

    def info_once(self, msg: str) -> None:
        self._once(logging.INFO, msg)


class _Platform:
    """vLLM's ``current_platform``, answering what the kernel files ask of it from torch."""

    @staticmethod
    def is_cuda() -> bool:
        return torch.cuda.is_available() and torch.version.cuda is not None

    @staticmethod
    def _capability() -> int:
        major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
        return 10 * major + minor

    def has_device_capability(self, capability: int) -> bool:
        return self.is_cuda() and self._capability() >= capability

    def is_device_capability(self, capability: int) -> bool:
        return self.is_cuda() and self._capability() == capability


def stubs() -> dict[str, dict[str, object]]:
    """The stand-in modules: name → the attributes the kernel files read from it."""
    library = torch.library.Library("vllm", "FRAGMENT")  # kept alive by the stub module holding it

    def direct_register_custom_op(op_name, op_func, mutates_args=None, **_):
        library.define(op_name + torch.library.infer_schema(op_func, mutates_args=mutates_args or []))
        for key in ("CUDA", "CPU"):
            library.impl(op_name, op_func, dispatch_key=key)

    def async_tensor_h2d(data, dtype=None, device=None, **_):
        return torch.tensor(data, dtype=dtype, device="cpu").to(device=device, non_blocking=True)

    return {
        "vllm.envs": dict(ENVS),
        "vllm.logger": {"init_logger": _OnceLogger},
        "vllm.platforms": {"current_platform": _Platform()},
        "vllm.triton_utils": {"triton": triton, "tl": tl},
        "vllm.utils.torch_utils": {
            "vllm_lib": library,
            "direct_register_custom_op": direct_register_custom_op,
            "async_tensor_h2d": async_tensor_h2d,
        },
    }


@functools.cache
def load(root: Path | None = None) -> tuple[types.SimpleNamespace | None, str | None]:
    """vLLM's kernels (see :func:`_ops`) from the fetched files, or None and the reason they cannot be
    loaded."""
    root = root or VLLM.folder
    why = VLLM.missing(root)
    if why is not None:
        return None, why
    try:
        with importing_from(root, PACKAGES, stubs()):
            modules = _import_kernel_modules()
    except Exception as e:  # noqa: BLE001 — any failure is a reason for the benchmark's row, not a crash
        return None, f"{VLLM.name}=={VLLM.version} does not import here ({type(e).__name__}: {e})"
    return _ops(*modules, f"vllm {VLLM.version}, fetched kernel files"), None


def installed_or_fetched() -> tuple[types.SimpleNamespace | None, str | None]:
    """vLLM's kernels from vLLM itself where it is installed, else from the fetched files (:func:`load`); or
    None and the reason neither can be used."""
    if importlib.util.find_spec("vllm") is None:
        return load()
    try:
        modules = _import_kernel_modules()
        from vllm import __version__
    except Exception as e:  # noqa: BLE001 — an installed vLLM that does not import: a reason, not a crash
        return None, f"the installed vLLM does not import ({type(e).__name__}: {e})"
    return _ops(*modules, f"vllm {__version__}, installed"), None


def _import_kernel_modules() -> list[types.ModuleType]:
    names = ("lora_shrink_op", "lora_expand_op", "lora_kernel_metadata", "utils")
    return [importlib.import_module(f"vllm.lora.ops.triton_ops.{name}") for name in names]


def _ops(shrink, expand, meta, utils, source: str) -> types.SimpleNamespace:
    """``lora_shrink``, ``lora_expand``, ``LoRAKernelMeta``, the modules behind them and where they came
    from."""
    return types.SimpleNamespace(
        lora_shrink=shrink.lora_shrink,
        lora_expand=expand.lora_expand,
        LoRAKernelMeta=meta.LoRAKernelMeta,
        shrink=shrink,
        expand=expand,
        utils=utils,
        source=source,
    )


def add_lora(ops: types.SimpleNamespace, x, a, b, ids: torch.Tensor, scale: float):
    """``run(y)``: ``y[t] += scale · x[t] A[id]ᵀ B[id]ᵀ`` (a, b: one stack per slice) as vLLM's
    ``PunicaWrapperGPU.add_lora_linear`` runs it: the token → adapter metadata prepared once for the step
    (``LoRAKernelMeta.prepare_tensors``), then per call an fp32 buffer, ``lora_shrink`` into it and
    ``lora_expand`` adding into y, the grid spanning every adapter slot (``specialize_active_lora=False``,
    vLLM's default). vLLM caches its weights' pointers by address (its weights are allocated once); they are
    forgotten here, so weights of an earlier shape at the same address are never taken for these."""
    ops.utils._LORA_A_PTR_DICT.clear()
    ops.utils._LORA_B_PTR_DICT.clear()
    T, L, r = x.shape[0], a[0].shape[0], a[0].shape[1]
    meta = ops.LoRAKernelMeta.make(max_loras=L, max_num_tokens=T, device=x.device)
    meta.prepare_tensors(ids)

    def run(y: torch.Tensor) -> torch.Tensor:
        buffer = torch.empty((len(a), T, r), dtype=torch.float32, device=x.device)
        ops.lora_shrink(x, a, buffer, *meta.meta_args(T, False), scale)
        ops.lora_expand(buffer, b, y, *meta.meta_args(T, False), offset_start=0, add_inputs=True)
        return y

    return run
