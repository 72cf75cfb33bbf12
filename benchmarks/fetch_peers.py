"""Fetch the public peers' kernel files for the LoRA benchmarks: each pinned wheel
(``benchmarks.peers.PEERS``: nemo_automodel 0.7.0, vllm 0.33.0) downloaded by pip, only the files the
benchmarks import extracted into
``build/peers/<name>-<version>/`` (git-ignored), the wheel deleted again. Where a file as published cannot
run here, a documented text patch (``Peer.patches``) is applied as it is extracted, and printed.

Run it where pip reaches a package registry; then carry ``build/peers`` (a few hundred KB) to the GPU machine,
which has none (the device tool: ``carry=["build/peers"]``). A peer whose files are all there already is left
alone (``--force`` fetches again); ``--wheels DIR`` takes the wheels from DIR instead of downloading them.

    python -m benchmarks.fetch_peers
    python -m benchmarks.fetch_peers --wheels /path/to/downloaded/wheels
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from benchmarks.peers import PEERS, Patch, Peer


def wheel_of(peer: Peer, folder: Path) -> Path | None:
    """``peer``'s wheel in ``folder`` (its pinned version), or None."""
    found = sorted(folder.glob(f"{peer.name}-{peer.version}-*.whl"))
    return found[0] if found else None


def download(peer: Peer, folder: Path) -> Path:
    """pip downloads ``peer``'s pinned wheel (without dependencies) into ``folder``."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*command, "--dest", str(folder), f"{peer.name}=={peer.version}"], check=True)
    wheel = wheel_of(peer, folder)
    if wheel is None:
        raise FileNotFoundError(f"pip downloaded no {peer.name}-{peer.version} wheel into {folder}")
    return wheel


def extract(peer: Peer, wheel: Path) -> list[tuple[str, int]]:
    """``peer.files`` from ``wheel`` into ``peer.folder`` (replacing what is there), ``peer.patches`` applied;
    (file, bytes) each."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        absent = [f for f in peer.files if f not in names]
        if absent:
            raise FileNotFoundError(f"{wheel.name} lacks {absent}: the pinned version moved its files")
        for name in peer.files:
            data = zf.read(name)
            for patch in (p for p in peer.patches if p.file == name):
                data = apply(patch, data.decode("utf-8")).encode("utf-8")
            target = peer.folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            out.append((name, len(data)))
    return out


def apply(patch: Patch, text: str) -> str:
    """``text`` with ``patch.old`` replaced by ``patch.new``; an error unless ``old`` occurs exactly once."""
    count = text.count(patch.old)
    if count != 1:
        raise ValueError(f"{patch.file}: {patch.old!r} occurs {count} times, not once: the patch is stale")
    return text.replace(patch.old, patch.new)


def fetch(peer: Peer, wheels: Path | None, force: bool) -> None:
    if peer.missing() is None and not force:
        print(f"{peer.name}=={peer.version}: already in {peer.folder} (--force to fetch again)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        wheel = wheel_of(peer, wheels) if wheels else None
        wheel = wheel or download(peer, Path(tmp))
        files = extract(peer, wheel)
    print(f"{peer.name}=={peer.version}: from {wheel.name} into {peer.folder}")
    for name, size in files:
        print(f"  {name} ({size / 1024:.1f} KB)")
    for patch in peer.patches:
        print(f"  patched {patch.file}: {patch.old!r} -> {patch.new!r} ({patch.why})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, help="a folder holding the pinned wheels (else pip downloads them)")
    p.add_argument("--force", action="store_true", help="fetch again even where every file is there")
    args = p.parse_args(argv)
    for peer in PEERS:
        fetch(peer, args.wheels, args.force)
    print("carry build/peers to the GPU machine (it has no package registry)")


if __name__ == "__main__":
    main()
