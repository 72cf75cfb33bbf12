"""Export a model to ONNX, check the file against PyTorch, summarize it, and view it in Netron.

The learner's path (notebook 01)::

    path = export_onnx(model, (dense, sparse), "data/dlrm.onnx")       # dense [B, 13], sparse [B, 26]
    report = validate_onnx(path, model, make_inputs)                    # checker + onnxruntime vs torch
    print(summarize_onnx(path))                                         # node types, inputs, outputs
    url, stop = open_in_netron(path)                                    # lecture_code.export.netron

From a shell: ``python -m lecture_code.export --out data/dlrm.onnx`` (the command line is in
:mod:`lecture_code.export.cli`).

The exported graph: inputs ``dense`` float32 ``[batch, 13]`` and ``sparse`` int64 ``[batch, 26]``
(raw ids: the hashing is part of the graph), output ``probability`` float32 ``[batch]`` = sigmoid(logits),
what a served click-through model returns (``output="logits"`` exports ``model.forward`` unchanged).
``batch`` is a symbolic dimension, so one file serves any batch size.

Which exporter (``dynamo=None``, the default, tries them in this order):

1. ``torch.onnx.export(..., dynamo=True)``: ``torch.export`` + onnxscript, then onnxscript's optimizer.
   The cleaner graph in Netron: the DLRM (small preset, modulus hash, 26 tables) exports to 256 nodes and
   no ``Constant`` node (per feature: column ``Gather``, hash ops, table ``Gather``; ``Gemm`` + ``Relu`` per
   layer), against 389 from the TorchScript exporter (133 ``Constant`` and 26 ``ConstantOfShape`` nodes
   more). Names follow the Python code (``node_linear_1``, ``sparse_arch.embeddings.3.weight``), and it
   is the exporter torch develops (its default since 2.9), the same on torch 2.11-2.13.
   Its cost is export time: about 10-25 s on a 2-core CPU for that DLRM (288 nodes and 10-14 s with the
   default data's vocabulary hash).
2. ``dynamo=False``: the TorchScript exporter, deprecated but still in torch 2.11-2.13; about 10 times
   faster to export (under 1 s; 3-4 s with the vocabulary hash). Used when the first raises (a model
   ``torch.export`` cannot trace), with a warning that says why, or when asked for (``dynamo=False``).

Neither converts ``aten::searchsorted`` (ONNX has no such operator): DLRM's ``BatchedVocabularyHash``
switches to one binary search over all features' keys, written in ordinary ops, while
``torch.onnx.is_in_onnx_export()`` is true.

The file is written atomically: exported to a temporary file beside ``path`` and renamed over it only
after ``onnx.checker`` accepts it, so a failed export leaves no file and keeps an existing one.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "ONNXValidationError",
    "OnnxSummary",
    "export_onnx",
    "summarize_onnx",
    "validate_onnx",
]

# Metadata written into the file (Netron shows it under the model's properties; validate_onnx reads it).
_META_OUTPUT = "lecture_code.output"  # "probability" or "logits": what validate_onnx compares against
_META_EXPORTER = "lecture_code.exporter"  # "dynamo" or "torchscript"
_META_EXAMPLE_BATCH = "lecture_code.example_batch_size"  # validate_onnx uses other batch sizes
_PROTOBUF_LIMIT = 2**31 - 1  # a single .onnx file (one protobuf message) cannot exceed 2 GiB


class ONNXValidationError(AssertionError):
    """onnxruntime and PyTorch disagree on a trial (or the file fails ``onnx.checker``)."""


class _Probability(nn.Module):
    """``sigmoid(model(*inputs))``: the served output of a click-through model, one ``Sigmoid`` node."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(*inputs))


def _reference(model: nn.Module, output: str) -> nn.Module:
    if output == "probability":
        return _Probability(model)
    if output == "logits":
        return model
    raise ValueError(f"output must be 'probability' or 'logits', got {output!r}")


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """Run in eval mode (no dropout, running batch-norm stats), restoring the caller's mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _quiet():
    """Silence the exporters' progress lines and warnings (they would clutter notebook outputs)."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)  # e.g. "torchvision is not installed. Skipping torchvision::nms"
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _export_dynamo(module, args, input_names, output_names, dynamic_batch, opset_version):
    shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch")
        shapes = tuple({0: batch} if a.dim() > 0 else None for a in args)
        params = list(inspect.signature(module.forward).parameters.values())
        if len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
            shapes = (shapes,)  # forward(*inputs): torch.export sees one argument, a tuple
    with _quiet():
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=shapes,
            opset_version=opset_version,
            external_data=False,
            optimize=True,
            verbose=False,
        )
    return program.model_proto


def _export_torchscript(module, args, input_names, output_names, dynamic_batch, opset_version):
    import onnx

    axes = None
    if dynamic_batch:
        axes = {name: {0: "batch"} for name in (*input_names, *output_names)}
    buffer = io.BytesIO()
    with _quiet():
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=axes,
            opset_version=opset_version,
            do_constant_folding=True,
        )
    return onnx.load_from_string(buffer.getvalue())


def _root_cause(error: BaseException) -> str:
    """``Type: first line`` of the innermost exception (the exporters wrap the real reason in layers)."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def _strip_prefix(graph, prefix: str) -> None:
    """Rename initializers ``prefix + name`` to ``name`` (and every use of them, subgraphs included)."""
    taken = {t.name for t in graph.initializer}
    renames = {
        t.name: t.name[len(prefix) :]
        for t in graph.initializer
        if t.name.startswith(prefix) and t.name[len(prefix) :] not in taken
    }

    def rename(g) -> None:
        for t in g.initializer:
            t.name = renames.get(t.name, t.name)
        for v in (*g.input, *g.output, *g.value_info):
            v.name = renames.get(v.name, v.name)
        for node in g.node:
            node.input[:] = [renames.get(n, n) for n in node.input]
            node.output[:] = [renames.get(n, n) for n in node.output]
            for attribute in node.attribute:
                for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                    rename(sub)

    rename(graph)


_EXPORTERS = {"dynamo": _export_dynamo, "torchscript": _export_torchscript}


def export_onnx(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    path: str | os.PathLike,
    *,
    input_names: Sequence[str] = ("dense", "sparse"),
    output: str = "probability",
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
    dynamo: bool | None = None,
    opset_version: int | None = None,
) -> Path:
    """Export ``model(*example_inputs)`` to the ONNX file ``path`` (written atomically); return the path.

    Args:
        model: any ``nn.Module``; exported in eval mode (its mode is restored afterwards), on the CPU.
        example_inputs: one tensor per model input, e.g. ``(dense [B, 13] float32, sparse [B, 26] int64)``
            with ``B >= 2`` (``torch.export`` specializes a dimension of size 1).
        input_names: graph input names, in order.
        output: ``"probability"`` exports ``sigmoid(model(...))``; ``"logits"`` exports ``model(...)``.
        output_names: graph output names; default ``(output,)``.
        dynamic_batch: make dimension 0 of every input and output the symbolic ``batch``.
        dynamo: ``True`` / ``False`` force one exporter; ``None`` tries ``dynamo=True`` then falls back to
            the TorchScript exporter if it raises (see the module docstring for why in this order).
        opset_version: ONNX opset; ``None`` lets the exporter choose.

    The file carries metadata (which exporter, which output, the example batch size, torch version) that
    Netron shows among the model properties and :func:`validate_onnx` reads.
    """
    import onnx

    path = Path(path)
    args = tuple(example_inputs)
    if not all(torch.is_tensor(a) for a in args):
        raise TypeError("example_inputs must be a sequence of tensors (one per model input)")
    if len(input_names) != len(args):
        raise ValueError(
            f"{len(args)} example inputs but {len(input_names)} input_names {tuple(input_names)}"
        )
    if dynamic_batch and any(a.dim() > 0 and a.shape[0] < 2 for a in args):
        raise ValueError("use an example batch of at least 2 rows: torch.export specializes a size-1 batch")
    output_names = tuple(output_names) if output_names is not None else (output,)
    order = ["dynamo", "torchscript"] if dynamo is None else (["dynamo"] if dynamo else ["torchscript"])

    module = _reference(model, output)
    args = tuple(a.detach().cpu() for a in args)
    errors: dict[str, BaseException] = {}
    proto = used = None
    with _eval_mode(model), torch.no_grad():
        original_device = next((p.device for p in model.parameters()), torch.device("cpu"))
        model.cpu()
        try:
            for name in order:
                try:
                    proto = _EXPORTERS[name](
                        module, args, input_names, output_names, dynamic_batch, opset_version
                    )
                    used = name
                    break
                except Exception as error:  # noqa: BLE001 - any exporter failure means "try the next one"
                    errors[name] = error
        finally:
            model.to(original_device)
    if proto is None:
        detail = "; ".join(f"{name}: {_root_cause(e)}" for name, e in errors.items())
        raise RuntimeError(f"ONNX export of {type(model).__name__} failed ({detail})") from errors[order[-1]]
    if errors:
        failed, error = next(iter(errors.items()))
        warnings.warn(
            f"the {failed} exporter failed ({_root_cause(error)}); exported with {used} instead",
            stacklevel=2,
        )

    if module is not model:  # keep the model's own names, without the _Probability wrapper's "model."
        _strip_prefix(proto.graph, "model.")
    proto.graph.name = type(model).__name__
    proto.doc_string = (
        f"{type(model).__name__} exported by lecture_code.export.onnx_export (torch {torch.__version__})"
    )
    metadata = {
        _META_OUTPUT: output,
        _META_EXPORTER: used,
        _META_EXAMPLE_BATCH: str(args[0].shape[0]) if args[0].dim() > 0 else "",
        "torch_version": torch.__version__,
    }
    for key, value in metadata.items():
        entry = next((p for p in proto.metadata_props if p.key == key), None) or proto.metadata_props.add()
        entry.key, entry.value = key, value
    if proto.ByteSize() > _PROTOBUF_LIMIT:
        raise ValueError(
            f"the model is {proto.ByteSize() / 2**30:.1f} GiB: a single .onnx file is limited to 2 GiB "
            "(smaller tables, or a larger min-frequency cut in preprocessing)"
        )

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private (0600); give it a normal file's mode
        onnx.save_model(proto, tmp)
        onnx.checker.check_model(tmp, full_check=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _metadata(model_proto) -> dict[str, str]:
    return {p.key: p.value for p in model_proto.metadata_props}


def _default_batch_sizes(n_trials: int, avoid: int | None) -> list[int]:
    sizes = [b for b in (5, 33, 130, 7, 64, 3) if b != avoid]
    return [sizes[i % len(sizes)] for i in range(n_trials)]


def validate_onnx(
    path: str | os.PathLike,
    model: nn.Module,
    make_inputs: Callable[[int], Sequence[torch.Tensor]],
    *,
    n_trials: int = 3,
    batch_sizes: Sequence[int] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> dict[str, Any]:
    """``onnx.checker`` on ``path``, then onnxruntime (CPU) vs PyTorch on fresh inputs; raise on mismatch.

    Args:
        path: the file from :func:`export_onnx` (its metadata says whether it outputs probabilities or logits;
            the PyTorch side applies the same sigmoid).
        model: the PyTorch model it was exported from (run in eval mode on the CPU; mode restored).
        make_inputs: ``make_inputs(batch_size)`` returns new random inputs, in the graph's input order.
            Called once per trial, so each trial sees different data.
        n_trials: trials to run.
        batch_sizes: one per trial; default sizes that differ from the export example's batch, so a
            passing run also proves the batch dimension is dynamic.
        atol, rtol: float32 tolerance ``|ort - torch| <= atol + rtol * |torch|``. The two runtimes sum the
            same products in different orders (MKL vs MLAS GEMMs): errors of a few 1e-7 on DLRM's outputs.

    Returns a dict: ``max_abs_err`` and ``max_rel_err`` over all trials, ``trials`` (batch size and errors
    of each), ``checker`` ``"ok"``, ``exporter``, ``output``, ``opset``, ``inputs``, ``outputs``.
    """
    import onnx
    import onnxruntime as ort

    path = Path(path)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as error:
        raise ONNXValidationError(f"{path}: onnx.checker rejects the file: {error}") from error
    proto = onnx.load(str(path), load_external_data=False)
    meta = _metadata(proto)
    output = meta.get(_META_OUTPUT, "logits")
    example_batch = int(meta[_META_EXAMPLE_BATCH]) if meta.get(_META_EXAMPLE_BATCH) else None
    sizes = list(batch_sizes) if batch_sizes is not None else _default_batch_sizes(n_trials, example_batch)
    if len(sizes) != n_trials:
        raise ValueError(f"need one batch size per trial: {n_trials} trials, batch_sizes={sizes}")

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_names = [i.name for i in session.get_inputs()]
    output_names = [o.name for o in session.get_outputs()]
    reference = _reference(model, output)

    trials = []
    with _eval_mode(model), torch.no_grad():
        for trial, batch in enumerate(sizes):
            inputs = tuple(t.detach().cpu() for t in make_inputs(batch))
            if len(inputs) != len(input_names):
                raise ValueError(
                    f"make_inputs gave {len(inputs)} tensors; the graph has inputs {input_names}"
                )
            expected = reference(*inputs)
            expected = expected if isinstance(expected, (tuple, list)) else (expected,)
            got = session.run(None, {n: t.numpy() for n, t in zip(input_names, inputs, strict=True)})
            abs_err = rel_err = 0.0
            for name, e, g in zip(output_names, expected, got, strict=True):
                e = e.detach().cpu().numpy()
                if e.shape != g.shape:
                    raise ONNXValidationError(
                        f"trial {trial} (batch {batch}): output {name!r} has shape {g.shape}, torch {e.shape}"
                    )
                diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
                abs_err = max(abs_err, float(diff.max(initial=0.0)))
                rel_err = max(rel_err, float((diff / np.maximum(np.abs(e), 1e-12)).max(initial=0.0)))
                bad = diff > atol + rtol * np.abs(e)
                if bad.any():
                    i = np.unravel_index(np.argmax(diff), diff.shape)
                    raise ONNXValidationError(
                        f"{path.name}: onnxruntime and torch disagree on output {name!r}, trial {trial} "
                        f"(batch {batch}): {int(bad.sum())}/{bad.size} elements beyond atol={atol}, "
                        f"rtol={rtol}; "
                        f"max abs error {diff.max():.3g} at {tuple(int(k) for k in i)} "
                        f"(onnxruntime {g[i]!r}, torch {e[i]!r})"
                    )
            trials.append({"batch_size": batch, "max_abs_err": abs_err, "max_rel_err": rel_err})

    summary = summarize_onnx(path)
    return {
        "path": str(path),
        "checker": "ok",
        "exporter": meta.get(_META_EXPORTER, "unknown"),
        "output": output,
        "opset": summary.opset,
        "inputs": summary.inputs,
        "outputs": summary.outputs,
        "provider": "CPUExecutionProvider",
        "atol": atol,
        "rtol": rtol,
        "trials": trials,
        "max_abs_err": max(t["max_abs_err"] for t in trials),
        "max_rel_err": max(t["max_rel_err"] for t in trials),
    }


def _shape(value_info) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _dtype(value_info) -> str:
    import onnx

    return onnx.helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type).name


@dataclass
class OnnxSummary:
    """What an exported graph contains; ``print(summary)`` gives the notebook's table."""

    path: str
    nodes: int
    op_counts: dict[str, int]
    inputs: list[tuple[str, str, list[int | str]]]  # (name, dtype, shape)
    outputs: list[tuple[str, str, list[int | str]]]
    initializers: int
    parameters: int
    opset: int
    file_bytes: int
    metadata: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        def io_line(kind, items):
            return "\n".join(f"  {kind:<7} {n:<12} {t:<8} [{', '.join(map(str, s))}]" for n, t, s in items)

        ops = "\n".join(f"  {op:<16} {count:>4}" for op, count in self.op_counts.items())
        return (
            f"{Path(self.path).name}: {self.nodes} nodes, opset {self.opset}, exporter "
            f"{self.metadata.get(_META_EXPORTER, 'unknown')}, {self.initializers} initializers "
            f"({self.parameters:,} values), {self.file_bytes / 2**20:.2f} MiB\n"
            f"{io_line('input', self.inputs)}\n{io_line('output', self.outputs)}\n"
            f"  {'node type':<16} {'count':>4}\n{ops}"
        )


def summarize_onnx(path: str | os.PathLike) -> OnnxSummary:
    """Node-type counts (most frequent first), inputs/outputs with dtypes and shapes, size, metadata."""
    import onnx

    path = Path(path)
    proto = onnx.load(str(path), load_external_data=False)
    graph = proto.graph
    initializer_names = {t.name for t in graph.initializer}
    counts = Counter(node.op_type for node in graph.node)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    return OnnxSummary(
        path=str(path),
        nodes=len(graph.node),
        op_counts=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        inputs=[(i.name, _dtype(i), _shape(i)) for i in graph.input if i.name not in initializer_names],
        outputs=[(o.name, _dtype(o), _shape(o)) for o in graph.output],
        initializers=len(graph.initializer),
        parameters=sum(int(np.prod(t.dims)) for t in graph.initializer),
        opset=opset,
        file_bytes=path.stat().st_size,
        metadata=_metadata(proto),
    )
