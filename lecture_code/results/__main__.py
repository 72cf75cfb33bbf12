"""``python -m lecture_code.results [--check]``: regenerate RESULTS.md and the README's table, or check."""

from __future__ import annotations

import argparse
import sys

from lecture_code.paths import REPO_ROOT
from lecture_code.results.page import render, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lecture_code.results", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"out of date: {path.relative_to(REPO_ROOT)} (run `make results`)")
        return 1 if old else 0
    for path, text in render().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
