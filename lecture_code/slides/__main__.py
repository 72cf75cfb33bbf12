"""``python -m lecture_code.slides``: build the deck (HTML + PDF) from ``slides/deck.md``; check it renders.

python -m lecture_code.slides                  # artifacts/slides/deck.html and deck.pdf
python -m lecture_code.slides --no-pdf         # HTML only (no Chromium needed)
python -m lecture_code.slides --check          # also load it in headless Chromium: slides, pictures, blank?
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lecture_code.paths import REPO_ROOT
from lecture_code.slides.browser import check_deck, chromium_or_reason, print_pdf
from lecture_code.slides.render import render_deck

DECK = REPO_ROOT / "slides" / "deck.md"
OUT = REPO_ROOT / "artifacts" / "slides"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lecture_code.slides", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--deck", type=Path, default=DECK, help="the Markdown source (default slides/deck.md)"
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help="build folder (default artifacts/slides, ignored)"
    )
    parser.add_argument("--no-pdf", action="store_true", help="HTML only")
    parser.add_argument(
        "--check", action="store_true", help="load the deck in headless Chromium and check it"
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    deck = render_deck(args.deck, args.out, REPO_ROOT)
    print(f"wrote {deck.html} ({deck.slides} slides, {len(deck.images)} pictures)")
    status = 0
    if not args.no_pdf or args.check:
        chromium, why = chromium_or_reason()
        if chromium is None:
            print(f"cannot print the PDF or check the deck: {why}", file=sys.stderr)
            return 2
    if not args.no_pdf:
        pdf = print_pdf(deck.html, args.out / "deck.pdf")
        print(f"wrote {pdf}")
    if args.check:
        result = check_deck(deck.html, args.out / "check")
        shots = ", ".join(f"{p.name} {100 * ink:.0f}% ink" for p, ink in result.screenshots.items())
        print(f"checked in headless Chromium: {result.slides} slides; screenshots {shots}")
        for problem in result.problems:
            print(f"problem: {problem}", file=sys.stderr)
        status = 1 if result.problems else 0
    print(f"slides built in {time.monotonic() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
