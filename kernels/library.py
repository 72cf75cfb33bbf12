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

In eager mode an op's registered autograd costs host time per call that a small problem notices: torch's
generic wrapper rebuilds the schema's argument list to fill defaults before ``setup_context`` (quadratic in
the argument count: ≈ 20 µs for 9 arguments on the CPU of the CPU probe,
``benchmarks/probe_lora_host.py``), and materializes a zero gradient for every output the caller discarded
(an allocation and a fill launch). :func:`eager_autograd` wraps the op in a plain ``torch.autograd.Function``
with the *same* ``setup_context`` and backward, for a public function to call in eager mode; under
torch.compile it calls the op itself (one node, the registered formula).

Schemas are written out (``schema=``) instead of inferred from annotations: the kernel files use
``from __future__ import annotations``, and the schema string is the contract the op keeps.

:func:`encode_config` / :func:`decode_config`: a :mod:`kernels.configs` carrier (a dataclass, which an op
schema cannot hold) as a string and back; ``None`` is ``""``.
"""

from __future__ import annotations

import functools

import torch

from kernels.configs import CONFIG_TYPES, KernelConfig

__all__ = ["NAMESPACE", "custom_op", "decode_config", "eager_autograd", "encode_config", "ops"]

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


def eager_autograd(name: str, op, setup_context, backward, *, unused_outputs: tuple[int, ...] = ()):
    """A ``torch.autograd.Function`` (class ``name``, graph nodes ``<name>Backward``) whose
    ``apply(*inputs)`` returns ``op(*inputs)`` and differentiates it by ``setup_context(ctx, inputs, output)``
    and ``backward(ctx, *grads)``: the formula registered on ``op`` (``op.register_autograd(backward,
    setup_context=setup_context)``), without torch's generic wrapper (see the module docstring).

    Inside ``forward`` grad mode is off, so the op's own autograd layer only passes through.
    ``unused_outputs``: indices of outputs the caller discards (saved for the backward at most): marked
    non-differentiable, and no gradient is materialized for them (``backward`` gets None there). Eager mode
    only: under torch.compile call the op (its registered autograd is what the compiler sees).
    """

    def forward(ctx, *inputs):
        output = op(*inputs)
        setup_context(ctx, inputs, output)
        if unused_outputs:
            ctx.mark_non_differentiable(*(output[i] for i in unused_outputs))
            ctx.set_materialize_grads(False)
        return output

    return type(
        name,
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


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
