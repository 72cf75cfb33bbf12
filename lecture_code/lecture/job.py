"""The main job of ``make lecture`` (``python -m lecture_code.lecture``), end to end, then a summary.

Runs, in order, each step as its own process (a failing step is reported, the others still run):

1. ``notebooks``: every notebook executed into ``artifacts/notebooks/`` (the committed ones stay as they are),
   with an HTML copy;
2. ``pictures``: ``python -m lecture_code.perf.screenshots`` — on a GPU at full sizes, rewriting
   ``perf_screenshots/``; on a CPU (or with ``--small``) its ``--tiny`` settings, about a minute on 2 cores,
   into ``runs/perf_screenshots_tiny/`` (the CPU sizes take far longer: ``make screenshots`` draws them);
3. ``slides``: ``python -m lecture_code.slides --check`` (HTML + PDF in ``artifacts/slides/``, checked in
   headless Chromium; HTML only, and said so, where no Chromium is installed).

The summary says what ran, how long each step took, where its outputs are, and on which device. ``--small``
is the CI setting (the tiny pictures); ``--skip notebooks`` leaves out the longest step.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lecture_code.paths import REPO_ROOT

STEPS = ("notebooks", "pictures", "slides")
EXECUTED = Path("artifacts") / "notebooks"


@dataclass
class Step:
    name: str
    commands: list[list[str]]
    outputs: str
    note: str = ""
    seconds: float = 0.0
    status: str = "not run"


def _on_gpu() -> bool:
    from kernels import runtime  # decides the runtime mode (interpreter on a CPU)

    return runtime.has_gpu()


def plan(small: bool, gpu: bool, chromium: bool, python: str = sys.executable) -> list[Step]:
    notebooks = sorted((REPO_ROOT / "notebooks").glob("[0-9]*.ipynb"))
    nbconvert = [python, "-m", "jupyter", "nbconvert", "--output-dir", str(EXECUTED)]
    nb_commands = []
    for nb in notebooks:
        rel = nb.relative_to(REPO_ROOT)
        nb_commands.append([*nbconvert, "--to", "notebook", "--execute", str(rel)])
        nb_commands.append([*nbconvert, "--to", "html", str(EXECUTED / nb.name)])
    tiny = small or not gpu  # what is cheap here: full sizes on a GPU, seconds-long settings on a CPU
    pictures = [python, "-m", "lecture_code.perf.screenshots", *(["--tiny"] if tiny else [])]
    slides = [python, "-m", "lecture_code.slides", *(["--check"] if chromium else ["--no-pdf"])]
    where = "runs/perf_screenshots_tiny/" if tiny else "perf_screenshots/ (the committed set)"
    return [
        Step("notebooks", nb_commands, f"{EXECUTED}/ ({len(notebooks)} notebooks, .ipynb + .html)"),
        Step(
            "pictures",
            [pictures],
            where,
            "tiny settings" if tiny else "full sizes",
        ),
        Step(
            "slides",
            [slides],
            "artifacts/slides/deck.html" + (" and deck.pdf" if chromium else ""),
            "" if chromium else "no Chromium: HTML only, not checked (make setup-browser)",
        ),
    ]


def run(step: Step) -> Step:
    print(f"== {step.name}", flush=True)
    start = time.monotonic()
    step.status = "ok"
    for command in step.commands:
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command, cwd=REPO_ROOT).returncode != 0:
            step.status = f"failed (exit status of `{' '.join(command[1:4])} …`)"
            break
    step.seconds = time.monotonic() - start
    return step


def summary(steps: list[Step], device: str, seconds: float) -> str:
    lines = [f"make lecture: {device}, {seconds / 60:.1f} min in all", ""]
    width = max(len(s.name) for s in steps)
    for s in steps:
        took = "      —" if s.status in ("not run", "skipped") else f"{s.seconds:6.1f} s"
        note = f" ({s.note})" if s.note else ""
        lines.append(f"  {s.name:<{width}}  {s.status:<8} {took}  → {s.outputs}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lecture_code.lecture", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--small", action="store_true", help="CI settings: the tiny pictures")
    parser.add_argument("--skip", nargs="+", choices=STEPS, default=[], help="steps to leave out")
    args = parser.parse_args(argv)
    start = time.monotonic()
    from lecture_code.environment import describe
    from lecture_code.slides import chromium_or_reason

    env = describe()
    device = f"{env['device']} ({env['mode']}, {env['sizes']} sizes)"
    steps = plan(args.small, _on_gpu(), chromium_or_reason()[0] is not None)
    for step in steps:
        if step.name in args.skip:
            step.status = "skipped"
            step.outputs, step.note = "—", ""
            continue
        run(step)
    print("\n" + summary(steps, device, time.monotonic() - start))
    return 1 if any(s.status.startswith("failed") for s in steps) else 0
