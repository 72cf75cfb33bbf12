"""Code for a slide, cut from the tested source file itself: a function or class by name, never retyped.

``extract("kernels/pointwise/bias_relu.py", "_bias_relu_fwd_kernel")`` returns the definition's lines exactly
as they are in the file (decorators included; ``Class.method`` for a method), with where they came from. The
file is parsed with :mod:`ast`, not imported, so building the deck never runs a kernel. A name the file does
not define raises: a renamed function breaks the build loudly instead of leaving a stale copy on a slide.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Excerpt", "extract"]


@dataclass(frozen=True)
class Excerpt:
    path: str  # relative to the repository root
    name: str
    first: int  # 1-based, inclusive
    last: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.path}, lines {self.first}–{self.last}"


def _find(body: list[ast.stmt], parts: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == parts[0]:
            if len(parts) == 1:
                return node
            if isinstance(node, ast.ClassDef):
                return _find(node.body, parts[1:])
    raise LookupError(parts[0])


def extract(path: str, name: str, root: Path, docstring: bool = True) -> Excerpt:
    """The source of ``name`` (``func``, ``Class`` or ``Class.method``) in ``root / path``.

    ``docstring=False`` leaves the definition's docstring out (the lines of the file, minus those).
    """
    text = (root / path).read_text(encoding="utf-8")
    try:
        node = _find(ast.parse(text).body, name.split("."))
    except LookupError:
        raise LookupError(
            f"{path} defines no {name!r} (a slide names it: rename the slide's reference)"
        ) from None
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
    lines = text.splitlines()[first - 1 : node.end_lineno]
    if not docstring and ast.get_docstring(node) is not None:
        doc = node.body[0]
        lines = [
            line
            for number, line in enumerate(lines, start=first)
            if not doc.lineno <= number <= doc.end_lineno
        ]
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    code = "\n".join(ln[indent:] for ln in lines)
    return Excerpt(path=path, name=name, first=first, last=node.end_lineno, code=code)
