"""Normalise the committed notebooks' metadata, so opening one in JupyterLab does not mark it changed.

    python notebooks/normalize_metadata.py            # rewrite notebooks/[0-9]*.ipynb in place
    python notebooks/normalize_metadata.py --check    # exit 1 and name the files that are not normalised (CI)

What it sets: the kernelspec JupyterLab writes (``Python 3 (ipykernel)``), ``language_info`` reduced to the
language name (the full record carries the Python version of whichever machine executed it last), and no
per-cell execution timestamps. Outputs and cell tags are left exactly as they are: they come from a real
execution. ``make lab`` opens a git-ignored working copy, so a learner's runs never touch these files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python"}
NOTEBOOKS = Path(__file__).resolve().parent


def normalized(nb: dict) -> dict:
    """A copy of ``nb`` with normalised notebook and cell metadata."""
    nb = json.loads(json.dumps(nb))
    nb["metadata"] = {**nb.get("metadata", {}), "kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    return nb


def dumps(nb: dict) -> str:
    """The on-disk form Jupyter writes: one-space indent, non-ASCII kept, trailing newline."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only report; exit 1 if any notebook would change")
    p.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/[0-9]*.ipynb)")
    args = p.parse_args(argv)
    paths = args.paths or sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        fixed = dumps(normalized(json.loads(text)))
        if fixed != text:
            stale.append(path)
            if not args.check:
                path.write_text(fixed, encoding="utf-8")
    verb = "not normalised" if args.check else "normalised"
    for path in stale:
        print(f"{verb}: {path.name}")
    if args.check and stale:
        print("run: make notebooks-normalize", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
