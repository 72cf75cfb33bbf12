"""View an ONNX file in Netron: serve it on loopback, open it for the learner, or screenshot it headless.

- :func:`serve_netron` starts Netron's own HTTP server (``netron.serve``, no browser) on 127.0.0.1.
- :func:`open_in_netron` does that, prints the URL and opens a browser where one exists.
- :func:`screenshot_netron` renders the graph in headless Chromium (driven by Playwright, using the
  system ``chromium``: Debian package ``chromium``, no Playwright browser download) and saves a PNG; with
  ``crop_op`` also a readable 1:1 crop of part of it (:mod:`.netron_crop` says which part), outlined in red
  on the overview.

Two things the headless render needs, both from Netron's ``browser.js``:

- a ``consent`` cookie. Without it Netron asks ipinfo.io whether to show its cookie dialog; offline the
  request fails, the dialog is shown, and it covers the graph. Any value works (Netron stores a timestamp).
- a clock within 180 days of Netron's build date (``<meta name="date">`` in its ``index.html``). Past that,
  Netron shows "Please update to the newest version" in an endless loop instead of the graph. When the
  installed Netron is that old, the page's clock is set back to the day after its build (an init script
  that shifts ``Date``; time still runs, so animations and timers behave).

Every request that is not to the loopback server is aborted: the render never touches the network.
Netron serves one model per Python process at a time (its request handler keeps the content on the class).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import json
import logging
import math
import os
import platform
import re
import shutil
import time
import warnings
import webbrowser
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from lecture_code.export.netron_crop import NodeBox, crop_box

__all__ = [
    "find_chromium",
    "open_in_netron",
    "screenshot_netron",
    "serve_netron",
    "side_by_side_html",
    "write_sidecar",
]

CHROMIUM_FLAGS = (
    "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_MARGIN = 40  # CSS pixels around the graph in a full-graph screenshot
# Headless Chromium (software compositing) leaves parts of a larger page blank: a 6124x2035 graph painted
# whole here, 23696x12749 (even at device scale 0.3) only in part. Larger graphs get the viewport only.
_PAINT_BUDGET_PX = 16_000_000
_NETRON_MAX_AGE_DAYS = 180  # browser.js: older builds show an endless "Please update" dialog


def serve_netron(
    path: str | os.PathLike, port: int | None = None, host: str = "127.0.0.1"
) -> tuple[str, Callable[[], None]]:
    """Serve ``path`` with Netron on ``host`` (loopback by default); return ``(url, stop)``.

    ``port=None`` lets Netron pick a free one. ``stop()`` shuts the server down (idempotent).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    import netron

    # netron.serve calls logging.basicConfig(INFO) when the root logger has no handler, which would switch
    # on INFO logs of every library in the process. A temporary handler keeps the caller's logging as is.
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        address = netron.serve(str(path), address=(host, port), browse=False)
    finally:
        root.removeHandler(guard)
    url = f"http://{address[0]}:{address[1]}"

    def stop() -> None:
        netron.stop(address)

    return url, stop


def open_in_netron(
    path: str | os.PathLike, port: int | None = None, browse: bool = True
) -> tuple[str, Callable[[], None]]:
    """Serve ``path`` with Netron on 127.0.0.1, print the URL and open a browser tab where possible.

    Returns ``(url, stop)``; call ``stop()`` when done. On a remote machine (JupyterLab over SSH) open the
    URL through a port forward, e.g. ``ssh -L PORT:127.0.0.1:PORT host``.
    """
    url, stop = serve_netron(path, port=port)
    print(f"Netron is serving {Path(path).name} at {url}  (call stop() to shut it down)")
    if browse:
        with contextlib.suppress(Exception):
            webbrowser.open(url)
    return url, stop


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable: ``$CHROMIUM`` if set, else the first on ``PATH``."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _netron_build_date() -> dt.datetime | None:
    import netron

    html = Path(netron.__file__).with_name("index.html")
    match = re.search(r'<meta name="date" content="([^"]+)"', html.read_text(encoding="utf-8"))
    if not match:
        return None
    return dt.datetime.fromisoformat(match.group(1)).replace(tzinfo=dt.timezone.utc)


# Runs before Netron's scripts: every "now" in the page (new Date(), Date.now()) moves back by SHIFT_MS.
_SHIFT_DATE_JS = """(() => {
  const RealDate = Date;
  class ShiftedDate extends RealDate {
    constructor(...args) { super(...(args.length ? args : [RealDate.now() - SHIFT_MS])); }
    static now() { return RealDate.now() - SHIFT_MS; }
  }
  window.Date = ShiftedDate;
})();"""


def _clock_shift_ms(built: dt.datetime | None, now: dt.datetime) -> int:
    """How far to set the page's clock back so Netron (built ``built``) does not refuse to run; 0 if fine."""
    if built is None or (now - built).days < _NETRON_MAX_AGE_DAYS - 7:
        return 0
    return int((now - (built + dt.timedelta(days=1))).total_seconds() * 1000)


def screenshot_netron(
    onnx_path: str | os.PathLike,
    png_path: str | os.PathLike,
    width: int = 1600,
    height: int = 1000,
    *,
    full_graph: bool = True,
    crop_op: str | None = None,
    crop_ranks_above: int = 0,
    crop_png: str | os.PathLike | None = None,
    chromium: str | None = None,
    timeout_s: float = 60.0,
) -> dict:
    """Render ``onnx_path`` in Netron with headless Chromium and save a PNG of the graph.

    Args:
        width, height: browser viewport in CSS pixels.
        full_graph: screenshot the whole graph (up to 16 Mpx, see ``clipped``) rather than the viewport.
        crop_op, crop_ranks_above: also save a 1:1 crop from ``crop_ranks_above`` layout ranks above the
            topmost ``crop_op`` node down to the outputs (:func:`~lecture_code.export.netron_crop.crop_box`),
            and outline it in red on the overview. Needs the whole graph painted (``full_graph``, not
            ``clipped``); a missing operator raises ValueError.
        crop_png: where the crop goes (default: ``<png_path stem>_crop.png``).
        chromium: browser executable (default :func:`find_chromium`).
        timeout_s: limit for Netron to draw the graph.

    Returns ``{"png": Path, "nodes": number of g.node elements drawn, "url": the loopback URL,
    "graph_px": (width, height) of the whole graph, "clipped": True when the graph was too large to paint
    in one piece (more than 16 Mpx) and only the top-left viewport was saved (with a warning),
    "chromium": the browser's version}``, and with ``crop_op`` ``"crop": {"png": Path, "box": [x, y, width,
    height] in overview pixels, "nodes": nodes in the crop, "ops": {label: count}}``.
    The server and the browser are stopped on every path out, errors included.
    Inside a running asyncio loop (a Jupyter cell), Playwright's sync API refuses to start, so the work
    then runs in a worker thread of its own.
    """
    crop = None
    if crop_op is not None:
        png = Path(png_path)
        crop_png = Path(crop_png) if crop_png else png.with_name(f"{png.stem}_crop.png")
        crop = (crop_op, crop_ranks_above, crop_png)
    args = (onnx_path, png_path, width, height, full_graph, crop, chromium, timeout_s)
    if _in_running_event_loop():
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(_screenshot, *args).result()
    return _screenshot(*args)


def _in_running_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _screenshot(onnx_path, png_path, width, height, full_graph, crop, chromium, timeout_s) -> dict:
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright

    executable = chromium or find_chromium()
    if not executable:
        raise FileNotFoundError(
            "no Chromium found: set $CHROMIUM, or on Debian "
            "apt-get install chromium fonts-dejavu-core fonts-wqy-microhei"
        )
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    url, stop = serve_netron(onnx_path)
    host = urlparse(url).hostname
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS)
            )
            chromium_version = browser.version
            try:
                context = browser.new_context(
                    viewport={"width": width, "height": height}, device_scale_factor=1
                )
                context.add_cookies([{"name": "consent", "value": str(int(time.time() * 1000)), "url": url}])
                context.route(
                    "**/*",
                    lambda route: (
                        route.continue_() if urlparse(route.request.url).hostname == host else route.abort()
                    ),
                )
                page = context.new_page()
                shift_ms = _clock_shift_ms(_netron_build_date(), dt.datetime.now(dt.timezone.utc))
                if shift_ms:
                    page.add_init_script(_SHIFT_DATE_JS.replace("SHIFT_MS", str(shift_ms)))
                page.goto(url, wait_until="load", timeout=timeout_s * 1000)
                # Netron creates nodes transparent (style="opacity: 0") and removes the style once the
                # layout is done. (page.evaluate and wait_for_function are out: Netron disables window.eval.)
                try:
                    page.wait_for_selector("#canvas g.node", state="attached", timeout=timeout_s * 1000)
                    page.wait_for_selector(
                        '#canvas g.node[style*="opacity"]', state="detached", timeout=timeout_s * 1000
                    )
                except PlaywrightTimeoutError:
                    shown = png_path.with_suffix(".error.png")
                    page.screenshot(path=str(shown))
                    message = page.locator("#message-text").text_content(timeout=1000) or ""
                    raise TimeoutError(
                        f"Netron drew no graph within {timeout_s:.0f} s (its message: {message.strip()!r}); "
                        f"what the page showed is in {shown}"
                    ) from None
                nodes = page.locator("#canvas g.node").count()
                box = page.locator("#canvas").bounding_box() or {"width": width, "height": height}
                graph_w, graph_h = (
                    math.ceil(box["width"]) + 2 * _MARGIN,
                    math.ceil(box["height"]) + 2 * _MARGIN,
                )
                clipped = full_graph and graph_w * graph_h > _PAINT_BUDGET_PX
                if clipped:
                    warnings.warn(
                        f"the graph is {graph_w}x{graph_h} px, more than headless Chromium paints in one "
                        f"screenshot; saved the top-left {width}x{height} view instead",
                        stacklevel=2,
                    )
                if crop is not None and (clipped or not full_graph):
                    raise ValueError(
                        f"a crop needs the whole graph painted; this one is {graph_w}x{graph_h} px"
                        + (" (more than headless Chromium paints)" if clipped else " and full_graph is False")
                    )
                if full_graph and not clipped:
                    # Chromium paints only what lies in the viewport: grow it to the whole graph first.
                    if graph_w > width or graph_h > height:
                        page.set_viewport_size({"width": max(width, graph_w), "height": max(height, graph_h)})
                        page.wait_for_timeout(500)  # Netron re-centres the graph on resize
                    page.locator("#canvas").screenshot(path=str(png_path), timeout=timeout_s * 1000)
                else:
                    page.screenshot(path=str(png_path))
                cropped = _crop(page, png_path, *crop) if crop is not None else None
            finally:
                browser.close()
    finally:
        stop()
    return {
        "png": png_path,
        "nodes": nodes,
        "url": url,
        "graph_px": (graph_w, graph_h),
        "clipped": clipped,
        "chromium": chromium_version,
        **({"crop": cropped} if cropped is not None else {}),
    }


def _crop(page, overview_png: Path, op: str, ranks_above: int, crop_png: Path) -> dict:
    """Save the crop of the painted page, outline it on the overview PNG; return what ``"crop"`` reports."""
    from PIL import Image, ImageDraw

    canvas = page.locator("#canvas").bounding_box()
    nodes = []
    for node in page.locator("#canvas g.node").all():
        box = node.bounding_box()
        if box is not None:
            label = (node.locator("text").first.text_content() or "").strip()
            nodes.append(NodeBox(label, box["x"], box["y"], box["width"], box["height"]))
    size = page.viewport_size
    box = crop_box(nodes, op, ranks_above, bounds=(size["width"], size["height"]))
    crop_png.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(crop_png), clip=box.clip)
    # The overview is the #canvas element: its pixel (0, 0) is the canvas's top-left corner on the page.
    x, y = round(box.x - canvas["x"]), round(box.y - canvas["y"])
    with Image.open(overview_png) as image:
        overview = image.convert("RGB")
    ImageDraw.Draw(overview).rectangle([x, y, x + box.width, y + box.height], outline=(220, 0, 0), width=6)
    overview.save(overview_png)
    box_px = [x, y, box.width, box.height]
    return {"png": crop_png, "box": box_px, "nodes": len(box.nodes), "ops": dict(box.labels)}


def side_by_side_html(
    overview_png: str | os.PathLike, crop_png: str | os.PathLike, overview_width: str = "70%"
) -> str:
    """HTML that shows the overview (scaled to ``overview_width``) and the crop at 1:1 beside it, images
    embedded (for ``IPython.display.HTML`` in a notebook)."""
    import base64

    def img(path, style: str) -> str:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        return f'<img src="data:image/png;base64,{data}" style="{style}">'

    return (
        '<div style="display:flex; gap:12px; align-items:flex-start">'
        + img(overview_png, f"width:{overview_width}; height:auto")
        + img(crop_png, "flex:none")
        + "</div>"
    )


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def write_sidecar(png_path: str | os.PathLike, command: str, extra: dict | None = None) -> Path:
    """Write ``<png>.json`` beside a picture: the command that remakes it, versions, date, device."""
    import onnx
    import torch

    png_path = Path(png_path)
    info = {
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores), {platform.system()}",
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxscript": _version("onnxscript"),
        "onnxruntime": _version("onnxruntime"),
        "netron": _version("netron"),
        "playwright": _version("playwright"),
    }
    clashes = sorted(set(info) & set(extra or {}))
    if clashes:
        raise ValueError(f"extra must not replace the recorded fields {clashes}")
    info.update(extra or {})
    sidecar = png_path.with_suffix(".json")
    sidecar.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return sidecar
