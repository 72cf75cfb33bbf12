"""How inductor built DLRM's interaction input: who writes the ``bmm``'s ``[B, F+1, D]`` buffer, from what.

The model concatenates twice: ``SparseArch`` stacks the ``F`` embeddings (``torch.stack`` → ``[B, F, D]``),
then ``DotInteraction`` puts the dense vector in front (``torch.cat`` → ``[B, F+1, D]``) for the pairwise
``bmm``, and concatenates the dense vector again with the pairs (``[B, D + (F+1)F/2]``). Inductor lowers each
op on its own. :func:`concatenation_report` reads the wrapper (:mod:`.wrapper_launches`) and the kernels to
say what came of it, with the lines that show it:

- which buffer the ``F`` gather kernels store into (``tl.store(out_ptr0 + (x1 + 416*y0), …)``: columns of a
  ``[B, F·D]`` buffer), and whether that is the ``bmm``'s input or a buffer of its own;
- every launch that writes the ``bmm``'s input, the columns it writes, and its loads: a launch that loads the
  gathers' buffer and stores it again is a copy;
- how many launches compute the dense arch's last ReLU: inductor may recompute a cheap pointwise op inside
  each consumer instead of storing it once.

Nothing here assumes a torch version: on a GPU inductor writes the second ``cat`` as one pointwise kernel
(``tl.where`` between its inputs), for CPU tensors as a copy into slices (``ConcatKernel``); the report
describes whichever it finds.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from lecture_code.compile.generated_code import CompiledCode
from lecture_code.compile.wrapper_launches import Launch, Wrapper, memory_lines, parse_wrapper

__all__ = ["ConcatReport", "concatenation_report"]


def _span(columns: range) -> str:
    return f"{columns.start}–{columns.stop - 1}"


def _wrap(sentence: str) -> str:
    """Wrap at 110 columns without breaking a shape such as ``[64, 16]`` across lines."""
    keep = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(", ", "\0"), sentence)
    return textwrap.fill(keep, width=110, subsequent_indent="  ").replace("\0", ", ")


def _computes_relu(launch: Launch) -> list[str]:
    return [line.strip() for line in launch.kernel.body.splitlines() if "maximum(" in line]


@dataclass
class ConcatReport:
    """What :func:`concatenation_report` found in one wrapper module (``print`` it, or read the fields)."""

    wrapper: Wrapper
    bmm_input: str  # base allocation the bmm reads
    gathers: list[Launch]  # the embedding-gather launches
    gather_buffer: str | None  # base allocation they store into
    fillers: list[Launch]  # launches that write the bmm input
    dense_input: str | None  # what the dense arch's last ReLU is computed from (a library call's output)
    relu_launches: list[Launch]  # launches that compute that ReLU

    @property
    def copies(self) -> list[Launch]:
        """Fillers that load the gathers' buffer: they move gathered rows a second time."""
        if self.gather_buffer is None or self.gather_buffer == self.bmm_input:
            return []
        return [f for f in self.fillers if self._reads(f, self.gather_buffer)]

    def _reads(self, launch: Launch, base: str) -> bool:
        return any(self.wrapper.base_of(launch.args[p]) == base for p in launch.reads)

    def _where(self, name: str) -> str:
        w = self.wrapper
        view, base = w.view(name), w.base_of(name)
        if view is None:
            return name
        if base == name:
            return view.describe()
        return f"{name} → columns {_span(w.columns(name))} of {w.view(base).describe()}"

    def _launch_lines(self, launch: Launch) -> list[str]:
        """The kernel's loads, stores and ReLU lines, in source order, each labelled with its buffer."""
        labels = {}
        for param in launch.args:
            for line in memory_lines(launch.kernel, param):
                labels[line] = f"{param} = {self._where(launch.args[param])}"
        for line in _computes_relu(launch):
            labels[line] = "relu"
        ordered = [ln.strip() for ln in launch.kernel.body.splitlines() if ln.strip() in labels]
        width = max((len(labels[ln]) for ln in ordered), default=0)
        return [f"    {labels[ln]:<{width}}  {ln}" for ln in dict.fromkeys(ordered)]

    def _bmm_columns(self, launch: Launch) -> list[int]:
        w = self.wrapper
        return sorted(
            {
                c
                for p in launch.writes
                if w.base_of(launch.args[p]) == self.bmm_input
                for c in w.columns(launch.args[p])
            }
        )

    def _destinations(self, launch: Launch) -> str:
        """The allocations a launch stores into: ``buf36 [8, 27, 16] and buf40 [8, 367]``."""
        w = self.wrapper
        bases = dict.fromkeys(w.base_of(launch.args[p]) for p in launch.writes)
        return " and ".join(w.view(b).describe() if w.view(b) else b for b in bases)

    def findings(self) -> list[str]:
        """Sentences that are true of this capture (printed by ``str(report)`` after the lines)."""
        w, out = self.wrapper, []
        bmm = w.view(self.bmm_input)
        if self.gather_buffer == self.bmm_input:
            out.append("The gather kernels store straight into the bmm's input: no copy.")
        elif self.gather_buffer is not None:
            gb = w.view(self.gather_buffer)
            for copy in self.copies:
                out.append(
                    f"A copy: {copy.kernel.name} loads the gathers' {gb.describe()} and stores "
                    f"{len(self._bmm_columns(copy))} of the {bmm.row_width} columns of every row of the "
                    f"bmm's input {bmm.describe()}: the {gb.row_width} gathered floats per row are written "
                    "twice."
                )
        if self.dense_input is not None:
            n = len(self.relu_launches)
            source = w.view(self.dense_input).describe()
            producer = next((c.name for c in w.library_calls if c.out == self.dense_input), None)
            source += f" (the output of extern_kernels.{producer})" if producer else ""
            if n > 1:
                where = "; ".join(
                    f"{r.kernel.name}, writing {self._destinations(r)}" for r in self.relu_launches
                )
                out.append(
                    f"The dense arch's last ReLU is computed {n} times: in {where}. Each loads {source} and "
                    "applies the ReLU itself; no kernel stores the ReLU's result for the others to read."
                )
            elif n == 1:
                relu = self.relu_launches[0]
                out.append(
                    f"The dense arch's last ReLU is computed once, in {relu.kernel.name}, from {source}, and "
                    f"stored into {self._destinations(relu)}."
                )
        return out

    def __str__(self) -> str:
        w = self.wrapper
        bmm = w.view(self.bmm_input)
        lines = [f"bmm input: {bmm.describe()}, {bmm.row_width} floats per row"]
        if self.gathers:
            example = self.gathers[0]
            store = next((ln for p in example.writes for ln in memory_lines(example.kernel, p)), "?")
            target = w.view(self.gather_buffer).describe() if self.gather_buffer else "?"
            lines += [
                f"{len(self.gathers)} kernels with an embedding gather store into {target}, e.g.",
                f"    {store}",
            ]
        lines.append(f"kernels that write {self.bmm_input}:")
        for launch in self.fillers:
            cols = self._bmm_columns(launch)
            lines.append(f"  {launch.kernel.name} → columns {cols[0]}–{cols[-1]} of {bmm.row_width}")
            lines += self._launch_lines(launch)
        findings = [_wrap(f) for f in self.findings()]
        return "\n".join(lines + [""] + findings)


def _dense_input(wrapper: Wrapper, fillers: Sequence[Launch], bmm_input: str) -> str | None:
    """The matmul output that the launch writing column 0 of the bmm input applies its ReLU to."""
    matmul_outputs = {wrapper.base_of(c.out) for c in wrapper.library_calls if c.out}
    for launch in fillers:
        writes_first = any(
            wrapper.base_of(launch.args[p]) == bmm_input and wrapper.columns(launch.args[p]).start == 0
            for p in launch.writes
        )
        if not writes_first or not _computes_relu(launch):
            continue
        for p in launch.reads:
            base = wrapper.base_of(launch.args[p])
            if base in matmul_outputs and base != bmm_input:
                return base
    return None


def concatenation_report(code: CompiledCode) -> ConcatReport | None:
    """Analyse the first wrapper with a ``bmm`` (the interaction); ``None`` if there is none or no Triton."""
    for index, text in enumerate(code.files):
        kernels = [k for k in code.kernels if k.file_index == index and k.language == "triton"]
        wrapper = parse_wrapper(text, kernels)
        bmm = next((c for c in wrapper.library_calls if c.name == "bmm"), None)
        if bmm is None or not wrapper.launches or wrapper.view(bmm.inputs[0]) is None:
            continue
        target = wrapper.base_of(bmm.inputs[0])
        fillers = [
            launch
            for launch in wrapper.launches
            if any(wrapper.base_of(launch.args[p]) == target for p in launch.writes)
        ]
        gathers = [launch for launch in wrapper.launches if "embedding" in launch.kernel.fused_ops]
        # the buffer every gather stores into (a gather fused with other work may also write elsewhere)
        write_sets = [{wrapper.base_of(g.args[p]) for p in g.writes} for g in gathers]
        shared = set.intersection(*write_sets) if write_sets else set()
        gather_buffer = shared.pop() if len(shared) == 1 else None
        dense = _dense_input(wrapper, fillers, target)
        relu = [
            launch
            for launch in wrapper.launches
            if dense is not None
            and _computes_relu(launch)
            and any(wrapper.base_of(launch.args[p]) == dense for p in launch.reads)
        ]
        return ConcatReport(wrapper, target, gathers, gather_buffer, fillers, dense, relu)
    return None
