"""The ``build.ninja`` torch wrote for the CUDA extension: its commands, with machine paths redacted.

:func:`kernels.cuda.load` hands torch the sources and our flags; torch adds its own (include paths, defines,
the GPU architecture), writes a ninja file into its build directory and runs ninja there (a JIT build: ninja
recompiles only what changed, so a second ``load`` with unchanged sources just loads the cached ``.so``).
This module finds that file (:func:`find`), expands each ``build`` line into the command ninja runs
(:func:`steps`: the nvcc compile of ``pointwise.cu``, the C++ compile of ``binding.cpp``, the link), and
replaces every machine path with a placeholder (:func:`redact`: ``<repo>``, ``<torch>``, ``<cuda>``,
``<python-include>``, ``<build>``, ``<home>``, and ``<other>`` for any other absolute path), so the
commands can be printed in a committed notebook.

Only the subset of ninja's syntax torch writes is read: top-level ``name = value`` variables, ``rule``
blocks with an indented ``command = ...``, and ``build outputs: rule inputs`` lines.
"""

from __future__ import annotations

import os
import re
import shlex
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from kernels.cuda import CUDA_DIR, EXTENSION_NAME

__all__ = ["Step", "find", "flag_groups", "placeholders", "redact", "rules", "steps", "wrap"]

REPO = CUDA_DIR.parents[1]  # kernels/cuda -> kernels -> the repository (or site-packages when installed)


@dataclass(frozen=True)
class Step:
    """One ``build`` line of the file and the command ninja runs for it, both redacted."""

    build: str  # "build pointwise.cuda.o: cuda_compile <repo>/kernels/cuda/pointwise.cu"
    rule: str  # "cuda_compile", "compile" or "link"
    command: str  # the rule's command with its variables, $in and $out filled in


def build_root() -> Path:
    """Where torch builds extensions: ``$TORCH_EXTENSIONS_DIR``, else its default build root."""
    from torch.utils import cpp_extension

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root())


def find(name: str = EXTENSION_NAME, root: Path | str | None = None) -> Path:
    """The newest ``<root>/**/<name>/build.ninja`` (torch puts it in a folder named after the extension,
    under a ``py<version>_cu<version>`` folder unless ``$TORCH_EXTENSIONS_DIR`` is set)."""
    root = Path(root) if root is not None else build_root()
    found = sorted(root.glob(f"**/{name}/build.ninja"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(
            f"no {name}/build.ninja under {root}: call kernels.cuda.load() first (on a GPU machine)"
        )
    return found[-1]


def placeholders(build_dir: Path | str) -> dict[str, str]:
    """``{machine path: placeholder}`` for the paths a build file of this machine holds."""
    import torch
    from torch.utils import cpp_extension

    places = {
        str(REPO): "<repo>",
        str(Path(torch.__file__).parent): "<torch>",
        str(build_dir): "<build>",
        str(Path.home()): "<home>",
    }
    if cpp_extension.CUDA_HOME:
        places[str(cpp_extension.CUDA_HOME)] = "<cuda>"
    for key in ("include", "platinclude"):
        places[sysconfig.get_path(key)] = "<python-include>"
    for path, mark in list(places.items()):  # the resolved form too, wherever a symlink is involved
        places.setdefault(str(Path(path).resolve()), mark)
    return {path: mark for path, mark in places.items() if path not in ("", "/")}


# An absolute path left after the known ones: at the start, after a space, `=`, `,`, `:` or a quote (as in
# -Wl,-rpath,/path), or glued to -I/-L.
_ABSOLUTE = re.compile(r"""(^|[\s=,:'"]|-[IL])(/[^\s,:'"]*)""", re.MULTILINE)


def redact(text: str, places: dict[str, str]) -> str:
    """``text`` with each path in ``places`` replaced by its placeholder (longest path first, only as a whole
    path component), then any other absolute path by ``<other>/<its last component>``."""
    for path in sorted(places, key=len, reverse=True):
        text = re.sub(re.escape(path) + r"""(?=[/\s,:'"]|$)""", places[path], text, flags=re.MULTILINE)

    def other(match: re.Match) -> str:
        return f"{match.group(1)}<other>/{Path(match.group(2)).name}"

    return _ABSOLUTE.sub(other, text)


def _parse(text: str) -> tuple[dict[str, str], dict[str, str], list[tuple[str, str, str, str]]]:
    """(top-level variables, {rule: command}, [(build line, rule, outputs, inputs)]) of a ninja file."""
    variables: dict[str, str] = {}
    commands: dict[str, str] = {}
    builds: list[tuple[str, str, str, str]] = []
    rule = None
    for line in text.replace("$\n", "").splitlines():  # "$" + newline: ninja's line continuation
        indented = line.startswith((" ", "\t"))
        if line.startswith("rule "):
            rule = line.split()[1]
        elif indented and rule is not None and line.strip().startswith("command ="):
            commands[rule] = line.split("=", 1)[1].strip()
        elif line.startswith("build "):
            rule = None
            outputs, rest = re.split(r"(?<!\$):", line[len("build ") :], maxsplit=1)
            name, _, inputs = rest.strip().partition(" ")
            builds.append((line, name, outputs.strip(), inputs.strip()))
        elif "=" in line and not indented:
            rule = None
            key, value = line.split("=", 1)
            variables[key.strip()] = value.strip()
    return variables, commands, builds


def _expand(command: str, variables: dict[str, str]) -> str:
    """A ninja command with ``$name`` / ``${name}`` filled in and ``$$``, ``$ ``, ``$:`` unescaped."""

    def one(match: re.Match) -> str:
        token = match.group(1)
        if token in ("$", " ", ":"):
            return token
        return variables.get(token.strip("{}"), "")

    expanded = re.sub(r"\$(\$| |:|\{\w+\}|\w+)", one, command)
    return re.sub(r" +", " ", expanded).strip()


def steps(path: Path | str | None = None) -> list[Step]:
    """Each ``build`` line of the build file (default: :func:`find`) with the command ninja runs for it."""
    path = Path(path) if path is not None else find()
    places = placeholders(path.parent)
    variables, commands, builds = _parse(path.read_text())
    out = []
    for line, rule, outputs, inputs in builds:
        if rule not in commands:
            continue  # "phony" and other built-in rules have no command
        command = _expand(commands[rule], {**variables, "in": inputs, "out": outputs})
        out.append(Step(build=redact(line, places), rule=rule, command=redact(command, places)))
    return out


def rules(path: Path | str | None = None) -> str:
    """The file's variables, ``rule`` blocks and ``build`` lines as written (unexpanded), redacted."""
    path = Path(path) if path is not None else find()
    return redact(path.read_text().strip(), placeholders(path.parent))


# Flags whose next word is their argument: a path (left out of flag_groups), or an arch / host option.
_PATH_FLAGS = ("-isystem", "-I", "-L", "-MF", "--dependency-output", "-c", "-o", "-ccbin")
_TAKES_AN_ARGUMENT = (*_PATH_FLAGS, "-gencode", "--compiler-options")


def flag_groups(command: str, ours: list[str] | tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The flags of an nvcc or c++ command, sorted for a reader: ``ours`` (those of the given list that
    appear), ``arch`` (``-gencode``/``-arch`` ones), ``defines`` (``-D...``) and ``other``; include and
    library paths, the dependency file and ``-c``/``-o`` with their arguments are left out."""
    try:
        words = shlex.split(command)[1:]  # as the shell passes them; the compiler itself is not a flag
    except ValueError:
        words = command.split()[1:]
    groups: dict[str, list[str]] = {"ours": [], "arch": [], "defines": [], "other": []}
    i = 0
    while i < len(words):
        word, following = words[i], (words[i + 1] if i + 1 < len(words) else "")
        i += 1
        if word in _PATH_FLAGS:
            i += 1  # the flag's argument (a path) goes with it
        elif word in ("-gencode", "-arch", "--gpu-architecture"):
            groups["arch"].append(f"{word} {following}")
            i += 1
        elif word in ("--compiler-options", "-Xcompiler"):
            groups["other"].append(f"{word} {following}")
            i += 1
        elif word in ours:
            groups["ours"].append(word)
        elif word.startswith(("-gencode=", "-arch=", "--gpu-architecture=", "--generate-code=")):
            groups["arch"].append(word)
        elif word.startswith("-D"):
            groups["defines"].append(word)
        elif word == "--generate-dependencies-with-compile":
            continue  # with --dependency-output: the header list ninja reads back (older torch)
        elif word.startswith("-") and not word.startswith(("-I", "-L", "-MD", "-MMD", "-isystem")):
            groups["other"].append(word)
    return groups


def wrap(command: str, width: int = 108, indent: str = "    ") -> str:
    """A long command on several lines, broken between flags only: each flag stays whole, and stays on
    one line with its argument (``-isystem <torch>/include``, ``-o binding.o``)."""
    units: list[str] = []
    for word in command.split():
        if units and units[-1].split()[-1] in _TAKES_AN_ARGUMENT:
            units[-1] += f" {word}"
        else:
            units.append(word)
    lines = [""]
    for unit in units:
        if lines[-1].strip() and len(lines[-1]) + 1 + len(unit) > width:
            lines.append(indent)
        lines[-1] += unit if not lines[-1].strip() else f" {unit}"
    return "\n".join(lines)
