"""Kernel-config carriers, candidate lists and a persistent autotune cache.

A *carrier* is a frozen dataclass of launch parameters (block sizes, warps, stages, group size, split).
``None`` in a field means "choose automatically": :meth:`KernelConfig.filled` takes the missing fields from a
rule's config. Carriers are hashable and compare by value *and by type*: two configs are equal exactly when
they are of the same class and every named field is equal, so equal configs hash equal and configs that
differ in any field are different dictionary keys. (ejkernel's carriers hashed a string made by joining the
values without their names, so ``blocksize_m=1, blocksize_k=23`` and ``blocksize_m=12, blocksize_k=3`` both
became ``"123"``; here the dataclass hash is over the tuple of values, and :meth:`KernelConfig.key` and the
JSON form name every field.)

Autotuning is keyed by :func:`tuning_key`: the kernel's name, a *token-count bucket* (the next power of two
of M, so every M gets its own tuned entry up to a factor of two; NeMo's keys left M out, so the first
sequence length decided for all), the other dimensions, the dtype and the device; the persistent cache files
the device as its name, its compute capability and the Triton version (:func:`key_string`), so a config tuned
under another Triton or on another GPU generation is never replayed: its key does not match, and it is ignored
(kept in the file for the installation that wrote it). Resolving a config on
each call (:func:`resolve`) is one dictionary lookup keyed by that tuple; a miss reads the persistent cache,
and if that has nothing it takes the kernel's rule (no timing on the call path: tuning is explicit,
through :func:`tune` or the pre-tune command, so a training step never stalls on a benchmark).

The persistent cache is one JSON file in a user cache folder, ``$FUSED_KERNELS_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/fused_kernels`` or ``~/.cache/fused_kernels``. Writes go to a temporary file in the same
folder, then ``os.replace`` (atomic on POSIX): a reader sees the old file or the new one, never half of one.
A file that does not parse is ignored with a warning and rewritten on the next tune. A second process reads
the file and does not re-tune.

Interpreter mode (CPU): :func:`tune` times candidates with a CPU clock (``time.perf_counter``), since
``triton.testing.do_bench`` needs a GPU driver; the call path uses the rule's single config.

Pre-tune the LoRA kernels from a shell (GPU), then every later process starts tuned
(:mod:`kernels.lora.tune`)::

    python -m kernels.lora.tune tune --shape 8192,4096,4096,16 --shape 512,4096,4096,16 --dtype bfloat16
    python -m kernels.lora.tune show
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import triton

from kernels import gpu_features
from kernels.launch import next_pow2
from kernels.runtime import interpreting

__all__ = [
    "CACHE_ENV",
    "CANDIDATES",
    "BranchConfig",
    "ConfigCache",
    "GemmConfig",
    "KernelConfig",
    "MlpConfig",
    "cache_dir",
    "default_cache",
    "device_capability",
    "device_name",
    "key_string",
    "resolve",
    "token_bucket",
    "tune",
    "tuning_key",
]

CACHE_ENV = "FUSED_KERNELS_CACHE_DIR"
CACHE_FILE = "autotune.json"
CACHE_FORMAT = 2  # bump when the meaning of a stored entry changes; other formats are ignored
TRITON_VERSION = triton.__version__  # part of every persistent key (a module global: tests patch it)


@dataclass(frozen=True)
class KernelConfig:
    """Base of every carrier: validation, naming, JSON and filling of ``None`` fields."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name.startswith("block_") or f.name in ("num_warps",):
                if not isinstance(value, int) or value < 1 or value & (value - 1):
                    raise ValueError(f"{type(self).__name__}: {f.name}={value!r} must be a power of two ≥ 1")
            elif f.type in ("int | None", int) and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{type(self).__name__}: {f.name}={value!r} must be an int ≥ 1")

    def key(self) -> tuple:
        """``(class name, ((field, value), ...))``: names every field, so no two configs share a key."""
        return (type(self).__name__, tuple((f.name, getattr(self, f.name)) for f in fields(self)))

    def to_json(self) -> dict:
        return {"type": type(self).__name__, "fields": dataclasses.asdict(self)}

    @staticmethod
    def from_json(data: dict) -> KernelConfig:
        cls = CONFIG_TYPES[data["type"]]
        return cls(**data["fields"])

    def filled(self, defaults: KernelConfig) -> KernelConfig:
        """This config with every ``None`` field taken from ``defaults`` (a config of the same type)."""
        if type(defaults) is not type(self):
            raise TypeError(f"{type(self).__name__}.filled: defaults is a {type(defaults).__name__}")
        missing = {f.name: getattr(defaults, f.name) for f in fields(self) if getattr(self, f.name) is None}
        return dataclasses.replace(self, **missing) if missing else self

    def is_complete(self) -> bool:
        return all(getattr(self, f.name) is not None for f in fields(self))


@dataclass(frozen=True)
class GemmConfig(KernelConfig):
    """A persistent tensor-descriptor GEMM (the LoRA forward and the LoRA backward's dX kernel).

    ``order``: ``"grouped"`` walks tiles ``pid, pid + programs, …`` in GROUP_M-row super-blocks (L2 reuse);
    ``"rows"`` hands out *runs* of ``run_n`` consecutive N-tiles of one row block, the runs in the same
    grouped order, so a per-row-block operand (LoRA's ``s·x Aᵀ``) is loaded once per run instead of per tile
    while the tiles in flight still share few row and column blocks in L2. ``run_n`` (rows order only).
    ``warp_specialize``: Triton's producer/consumer warps for the K loop (``tl.range(warp_specialize=…)``);
    only with ``s·x Aᵀ`` precomputed (a fused shrink's tiles may wait, see :mod:`kernels.lora.gemm`).
    """

    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    group_m: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    order: str | None = None
    warp_specialize: bool | None = None
    run_n: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.order not in (None, "grouped", "rows"):
            raise ValueError(f"GemmConfig: order={self.order!r} must be 'grouped' or 'rows'")


@dataclass(frozen=True)
class BranchConfig(KernelConfig):
    """A row-block kernel that keeps a ``[block_m, r]`` tile on chip (LoRA v1 branch; the fused MLP's shape).

    ``split``: programs that share one row block, each writing every split-th output tile (fills the GPU when
    there are few row blocks; each recomputes the row block's small tile).
    """

    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    split: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None


@dataclass(frozen=True)
class MlpConfig(KernelConfig):
    """The fused MLP (:mod:`kernels.mlp.fused_mlp`): a ``[block_m, block_h]`` hidden tile kept on chip.

    ``block_h`` is the whole hidden width padded to a power of two (it must cover H); ``split`` as in
    :class:`BranchConfig`.
    """

    block_m: int | None = None
    block_h: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    split: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None


CONFIG_TYPES: dict[str, type[KernelConfig]] = {c.__name__: c for c in (GemmConfig, BranchConfig, MlpConfig)}

# Candidate lists per kernel family, timed by :func:`tune`. The GEMM list centres on what reached 0.98–1.06×
# cuBLAS on an H100 (measured at design: 128×256×64, 3 stages, 8 warps, grouped order), plus narrower tiles
# for large r (the [BLOCK_M, r] fp32 tile of x Aᵀ lives in registers beside the accumulator) and small M.
_G = GemmConfig
CANDIDATES: dict[str, list[KernelConfig]] = {
    "gemm": [
        _G(128, 256, 64, 8, 8, 3, "rows", False, 4),
        _G(128, 256, 64, 8, 8, 3, "rows", False, 2),
        _G(128, 256, 64, 8, 8, 3, "grouped", False, 4),
        _G(128, 256, 64, 8, 8, 3, "grouped", True, 4),
        _G(128, 128, 64, 8, 8, 4, "rows", False, 4),
        _G(128, 128, 64, 8, 4, 4, "grouped", False, 4),
        _G(128, 128, 128, 8, 8, 3, "rows", False, 4),
        _G(64, 256, 64, 8, 4, 4, "rows", False, 4),
        _G(64, 128, 64, 8, 4, 4, "grouped", False, 4),
    ],
    "branch": [
        BranchConfig(64, 128, 64, None, 4, 3),
        BranchConfig(128, 128, 64, None, 8, 3),
        BranchConfig(64, 64, 128, None, 4, 3),
        BranchConfig(32, 128, 128, None, 4, 4),
    ],
}


def token_bucket(m: int) -> int:
    """The token-count bucket of ``m`` rows: the next power of two (1 for m ≤ 1)."""
    return next_pow2(m)


def device_name(device: torch.device) -> str:
    """The name tuning results are filed under: the GPU's name, or ``"cpu-interpreter"``."""
    if device.type != "cuda":
        return "cpu-interpreter" if interpreting() else device.type
    return gpu_features.features(device).name


def device_capability(device: torch.device) -> str:
    """``"sm_90"`` for a CUDA device of compute capability 9.0; ``"-"`` for any other device."""
    f = gpu_features.features(device)
    return "-" if f is None else f"sm_{f.capability[0]}{f.capability[1]}"


def tuning_key(kernel: str, m: int, dims: Sequence[int], dtype: torch.dtype, device: torch.device) -> tuple:
    """``(kernel, token bucket of m, *dims, dtype, device)``: hashable and cheap to build on every call.

    The persistent cache files it under the JSON list ``[kernel, bucket, *dims, "bfloat16", device name,
    "sm_90", "triton 3.6.0"]`` (:func:`key_string`), so entries are shared by every device of the same name
    and capability under the same Triton, and by no other.
    """
    return (kernel, token_bucket(m), *dims, dtype, device)


def cache_dir() -> Path:
    """``$FUSED_KERNELS_CACHE_DIR``, else ``$XDG_CACHE_HOME/fused_kernels``, else
    ``~/.cache/fused_kernels``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fused_kernels"


def _json_part(part):
    if isinstance(part, torch.dtype):
        return str(part).removeprefix("torch.")
    if isinstance(part, torch.device):
        return device_name(part)
    return part


def key_string(key: tuple) -> str:
    """The JSON text a key is stored under: dtype by name, a device by its name, its compute capability and
    the Triton version (:data:`TRITON_VERSION`)."""
    parts = []
    for p in key:
        parts.append(_json_part(p))
        if isinstance(p, torch.device):
            parts += [device_capability(p), f"triton {TRITON_VERSION}"]
    return json.dumps(parts, separators=(",", ":"))


class ConfigCache:
    """Tuned configs by key: an in-memory dict in front of one JSON file (read once, written atomically)."""

    def __init__(self, path: Path | None = None):
        self._path = path
        self._disk: dict[str, dict] | None = None  # key string → {"config": …, "ms": …}

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else cache_dir() / CACHE_FILE

    def _read(self) -> dict[str, dict]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            if data.get("format") != CACHE_FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError(f"not a format-{CACHE_FORMAT} autotune cache")
            for entry in data["entries"].values():  # every entry must rebuild, or the file is not trusted
                KernelConfig.from_json(entry["config"])
            return data["entries"]
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            warnings.warn(
                f"autotune cache {self.path} is unreadable ({err}); ignoring it (it is rewritten on the next "
                "tune)",
                RuntimeWarning,
                stacklevel=3,
            )
            return {}

    def entries(self) -> dict[str, dict]:
        if self._disk is None:
            self._disk = self._read()
        return self._disk

    def get(self, key: tuple) -> KernelConfig | None:
        entry = self.entries().get(key_string(key))
        return None if entry is None else KernelConfig.from_json(entry["config"])

    def put(self, key: tuple, config: KernelConfig, ms: float | None = None) -> None:
        """Store ``config`` for ``key`` and rewrite the file (merging what other processes wrote)."""
        merged = self._read()
        merged[key_string(key)] = {"config": config.to_json(), "ms": ms}
        self._disk = merged
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"format": CACHE_FORMAT, "entries": merged}, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def forget(self) -> None:
        """Drop what was read, so the next lookup reads the file again."""
        self._disk = None


_CACHE = ConfigCache()
_RESOLVED: dict[tuple, KernelConfig] = {}  # the per-call fast path: key → complete config


def default_cache() -> ConfigCache:
    return _CACHE


def resolve(key: tuple, rule: Callable[[], KernelConfig], cache: ConfigCache | None = None) -> KernelConfig:
    """The config for ``key``: tuned (memory, then the JSON cache) if there is one, else ``rule()``.

    A dictionary lookup per call once a key has been seen; ``rule`` must return a complete config.
    """
    config = _RESOLVED.get(key)
    if config is None:
        config = (cache or _CACHE).get(key)
        if config is None:
            config = rule()
        _RESOLVED[key] = config
    return config


def forget_resolved() -> None:
    """Clear the in-process fast path (tests; after the cache file changed under a running process)."""
    _RESOLVED.clear()
    _CACHE.forget()


def _time_ms(fn: Callable[[], object], reps: int, device: torch.device) -> float:
    """Median ms of ``fn``: CUDA events on a CUDA device, the wall clock elsewhere (a CPU-keyed tune on a GPU
    machine would otherwise time nothing)."""
    if interpreting() or device.type != "cuda":
        fn()
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(samples)
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def tune(
    key: tuple,
    candidates: Sequence[KernelConfig],
    run: Callable[[KernelConfig], object],
    cache: ConfigCache | None = None,
    reps: int = 3,
) -> tuple[KernelConfig, list[tuple[KernelConfig, float]]]:
    """Time ``run(config)`` for every candidate, store the fastest for ``key``; return it and all timings.

    A candidate that fails to compile or launch (too much shared memory, say) is skipped and timed as inf.
    A CUDA key (its last part is the device): ``triton.testing.do_bench`` median; otherwise (CPU, the
    interpreter) the median of ``reps`` ``perf_counter`` runs.
    """
    if not candidates:
        raise ValueError("tune: no candidate configs")
    timings = []
    for config in candidates:
        try:
            ms = _time_ms(lambda config=config: run(config), reps, key[-1])
        except Exception as err:  # noqa: BLE001 — a candidate that does not fit is a result, not an error
            warnings.warn(f"tune {key[0]}: {config} failed ({type(err).__name__}: {err})", stacklevel=2)
            ms = float("inf")
        timings.append((config, ms))
    best, best_ms = min(timings, key=lambda pair: pair[1])
    if best_ms == float("inf"):
        raise RuntimeError(f"tune {key[0]}: every candidate failed for key {key}")
    (cache or _CACHE).put(key, best, best_ms)
    _RESOLVED[key] = best
    return best, timings
