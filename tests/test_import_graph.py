"""No import circles inside ``kernels`` and ``lecture_code``, and ``kernels`` never imports ``lecture_code``.

The graph is read from the source with ``ast``, nothing is imported: every ``import`` and ``from … import``
of a module, at module level or inside a function (a lazy import still closes a circle, it only hides it until
the call), relative imports resolved. ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg`` (a package ``__init__`` counts like any module). Importing a submodule also runs its
parents' ``__init__``; those implicit edges are left out, or every package importing its own submodules would
be a circle. A circle is reported as one concrete path, ``a → b → c → a``, per strongly connected component.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "lecture_code")


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """``{"lecture_code.training.train": path, "lecture_code.training": …/__init__.py, …}``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name ``tree`` imports; a ``from`` import as ``base.name`` (relative ``base`` resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                yield f"{base}.{alias.name}" if alias.name != "*" else base


def _known_module(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a known module (``pkg.mod.func`` → ``pkg.mod``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """``{module: {modules of these packages it imports}}``."""
    known = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        targets = {_known_module(name, known) for name in names}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One circle per strongly connected component (Tarjan), as a path ``[a, b, …, a]``; ``[]`` if none."""
    edges = {node: sorted(set(targets)) for node, targets in graph.items()}
    for targets in list(edges.values()):
        for t in targets:
            edges.setdefault(t, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]  # iterative DFS: no recursion limit on a deep graph
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    components.append(sorted(component))
    return [_one_circle(edges, set(c)) for c in sorted(components)]


def _one_circle(edges: Mapping[str, list[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first member back to itself, inside the component (BFS)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child not in component:
                    continue
                if child == start:
                    path = [node]  # node, its BFS parent, …, start
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")  # pragma: no cover


def _show(cycles: list[list[str]]) -> str:
    return "\n".join(" → ".join(c) for c in cycles)


# ---------------------------------------------------------------------------------------------------------
# The finder itself, on graphs whose answer is known
# ---------------------------------------------------------------------------------------------------------
def test_cycle_finder_on_a_tiny_graph():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]
    two = find_cycles({"a": {"b"}, "b": {"a", "x"}, "x": {"y"}, "y": {"x", "z"}, "z": set()})
    assert two == [["a", "b", "a"], ["x", "y", "x"]]
    # a shortest circle through the first member, not the whole component's walk
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}) == [["a", "c", "a"]]


def test_graph_reader_on_a_tiny_package(tmp_path):
    """Lazy, relative and ``from pkg import module`` imports all make edges; a name from ``__init__`` is an
    edge to the package; the circle they close is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import run\n")
    (pkg / "a.py").write_text("from . import b\n\ndef run():\n    return b.VALUE\n")
    (pkg / "b.py").write_text("import os\n\ndef later():\n    from .sub import c\n\nVALUE = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from pkg import run\nfrom .. import a\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.sub.c"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg", "pkg.a"},
    }
    assert find_cycles(graph) == [["pkg", "pkg.a", "pkg.b", "pkg.sub.c", "pkg"]]


# ---------------------------------------------------------------------------------------------------------
# The repository
# ---------------------------------------------------------------------------------------------------------
def test_the_graph_covers_both_packages():
    graph = import_graph()
    assert {"kernels", "lecture_code", "lecture_code.training.train"} <= graph.keys()
    assert "lecture_code.training.graphs" in graph["lecture_code.training"]  # an __init__'s own submodules


def test_no_import_circles():
    cycles = find_cycles(import_graph())
    hint = "break each by moving the shared piece into its own module"
    assert not cycles, f"import circles ({hint}):\n{_show(cycles)}"


def test_kernels_never_imports_lecture_code():
    known = module_files(ROOT, PACKAGES)
    offending = []
    for module, path in known.items():
        if not module.startswith("kernels"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        offending += [f"{module} imports {n}" for n in names if n.split(".")[0] == "lecture_code"]
    assert not offending, "kernels/ must stand alone (lecture_code builds on it):\n" + "\n".join(offending)
