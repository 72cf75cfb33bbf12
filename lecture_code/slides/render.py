"""``slides/deck.md`` → one HTML deck (plus the pictures it shows), made offline.

The source is Markdown with slides separated by a line ``---``; ``:::`` lines pull code, pictures and numbers
from the repository (:mod:`.directives`). Python-Markdown renders each slide; Pygments highlights code;
``slides/deck.css`` lays out 1280 × 720 slides (one PDF page each) and ``slides/deck.js`` adds keyboard
navigation and fits a slide to the window. Nothing is fetched: the HTML inlines its CSS and script and links
only the pictures copied beside it.
"""

from __future__ import annotations

import html
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import markdown
from pygments.formatters import HtmlFormatter

from lecture_code.slides.directives import Context, expand, fill

__all__ = ["Deck", "SEPARATOR", "render_deck", "split_slides"]

SEPARATOR = "---"  # a line of its own between two slides
PYGMENTS_STYLE = "friendly"


@dataclass
class Deck:
    html: Path
    slides: int
    images: list[Path]  # the copied pictures
    title: str


def split_slides(text: str) -> list[str]:
    """The slides' Markdown: the text between lines that are exactly ``---`` (empty ones dropped)."""
    slides, current = [], []
    for line in text.splitlines():
        if line.strip() == SEPARATOR:
            slides.append("\n".join(current))
            current = []
        else:
            current.append(line)
    slides.append("\n".join(current))
    return [s.strip() for s in slides if s.strip()]


def _slide_html(source: str, ctx: Context) -> str:
    text, blocks = expand(source, ctx)
    body = markdown.markdown(
        text,
        extensions=["tables", "fenced_code", "codehilite", "attr_list", "sane_lists"],
        extension_configs={"codehilite": {"css_class": "code", "guess_lang": False}},
    )
    return fill(body, blocks)


def render_deck(deck_md: Path, out_dir: Path, root: Path) -> Deck:
    """Write ``out_dir/deck.html`` and ``out_dir/img/`` from ``deck_md``; the repository is ``root``."""
    style_dir = deck_md.parent
    ctx = Context(root=root)
    sources = split_slides(deck_md.read_text(encoding="utf-8"))
    match = re.search(r"^# (.+)$", sources[0], flags=re.MULTILINE)
    title = match.group(1).strip() if match else deck_md.stem
    slides = []
    for n, source in enumerate(sources, start=1):
        kind = "slide title-slide" if n == 1 else "slide"
        slides.append(
            f'<section class="{kind}" id="slide-{n}">{_slide_html(source, ctx)}'
            f"<footer><span>{html.escape(title)}</span><span>{n} / {len(sources)}</span></footer></section>"
        )
    css = (style_dir / "deck.css").read_text(encoding="utf-8")
    css += HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".code")
    script = (style_dir / "deck.js").read_text(encoding="utf-8")
    page = "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="python -m lecture_code.slides (from {deck_md.name})">',
            f"<title>{html.escape(title)}</title>",
            f"<style>\n{css}\n</style></head>",
            "<body>",
            *slides,
            f"<script>\n{script}\n</script>",
            "</body></html>",
        ]
    )
    if out_dir.exists():
        shutil.rmtree(out_dir / "img", ignore_errors=True)
    (out_dir / "img").mkdir(parents=True, exist_ok=True)
    images = []
    for path, name in ctx.images.items():
        images.append(Path(shutil.copyfile(root / path, out_dir / "img" / name)))
    html_path = out_dir / "deck.html"
    html_path.write_text(page, encoding="utf-8")
    return Deck(html=html_path, slides=len(sources), images=images, title=title)
