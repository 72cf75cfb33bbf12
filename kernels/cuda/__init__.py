"""CUDA C++ versions of the fused pointwise kernels, built on first use by ``torch.utils.cpp_extension``.

Math (``x``, ``y`` ``[..., N]``; ``bias`` ``[N]`` broadcast over the rows)::

    bias_relu(x, bias)             = relu(x + bias)
    add_mul_relu(x, bias, y, alpha) = relu(x + bias + alpha * y)

Bytes moved (n = x.numel(), element size s): bias_relu reads n + N and writes n elements, ≈ 2·n·s;
add_mul_relu reads 2n + N and writes n, ≈ 3·n·s. Both are memory-bound (see the comment block at the top of
``pointwise.cuh`` for the launch geometry and the original-lecture mistakes it fixes).

Files (the kernel code never includes a torch header, so CI compiles it with ``nvcc -ptx`` on a CPU):

- ``pointwise.cuh``: the ``__global__`` kernels (fp32/fp16/bf16, a 16-byte-pack path and a scalar path)
  and their host launchers; ``pointwise.cu`` instantiates them; ``pointwise.h`` declares the launchers.
- ``binding.cpp``: the thin torch binding (checks, allocation, current stream), registered as
  ``torch.ops.fused_kernels_cuda.*``.
- ``CMakeLists.txt`` + ``tests/``: standalone C++ tests against libtorch (see ``README.md`` here).

Importing this module never builds or loads anything, so it is safe on a CPU machine; the first call to
:func:`bias_relu` / :func:`add_mul_relu` (or :func:`load`) compiles the extension (about a minute, cached
by torch under ``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``) and raises a clear error
where that cannot work. The ops are forward-only: no autograd formula is registered.

Bad inputs: :func:`bias_relu` and :func:`add_mul_relu` check their arguments in Python before the op runs
(:func:`check_inputs`: the checks, words and exception types of ``check_inputs`` in ``binding.cpp``), so the
Python API never depends on the C++ throw path; the ops (``torch.ops.fused_kernels_cuda.*``) check again
for callers that reach them directly. :func:`load` comes first: on a machine without a GPU, its error is
the one to see.
"""

from __future__ import annotations

import functools
import numbers
import re
from pathlib import Path

import torch

__all__ = [
    "DTYPES",
    "SOURCES",
    "add_mul_relu",
    "bias_relu",
    "check_inputs",
    "comment_block",
    "definition",
    "load",
]

CUDA_DIR = Path(__file__).resolve().parent
SOURCES = [CUDA_DIR / "pointwise.cu", CUDA_DIR / "binding.cpp"]
EXTENSION_NAME = "fused_kernels_cuda"  # also the namespace of the ops: torch.ops.fused_kernels_cuda.*

# No --use_fast_math: it would flush fp32 subnormals to zero (torch does not) and buys nothing here (no
# division, no transcendentals). -lineinfo maps SASS back to source lines in Nsight Compute.
EXTRA_CUDA_CFLAGS = ["-O3", "-lineinfo"]
EXTRA_CFLAGS = ["-O3"]
DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # the storage types pointwise.cu instantiates


def definition(name: str, path: Path | str = CUDA_DIR / "pointwise.cuh") -> str:
    """The source text of the function or kernel ``name`` in a file here, as written: the comment and
    ``template`` lines just above it, the signature, and the body to its closing brace. For showing the real
    code in a notebook (never a retyped copy)."""
    lines = Path(path).read_text().splitlines()
    call = re.compile(rf"\b{re.escape(name)}\(")
    starts = [i for i, line in enumerate(lines) if call.search(line) and not line.lstrip().startswith("//")]
    if not starts:
        raise ValueError(f"no definition of {name!r} in {Path(path).name}")
    first = starts[0]
    while first > 0 and lines[first - 1].strip():  # the template line, attributes, the comment above
        first -= 1
    depth, opened = 0, False
    for last in range(starts[0], len(lines)):
        depth += lines[last].count("{") - lines[last].count("}")
        opened = opened or "{" in lines[last]
        if opened and depth == 0:
            return "\n".join(lines[first : last + 1])
    raise ValueError(f"the body of {name!r} in {Path(path).name} never closes")


def comment_block(starts_with: str, path: Path | str = CUDA_DIR / "pointwise.cuh") -> str:
    """The run of ``//`` comment lines in a file here from the line that starts ``// starts_with``."""
    lines = Path(path).read_text().splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(f"// {starts_with}")), None)
    if begin is None:
        raise ValueError(f"no comment starting {starts_with!r} in {Path(path).name}")
    end = begin
    while end < len(lines) and lines[end].startswith("//"):
        end += 1
    return "\n".join(lines[begin:end])


def _why_unavailable() -> str | None:
    """None when this machine can build and run the extension, else the reason."""
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a CPU build (torch.version.cuda is None)"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


@functools.cache
def load(verbose: bool = False):
    """Build (first time only) and load the extension; return its ops, ``torch.ops.fused_kernels_cuda``.

    torch rebuilds when a source file changes. Raises ``RuntimeError`` on a machine without a CUDA GPU or
    with a CPU build of torch.
    """
    reason = _why_unavailable()
    if reason is not None:
        raise RuntimeError(
            "kernels.cuda needs a CUDA GPU and a CUDA build of torch: "
            f"{reason}. On a CPU machine, read the kernels' PTX instead "
            "(`nvcc -ptx -arch=sm_90 kernels/cuda/pointwise.cu`, see tests/kernels/test_cuda_compile.py)."
        )
    from torch.utils import cpp_extension

    cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(p) for p in SOURCES],
        extra_cflags=EXTRA_CFLAGS,
        extra_cuda_cflags=EXTRA_CUDA_CFLAGS,
        is_python_module=False,  # TORCH_LIBRARY registration: loading the library registers the ops
        verbose=verbose,
    )
    return getattr(torch.ops, EXTENSION_NAME)


def _dims(values) -> str:
    """``[4, 8]``: sizes or strides as binding.cpp's ``dims_str`` writes them."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def check_inputs(
    op: str, x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor | None = None, need_cuda: bool = True
) -> None:
    """The checks of ``check_inputs`` in ``binding.cpp``, in its order, with its words and exception types
    (ValueError for TORCH_CHECK_VALUE, TypeError for TORCH_CHECK_TYPE); plus: every argument is a tensor."""
    for name, t in (("x", x), ("bias", bias)) + ((("y", y),) if y is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if need_cuda and not x.is_cuda:
        raise ValueError(
            f"{op}: x must be a CUDA tensor, got one on {x.device} "
            "(these are CUDA kernels; kernels.reference has the CPU definition)"
        )
    if bias.device != x.device:
        raise ValueError(f"{op}: bias is on {bias.device} but x is on {x.device}")
    if x.dtype not in DTYPES:
        raise TypeError(f"{op}: dtype {x.dtype} is not supported (use float32, float16 or bfloat16)")
    if bias.dtype != x.dtype:
        raise TypeError(f"{op}: bias has dtype {bias.dtype} but x has {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d tensor")
    if bias.dim() != 1 or bias.shape[0] != x.shape[-1]:
        raise ValueError(
            f"{op}: bias must have shape [{x.shape[-1]}] (the last dim of x, whose shape is "
            f"{_dims(x.shape)}), got {_dims(bias.shape)}"
        )
    if not x.is_contiguous():
        raise ValueError(
            f"{op}: x must be contiguous, got shape {_dims(x.shape)} with strides {_dims(x.stride())}; "
            "call .contiguous() first"
        )
    if not bias.is_contiguous():
        raise ValueError(f"{op}: bias must be contiguous, got strides {_dims(bias.stride())}")
    if y is not None:
        if y.device != x.device:
            raise ValueError(f"{op}: y is on {y.device} but x is on {x.device}")
        if y.dtype != x.dtype:
            raise TypeError(f"{op}: y has dtype {y.dtype} but x has {x.dtype}")
        if y.shape != x.shape:
            raise ValueError(f"{op}: y must have x's shape {_dims(x.shape)}, got {_dims(y.shape)}")
        if not y.is_contiguous():
            raise ValueError(
                f"{op}: y must be contiguous, got strides {_dims(y.stride())}; call .contiguous() first"
            )


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``relu(x + bias)`` with the CUDA kernel: ``x`` ``[..., N]`` contiguous, ``bias`` ``[N]``."""
    ops = load()  # first: on a machine without a GPU, that is the error to see
    check_inputs("bias_relu", x, bias)
    return ops.bias_relu(x, bias)


def add_mul_relu(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """``relu(x + bias + alpha·y)`` with the CUDA kernel: ``y`` shaped like ``x``; computed in fp32."""
    ops = load()
    check_inputs("add_mul_relu", x, bias, y)
    if isinstance(alpha, torch.Tensor) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"add_mul_relu: alpha must be a Python number, got {type(alpha).__name__}")
    return ops.add_mul_relu(x, bias, y, float(alpha))
