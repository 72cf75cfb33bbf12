"""Every public kernel entry point as a ``torch.library`` op under one namespace, ``fused_kernels::``.

Why: torch.compile, ``mode="reduce-overhead"`` (CUDA graphs through the compiler) and ``torch.export`` see an
op as one node with a known output shape (its *fake* function), a known gradient (its autograd formula) and
known side effects (the arguments it mutates); a Python function full of launches they would trace line by
line, and break at the first ``data_ptr()`` or Triton launcher. The pattern, as in PyTorch's "Python custom
operators" tutorial and vLLM's ``direct_register_custom_op``::

    public function (kernels/<folder>/<file>.py)      checks shapes, dtypes, devices: clear errors, the same
        │                                              as before; turns configs and callables into strings
        ▼                                              and tensors the op schema can carry
    torch.ops.fused_kernels.<name>(...)                the op: fake function, autograd formula (its backward
        │                                              is another op), mutated arguments declared
        ▼
    the launcher of the kernel file                    grid, configs, cached launches (kernels.fast_launch)

Checks that need addresses (overlap of an output with an input, tensor-descriptor alignment) or values (ids
in range) run inside the op: while torch.compile traces there are no addresses or values yet.

Schemas are written out (``schema=``) instead of inferred from annotations: the kernel files use
``from __future__ import annotations``, and the schema string is the contract the op keeps.

:func:`encode_config` / :func:`decode_config`: a :mod:`kernels.configs` carrier (a dataclass, which an op
schema cannot hold) as a string and back; ``None`` is ``""``.
"""

from __future__ import annotations

import functools

import torch

from kernels.configs import CONFIG_TYPES, KernelConfig

__all__ = ["NAMESPACE", "custom_op", "decode_config", "encode_config", "ops"]

NAMESPACE = "fused_kernels"


def custom_op(name: str, schema: str, *, mutates_args: tuple[str, ...] = (), fake=None):
    """Decorator: register ``fn`` as ``fused_kernels::<name>`` with ``schema`` (e.g.
    ``"(Tensor x, Tensor bias) -> Tensor"``); ``mutates_args`` names the arguments it writes (``Tensor(a!)``
    in the schema); ``fake(*args)`` returns empty tensors of the outputs' shapes, dtypes and strides (for
    torch.compile's tracing and for :func:`torch.library.opcheck`). Returns the op (callable, with
    ``register_autograd``)."""

    def register(fn):
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates_args, schema=schema)
        if fake is not None:
            op.register_fake(fake)
        return op

    return register


def ops():
    """``torch.ops.fused_kernels``: the registered ops by name (``ops().bias_relu``)."""
    return getattr(torch.ops, NAMESPACE)


def encode_config(config: KernelConfig | None) -> str:
    """``"GemmConfig:128,256,64,8,8,3,'rows',False,2"`` (class, then every field's repr in order); ``""``
    for None. Traceable by torch.compile (attribute reads and string joins of constants)."""
    if config is None:
        return ""
    values = ",".join(repr(getattr(config, name)) for name in config.__dataclass_fields__)
    return f"{type(config).__name__}:{values}"


def _literal(text: str):
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text[:1] in "'\"":
        return text[1:-1]
    return int(text)


@functools.lru_cache(maxsize=256)
def decode_config(text: str) -> KernelConfig | None:
    """Inverse of :func:`encode_config` (cached: an op call pays a dictionary lookup)."""
    if not text:
        return None
    kind, _, values = text.partition(":")
    cls = CONFIG_TYPES[kind]
    return cls(*(_literal(v) for v in values.split(",")))
