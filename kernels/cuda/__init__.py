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
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

__all__ = ["SOURCES", "add_mul_relu", "bias_relu", "comment_block", "definition", "load"]

CUDA_DIR = Path(__file__).resolve().parent
SOURCES = [CUDA_DIR / "pointwise.cu", CUDA_DIR / "binding.cpp"]
EXTENSION_NAME = "fused_kernels_cuda"  # also the namespace of the ops: torch.ops.fused_kernels_cuda.*

# No --use_fast_math: it would flush fp32 subnormals to zero (torch does not) and buys nothing here (no
# division, no transcendentals). -lineinfo maps SASS back to source lines in Nsight Compute.
EXTRA_CUDA_CFLAGS = ["-O3", "-lineinfo"]
EXTRA_CFLAGS = ["-O3"]


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


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``relu(x + bias)`` with the CUDA kernel: ``x`` ``[..., N]`` contiguous, ``bias`` ``[N]``."""
    return load().bias_relu(x, bias)


def add_mul_relu(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """``relu(x + bias + alpha·y)`` with the CUDA kernel: ``y`` shaped like ``x``; computed in fp32."""
    return load().add_mul_relu(x, bias, y, float(alpha))
