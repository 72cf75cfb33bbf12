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

**Direct calls.** The dispatcher and the custom-op wrapper cost host time on every call, and a training step
makes dozens of op calls. :func:`custom_op` returns an :class:`Op`: called where nothing intercepts torch
(:func:`kernels.internals.plain_eager`: eager, no dispatch or function mode, no functorch transform, no
profiler, plain tensors, no tracer's proxy), it runs the op's body itself (through a plain
``torch.autograd.Function`` with the op's own autograd formula when an input needs a gradient) and bumps the
version of each argument the op mutates, as the op would; anywhere else it calls the op. Same formulas, same
bits (``tests/kernels/test_direct_calls.py``).

:func:`encode_config` / :func:`decode_config`: a :mod:`kernels.configs` carrier (a dataclass, which an op
schema cannot hold) as a string and back; ``None`` is ``""``.
"""

from __future__ import annotations

import functools
import inspect

import torch

from kernels.configs import CONFIG_TYPES, KernelConfig
from kernels.internals import plain_eager

__all__ = ["NAMESPACE", "Op", "custom_op", "decode_config", "encode_config", "ops", "registered"]

NAMESPACE = "fused_kernels"
_REGISTERED: dict[str, Op] = {}


def custom_op(name: str, schema: str, *, mutates_args: tuple[str, ...] = (), fake=None):
    """Decorator: register ``fn`` as ``fused_kernels::<name>`` with ``schema`` (e.g.
    ``"(Tensor x, Tensor bias) -> Tensor"``); ``mutates_args`` names the arguments it writes (``Tensor(a!)``
    in the schema); ``fake(*args)`` returns empty tensors of the outputs' shapes, dtypes and strides (for
    torch.compile's tracing and for :func:`torch.library.opcheck`). Returns an :class:`Op` (callable, with
    ``register_autograd``)."""

    def register(fn):
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates_args, schema=schema)
        if fake is not None:
            op.register_fake(fake)
        params = list(inspect.signature(fn).parameters)
        _REGISTERED[name] = Op(op, fn, tuple(params.index(a) for a in mutates_args))
        return _REGISTERED[name]

    return register


def registered() -> dict[str, Op]:
    """Every :class:`Op` made by :func:`custom_op` so far, by name (those of the imported kernel files)."""
    return dict(_REGISTERED)


def _flat(args) -> list:
    return [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,))]


def _tensors(args) -> list:
    return [t for t in _flat(args) if isinstance(t, torch.Tensor)]


def _traced(args) -> bool:
    """An argument that overrides torch but is no tensor: a tracer's proxy (torch.fx) must see the op."""
    return any(
        hasattr(type(t), "__torch_function__") and not isinstance(t, torch.Tensor) for t in _flat(args)
    )


class Op:
    """A ``fused_kernels::`` op as the kernel files call it (see the module's *Direct calls*): ``op(*args)``;
    ``op.op`` is the ``torch.library`` op, ``op.fn`` its body."""

    def __init__(self, op, fn, mutated: tuple[int, ...]):
        self.op, self.fn, self.mutated = op, fn, mutated
        self.backward = self.setup_context = None

    def register_autograd(self, backward, *, setup_context) -> None:
        self.op.register_autograd(backward, setup_context=setup_context)
        self.backward, self.setup_context = backward, setup_context

    def __call__(self, *args, **kwargs):
        if kwargs or torch.compiler.is_compiling():
            return self.op(*args, **kwargs)
        tensors = _tensors(args)
        if not plain_eager(*tensors) or _traced(args):
            return self.op(*args)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            if self.backward is None or self.mutated:  # the op's own error or rule, not a guess here
                return self.op(*args)
            return _Direct.apply(*args, self)
        out = self.fn(*args)
        for t in _tensors(args[i] for i in self.mutated):
            torch.autograd.graph.increment_version(t)
        return out


class _Direct(torch.autograd.Function):
    """An :class:`Op`'s body and autograd formula, as torch's custom-op autograd runs them (the :class:`Op`
    passed last: ``needs_input_grad`` is trimmed to the op's own arguments around the formula)."""

    @staticmethod
    def forward(ctx, *args):
        op, args = args[-1], args[:-1]
        out = op.fn(*args)
        op.setup_context(ctx=ctx, inputs=args, output=out)
        ctx.direct_op = op
        return out

    @staticmethod
    def backward(ctx, *grads):
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            got = ctx.direct_op.backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*got, None) if isinstance(got, tuple) else (got, None)


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
