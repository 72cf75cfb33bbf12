"""The lecture's slides, built offline from the repository: ``make slides``.

- :mod:`.extract`: a function or class cut from its source file (code on a slide is never retyped).
- :mod:`.directives`: the ``:::`` lines of ``slides/deck.md``: code, pictures, and numbers from
  :mod:`lecture_code.results` ("not measured yet" where a benchmark has no result file).
- :mod:`.render`: ``slides/deck.md`` → ``deck.html`` + the pictures it shows.
- :mod:`.browser`: headless Chromium prints the PDF and checks that the deck renders.
"""

from lecture_code.slides.browser import DeckCheck, check_deck, chromium_or_reason, print_pdf
from lecture_code.slides.extract import Excerpt, extract
from lecture_code.slides.render import Deck, render_deck, split_slides

__all__ = [
    "Deck",
    "DeckCheck",
    "Excerpt",
    "check_deck",
    "chromium_or_reason",
    "extract",
    "print_pdf",
    "render_deck",
    "split_slides",
]
