"""The public peers the LoRA benchmarks time from their own code: which wheel, which of its files, where they
are fetched to, and how a loader imports them without the rest of their package.

``python -m benchmarks.fetch_peers`` (on a machine with a package registry) downloads each pinned wheel and
extracts only :attr:`Peer.files` into ``build/peers/<name>-<version>/`` (git-ignored, a few hundred KB).
The GPU machine has no registry: carry that folder there (the device tool's ``carry=["build/peers"]``).
The loaders (:mod:`benchmarks.peer_nemo`, :mod:`benchmarks.peer_vllm`) import the files under their own
package names through :func:`importing_from`, standing in small stubs for the package modules they import
but the benchmarks do not run; nothing from the peers is ever committed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from lecture_code.environment import REPO_ROOT

PEERS_DIR = REPO_ROOT / "build" / "peers"  # git-ignored (build/); carried to the GPU machine
FETCH = "python -m benchmarks.fetch_peers"


@dataclass(frozen=True)
class Patch:
    """A text edit :mod:`benchmarks.fetch_peers` makes to a fetched file, where the file as published cannot
    run here; ``old`` must occur exactly once."""

    file: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Peer:
    """A pinned wheel and the files of it the benchmarks import (``kernels``: the Triton kernels and the
    functions that launch them; ``support``: modules they import that need nothing beyond torch and
    packaging, taken as they are rather than stubbed; ``license``: the wheel's license file, kept beside
    them; ``patches``: the edits made at fetch time, each with its reason)."""

    name: str  # the distribution, as pip names it
    version: str
    kernels: tuple[str, ...]
    support: tuple[str, ...]
    license: str
    patches: tuple[Patch, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.kernels, *self.support, self.license)

    @property
    def folder(self) -> Path:
        return PEERS_DIR / f"{self.name}-{self.version}"

    def missing(self, root: Path | None = None) -> str | None:
        """Why this peer cannot be loaded from ``root`` (default: its folder), or None when every file is
        there."""
        root = root or self.folder
        absent = [f for f in self.files if not (root / f).is_file()]
        if absent:
            shown = "no folder" if not root.is_dir() else f"{len(absent)} file(s) missing, e.g. {absent[0]}"
            return f"{self.name}=={self.version} not fetched ({shown} at {_shown(root)}; run `{FETCH}`)"
        unpatched = [p.file for p in self.patches if p.old in (root / p.file).read_text(encoding="utf-8")]
        if unpatched:
            return f"{self.name}=={self.version}: {unpatched[0]} fetched unpatched (run `{FETCH} --force`)"
        return None


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (no machine paths in rows or CSVs)."""
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


NEMO = Peer(
    name="nemo_automodel",
    version="0.7.0",
    kernels=(
        "nemo_automodel/components/_peft/lora_kernel.py",  # the Triton kernels and their wrappers
        "nemo_automodel/components/_peft/lora.py",  # TritonLinearLoRA and its autograd function
    ),
    support=(
        "nemo_automodel/components/_peft/module_matcher.py",
        "nemo_automodel/shared/import_utils.py",
        "nemo_automodel/shared/tp_linear.py",
        "nemo_automodel/shared/utils.py",
    ),
    license="nemo_automodel-0.7.0.dist-info/licenses/LICENSE",
    patches=(
        Patch(
            file="nemo_automodel/components/_peft/lora_kernel.py",
            old='key=["S", "M", "K"],',
            new='key=["M", "K"],',
            why="lora_db_kernel's autotune key names S, which is no argument of the kernel: older Tritons "
            "drop such a name from the key when the kernel runs, Triton 3.9 refuses it when the kernel is "
            "defined; without S the kernel tunes as it does on the older Tritons",
        ),
    ),
)
VLLM = Peer(
    name="vllm",
    version="0.33.0",
    kernels=(
        "vllm/lora/ops/triton_ops/lora_shrink_op.py",
        "vllm/lora/ops/triton_ops/lora_expand_op.py",
        "vllm/lora/ops/triton_ops/kernel_utils.py",
        "vllm/lora/ops/triton_ops/utils.py",
        "vllm/lora/ops/triton_ops/lora_kernel_metadata.py",
    ),
    support=("vllm/utils/math_utils.py",),
    license="vllm-0.33.0.dist-info/licenses/LICENSE",
)
PEERS = (NEMO, VLLM)


def package(name: str, root: Path) -> types.ModuleType:
    """An empty package ``name`` whose submodules are found in ``root``'s matching folder (the peer's own
    ``__init__`` is not run: the packages' ``__init__`` files import the whole library)."""
    path = str(root.joinpath(*name.split(".")))
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [path]
    return importlib.util.module_from_spec(spec)


def stub(name: str, attrs: Mapping[str, object]) -> types.ModuleType:
    """A module ``name`` holding only ``attrs``."""
    module = types.ModuleType(name, f"stand-in for {name} (benchmarks.peers)")
    module.__dict__.update(attrs)
    return module


@contextmanager
def importing_from(
    root: Path, packages: tuple[str, ...], stubs: Mapping[str, Mapping[str, object]]
) -> Iterator[None]:
    """Within the block, ``packages`` resolve to ``root``'s folders and the ``stubs`` names to stand-in
    modules; after it, ``sys.modules`` holds no module of the peer's top-level packages (the imported ones
    live on through the objects taken from them), so nothing else in the process sees a partial package."""
    tops = {name.split(".")[0] for name in (*packages, *stubs)}
    taken = sorted(t for t in tops if t in sys.modules)
    if taken:
        raise ImportError(f"{', '.join(taken)} already imported: this process holds the peer's own package")
    added = {name: package(name, root) for name in packages}
    added.update({name: stub(name, attrs) for name, attrs in stubs.items()})
    sys.modules.update(added)
    for name, module in added.items():  # ``import a.b as m``, ``from a import b``: the parent's attribute
        parent, _, child = name.rpartition(".")
        if parent in added:
            setattr(added[parent], child, module)
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in tops]:
            del sys.modules[name]


def frozen_linear(w: torch.Tensor) -> torch.nn.Linear:
    """A bias-free ``nn.Linear`` holding ``w``, on the CPU, for a peer to wrap before the whole is moved to
    ``w``'s device: nothing draws from the CUDA generator (``skip_init``: no init of the weight; the peers
    initialise their A and B on the module's device). After a failed graph capture that generator refuses
    every later draw in the process (``lecture_code.bench.graphed``): on the H200, ``bench_lora`` stopped at a
    peer's ``nn.Linear`` init."""
    out = torch.nn.utils.skip_init(torch.nn.Linear, w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    out.weight.data.copy_(w)
    return out.requires_grad_(False)
