"""Execute notebooks in place with nbclient: how the committed outputs are made (CPU or GPU machine).

    python notebooks/execute.py notebooks/02_profiling_dlrm.ipynb [more.ipynb ...] [--timeout 1200]

Each notebook runs in ``notebooks/`` (as JupyterLab and nbval run it) with the ``python3`` kernel of the
interpreter running this script; outputs are replaced, metadata normalised (``normalize_metadata.py``), and
the file is written only after every cell succeeded, so a failed run leaves the committed file untouched.
Consecutive stream outputs are merged and carriage returns applied, as a notebook front end shows them
(nbconvert's ``CoalesceStreamsPreprocessor``): a progress bar is stored as its last state, not as one output
per update. Prints the wall time per notebook. Needs nbclient, ipykernel and nbconvert (no JupyterLab).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from normalize_metadata import dumps, normalized  # noqa: E402  (the script beside this one)


def execute(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    seconds = time.perf_counter() - start
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    path.write_text(dumps(normalized(json.loads(nbformat.writes(nb)))), encoding="utf-8")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = p.parse_args(argv)
    for path in args.paths:
        print(f"{path.name}: {execute(path.resolve(), args.timeout):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
