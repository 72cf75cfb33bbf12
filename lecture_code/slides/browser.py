"""The built deck in headless Chromium: print it to PDF, and check that it renders.

Chromium is the system one (:func:`lecture_code.export.netron.find_chromium`: ``$CHROMIUM`` or ``chromium``
on ``PATH``; on Debian ``apt-get install chromium fonts-dejavu-core``), driven by Playwright with no browser
download. Every request that is not a ``file://`` URL is aborted and counted: the deck must need no network.

:func:`check_deck` reports what a reader would notice: how many slides, pictures that did not load, slides
whose content runs past the slide's edge, slides with text too small to read from the back of a room (under
:data:`MIN_TEXT_PX`; code cut from the sources is shrunk to fit and held to :data:`MIN_CODE_PX`), requests to
the network, and screenshots with how much of each is not background (a blank page reads as 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lecture_code.export.netron import CHROMIUM_FLAGS, find_chromium

__all__ = ["DeckCheck", "check_deck", "chromium_or_reason", "print_pdf"]

SLIDE_W, SLIDE_H = 1280, 720
MIN_TEXT_PX = 20  # 15 pt: captions and sources; body text and tables are 24 px (deck.css)
MIN_CODE_PX = 14  # a long definition shrinks to fit its slide, down to this


def chromium_or_reason() -> tuple[str | None, str]:
    """``(executable, "")`` or ``(None, why not)``."""
    path = find_chromium()
    if path:
        return path, ""
    return None, "no Chromium found: set $CHROMIUM, or run `make setup-browser` (Debian's chromium and fonts)"


@dataclass
class DeckCheck:
    slides: int
    missing_images: list[str]  # src of every <img> that did not load
    overflowing: list[int]  # 1-based numbers of slides whose content is taller or wider than the slide
    network_requests: list[str]  # anything the page asked for that is not a local file
    # slides with text under MIN_TEXT_PX (code under MIN_CODE_PX)
    small_text: list[int] = field(default_factory=list)
    screenshots: dict[Path, float] = field(default_factory=dict)  # PNG → fraction of non-background pixels

    @property
    def problems(self) -> list[str]:
        out = []
        if self.slides == 0:
            out.append("no slides")
        if self.missing_images:
            out.append(f"pictures that did not load: {self.missing_images}")
        if self.overflowing:
            out.append(f"slides whose content runs past the edge: {self.overflowing}")
        if self.small_text:
            out.append(
                f"slides with text under {MIN_TEXT_PX} px (code under {MIN_CODE_PX}): {self.small_text}"
            )
        if self.network_requests:
            out.append(f"requests to the network: {self.network_requests}")
        out += [f"{p.name} is blank" for p, ink in self.screenshots.items() if ink < 0.01]
        return out


def _launch(playwright, chromium: str | None):
    executable = chromium or find_chromium()
    if executable is None:
        raise RuntimeError(chromium_or_reason()[1])
    return playwright.chromium.launch(executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS))


def _open(browser, html_path: Path, blocked: list[str]):
    page = browser.new_page(viewport={"width": SLIDE_W, "height": SLIDE_H})

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(html_path.resolve().as_uri(), wait_until="load")
    return page


def print_pdf(html_path: Path, pdf_path: Path, chromium: str | None = None) -> Path:
    """``html_path`` printed to ``pdf_path``: one 1280 × 720 page per slide (the deck's ``@page``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _launch(p, chromium)
        try:
            blocked: list[str] = []
            page = _open(browser, html_path, blocked)
            page.emulate_media(media="print")
            page.pdf(path=str(pdf_path), prefer_css_page_size=True, print_background=True)
        finally:
            browser.close()
    if blocked:
        raise RuntimeError(f"the deck asked for the network: {blocked}")
    return pdf_path


def _ink(png: Path) -> float:
    """Fraction of pixels that differ from the most common colour (the background)."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    background = colours[counts.argmax()]
    return float((np.abs(pixels.astype(int) - background).sum(axis=1) > 24).mean())


def check_deck(html_path: Path, shots_dir: Path, chromium: str | None = None) -> DeckCheck:
    """Load the deck, inspect every slide, screenshot the first slide and the first slide with a picture."""
    from playwright.sync_api import sync_playwright

    shots_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = _launch(p, chromium)
        try:
            blocked: list[str] = []
            page = _open(browser, html_path, blocked)
            page.emulate_media(media="print")  # slides at their own size (no fit-to-window zoom)
            facts = page.evaluate(
                """([minText, minCode]) => {
                  const slides = Array.from(document.querySelectorAll('section.slide'));
                  const missing = Array.from(document.images)
                    .filter((img) => !img.complete || img.naturalWidth === 0)
                    .map((img) => img.getAttribute('src'));
                  const over = slides.map((s, i) => [i + 1, s]).filter(([, s]) =>
                    s.scrollHeight > s.clientHeight + 1 || s.scrollWidth > s.clientWidth + 1
                    || Array.from(s.querySelectorAll('.code')).some((e) => {  // code clipped inside its box
                      const pre = e.querySelector('pre');
                      return pre && pre.getBoundingClientRect().bottom > e.getBoundingClientRect().bottom + 1;
                    })
                    || Array.from(s.querySelectorAll('pre, table, img, ul, p')).some((e) => {
                      const r = e.getBoundingClientRect(), b = s.getBoundingClientRect();
                      return r.bottom > b.bottom - 30 + 1 || r.right > b.right + 1;  // 30 px: the footer
                    })).map(([i]) => i);
                  const small = slides.map((s, i) => [i + 1, s]).filter(([, s]) => {
                    const walk = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
                    while (walk.nextNode()) {
                      const e = walk.currentNode.parentElement;
                      if (!walk.currentNode.textContent.trim() || e.closest('footer')) continue;
                      const px = parseFloat(getComputedStyle(e).fontSize);
                      if (px < (e.closest('pre') ? minCode : minText) - 0.05) return true;
                    }
                    return false;
                  }).map(([i]) => i);
                  const withImage = slides.findIndex((s) => s.querySelector('img'));
                  return {count: slides.length, missing, over, small, withImage: withImage + 1};
                }""",
                [MIN_TEXT_PX, MIN_CODE_PX],
            )
            shots = {}
            numbers = [1] + ([facts["withImage"]] if facts["withImage"] > 0 else [])
            for n in numbers:
                png = shots_dir / f"slide-{n:02d}.png"
                page.locator(f"#slide-{n}").screenshot(path=str(png))
                shots[png] = _ink(png)
        finally:
            browser.close()
    return DeckCheck(
        slides=facts["count"],
        missing_images=facts["missing"],
        overflowing=facts["over"],
        small_text=facts["small"],
        network_requests=blocked,
        screenshots=shots,
    )
