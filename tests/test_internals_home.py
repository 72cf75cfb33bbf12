"""``lecture_code`` and ``kernels`` reach torch/Triton internals only through their ``internals.py``.

Read from the source with ``ast``: an import of a private torch module (``torch._inductor``,
``torch.utils._pytree``) or of Triton's runtime, backends or compiler, or an attribute chain such as
``torch._dynamo.reset`` or ``torch.cuda._sleep``, anywhere in ``lecture_code`` or ``kernels`` but the
package's internals module, fails here with the file and line. Public twins (``torch.compiler.reset``) pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRITON_INTERNAL = ("triton.runtime", "triton.backends", "triton.compiler")


def _private(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] == "torch":
        return any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
    return parts[0] == "triton" and dotted.startswith(TRITON_INTERNAL)


def _dotted(node: ast.AST) -> str | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(names)])


def internals_used(source: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` for every private torch/Triton name the source imports or reads."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, n) for n in names if _private(n)]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and _private(dotted):
                found.append((node.lineno, dotted))
    # ast.walk meets a chain at every length (torch._dynamo, torch._dynamo.reset): keep the longest
    return sorted(
        {
            (line, name)
            for line, name in found
            if not any(o == line and n.startswith(name + ".") for o, n in found)
        }
    )


def test_the_finder_sees_imports_and_attribute_chains():
    source = (
        "import torch\nfrom torch._inductor import config\nimport triton.runtime.jit as j\n"
        "def f():\n    torch._dynamo.reset()\n    torch.compiler.reset()\n    return torch.__version__\n"
    )
    assert internals_used(source) == [
        (2, "torch._inductor.config"),
        (3, "triton.runtime.jit"),
        (5, "torch._dynamo.reset"),
    ]


@pytest.mark.parametrize("package", ["lecture_code", "kernels"])
def test_each_package_uses_internals_only_through_its_internals_module(package):
    home = ROOT / package / "internals.py"
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != home
        for line, name in internals_used(path.read_text(encoding="utf-8"))
    ]
    assert not offending, f"route these through {package}/internals.py:\n" + "\n".join(offending)
