"""The JSON sidecar beside every picture of ``perf_screenshots/``: what made it and what it measured.

``write_sidecar`` stamps the command, device, versions, date, settings and a ``format`` number; notebooks
read a committed picture with :func:`committed`, or with :func:`current`, which returns ``None`` when the
sidecar is missing or was written by an older version of the command (so a cell can say so instead of
failing on a key that older runs did not write).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from pathlib import Path

from lecture_code.environment import describe
from lecture_code.paths import REPO_ROOT

__all__ = ["FORMAT", "SCREENSHOTS", "committed", "current", "missing", "stamp", "write_sidecar"]

FORMAT = 2  # 2: interleaved repeats (ms_min/ms_max/samples_ms), light-profile breakdowns, new pictures
SCREENSHOTS = REPO_ROOT / "perf_screenshots"


def committed(name: str, folder: Path | None = None) -> tuple[Path, dict]:
    """A picture of ``perf_screenshots/`` and its sidecar: ``(png path, sidecar dict)``."""
    png = (folder or SCREENSHOTS) / f"{name}.png"
    return png, json.loads(png.with_suffix(".json").read_text(encoding="utf-8"))


def current(name: str, folder: Path | None = None) -> tuple[Path, dict] | None:
    """:func:`committed`, or ``None`` if the sidecar is missing or older than :data:`FORMAT`."""
    png = (folder or SCREENSHOTS) / f"{name}.png"
    if not png.with_suffix(".json").exists():
        return None
    png, info = committed(name, folder)
    return (png, info) if info.get("format", 1) >= FORMAT else None


def stamp(info: dict) -> str:
    """One line saying where and how a committed picture was made."""
    return f"{info['device']} · torch {info['torch']} · {info['date'][:10]} · `{info['command']}`"


def missing(name: str) -> str:
    """What a notebook prints when :func:`current` found no usable sidecar."""
    return (
        f"perf_screenshots/{name}.json is missing or was written by an older version of the screenshot "
        f"command: run `python -m lecture_code.perf.screenshots` on a GPU to make it."
    )


def write_sidecar(png: Path, command: str, settings, results: list[dict], **extra) -> Path:
    """``<png>.json``: what made the picture (``command``, ``settings``: a dataclass) and what it measured."""
    info = {
        "picture": png.name,
        "format": FORMAT,
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **describe(),
        "settings": asdict(settings),
        **extra,
        "results": results,
    }
    sidecar = png.with_suffix(".json")
    sidecar.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return sidecar
