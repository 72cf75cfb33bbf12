"""Netron serves an exported graph on loopback, and headless Chromium renders it (no consent dialog).

Needs Playwright (a pip package, in requirements.txt) and a system Chromium: the ``chromium`` fixture of
``tests/conftest.py`` (``make setup-browser`` installs one; without it these tests skip, saying why).
"""

from __future__ import annotations

import struct
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lecture_code.export import netron as netron_view
from lecture_code.export.netron import serve_netron
from lecture_code.export.onnx_export import export_onnx, summarize_onnx


class TinyTower(nn.Module):
    """DLRM's signature, a handful of ops: enough nodes for a plausible count, quick to export and draw."""

    def __init__(self):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.table = nn.Embedding(101, 8)
        self.top = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        pooled = self.table(torch.remainder(sparse, 101)).sum(dim=1)  # [B, 8]
        return self.top(torch.cat([self.bottom(dense), pooled], dim=1)).squeeze(1)  # [B]


@pytest.fixture
def onnx_file(tmp_path, seed) -> Path:
    example = (torch.log1p(torch.rand(4, 13) * 100), torch.randint(2, 1 << 32, (4, 26)))
    return export_onnx(TinyTower().eval(), example, tmp_path / "tiny.onnx", dynamo=False)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])


def _drawn_pixels(path: Path) -> int:
    """Pixels that are not the white background: 0 for a blank picture."""
    from PIL import Image

    image = Image.open(path).convert("L")
    return sum(count for value, count in enumerate(image.histogram()) if value < 200)


def test_serve_netron_on_loopback_and_stop(onnx_file):
    pytest.importorskip("netron", reason="the netron package (requirements.txt) is not installed")
    url, stop = serve_netron(onnx_file)
    try:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"Netron" in response.read()
    finally:
        stop()
    stop()  # idempotent
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url, timeout=2)


def test_serve_netron_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        serve_netron(tmp_path / "missing.onnx")


@pytest.mark.slow  # a Chromium start and a render: about 5 s
def test_netron_renders_the_graph_in_headless_chromium(chromium, onnx_file, tmp_path):
    png = tmp_path / "graph.png"
    result = netron_view.screenshot_netron(onnx_file, png, width=1200, height=800, chromium=chromium)
    summary = summarize_onnx(onnx_file)
    drawn = result["nodes"]
    # Netron draws one box per operator, per graph input and per output; Constant nodes may be folded.
    expected = (
        summary.nodes - summary.op_counts.get("Constant", 0) + len(summary.inputs) + len(summary.outputs)
    )
    assert drawn > 10 and expected <= drawn <= summary.nodes + len(summary.inputs) + len(summary.outputs), (
        f"{drawn} nodes drawn for {summary.nodes} ONNX nodes"
    )
    assert result["png"] == png and png.stat().st_size > 10_000
    width, height = _png_size(png)
    assert width >= 200 and height >= 200
    assert _drawn_pixels(png) > 2_000  # boxes and text, not a blank page or a lone dialog
    assert result["url"].startswith("http://127.0.0.1:")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # the server was stopped
        urllib.request.urlopen(result["url"], timeout=2)
    assert "crop" not in result


@pytest.mark.slow  # a Chromium start and a render: about 5 s
def test_crop_keeps_the_top_of_the_graph_readable_and_outlines_it(chromium, onnx_file, tmp_path):
    """From the Concat (TinyTower's interaction) down: the top MLP's two Gemms, not the bottom MLP's two."""
    png = tmp_path / "graph.png"
    result = netron_view.screenshot_netron(onnx_file, png, crop_op="Concat", chromium=chromium)
    crop = result["crop"]
    assert crop["png"] == tmp_path / "graph_crop.png"
    assert crop["ops"]["Concat"] == 1 and crop["ops"]["Gemm"] == 2 and crop["ops"]["Relu"] == 1
    assert "dense" not in crop["ops"] and "Mod" not in crop["ops"]  # the inputs and the hash lie above
    x, y, width, height = crop["box"]
    assert _png_size(crop["png"]) == (width, height)  # 1:1, not scaled
    assert _drawn_pixels(crop["png"]) > 500
    overview_w, overview_h = _png_size(png)
    assert 0 <= x and x + width <= overview_w and 0 <= y and y + height <= overview_h
    assert _red_pixels(png) > 2 * (width + height)  # the outline: a 6-px red rectangle around the crop


def _red_pixels(path: Path) -> int:
    from PIL import Image

    rgb = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int(((rgb[..., 0] > 180) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)).sum())


@pytest.mark.slow  # a Chromium start and a render: about 5 s
def test_netron_renders_with_an_old_netron_build(chromium, onnx_file, tmp_path, monkeypatch):
    """Netron refuses to draw 180 days after its build; the page clock is then set back (shifted Date)."""
    import datetime as dt

    long_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=400)
    monkeypatch.setattr(netron_view, "_netron_build_date", lambda: long_ago)
    assert netron_view._clock_shift_ms(long_ago, dt.datetime.now(dt.timezone.utc)) > 0
    result = netron_view.screenshot_netron(onnx_file, tmp_path / "g.png", full_graph=False, chromium=chromium)
    assert result["nodes"] > 10


@pytest.mark.slow  # a Chromium start and a render: about 5 s
def test_a_graph_netron_refuses_to_draw_raises_with_its_message(chromium, onnx_file, tmp_path, monkeypatch):
    """A page clock a year past Netron's build: Netron shows "Please update" and never draws."""
    monkeypatch.setattr(netron_view, "_clock_shift_ms", lambda built, now: -365 * 24 * 3600 * 1000)
    with pytest.raises(TimeoutError, match="Please update"):
        netron_view.screenshot_netron(
            onnx_file, tmp_path / "g.png", full_graph=False, chromium=chromium, timeout_s=3
        )
    assert (tmp_path / "g.error.png").stat().st_size > 0  # what the page showed instead, for debugging


@pytest.mark.slow  # a Chromium start and a render: about 5 s
def test_screenshot_works_inside_a_running_event_loop(chromium, onnx_file, tmp_path):
    """A Jupyter cell runs inside an asyncio loop, where Playwright's sync API refuses to start."""
    import asyncio

    async def from_a_cell():
        return netron_view.screenshot_netron(onnx_file, tmp_path / "cell.png", chromium=chromium)

    result = asyncio.run(from_a_cell())
    assert result["nodes"] > 10 and (tmp_path / "cell.png").stat().st_size > 10_000
