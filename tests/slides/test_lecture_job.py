"""``make lecture``'s runner: what it plans per machine, and its summary after real steps.

CI does not run the whole main job here: the notebooks already run under nbval and the tiny pictures under
tests/perf (together minutes on 2 cores). This runs the slides step for real through the runner, plus a
failing step, and checks the summary.
"""

from __future__ import annotations

import sys

from lecture_code.environment import describe
from lecture_code.lecture import job
from lecture_code.lecture.job import Step, plan, summary


def test_plan_takes_full_sizes_on_a_gpu_and_tiny_pictures_on_a_cpu():
    cpu = {s.name: s for s in plan(small=False, gpu=False, chromium=True)}
    assert (
        "--tiny" in cpu["pictures"].commands[0] and cpu["pictures"].outputs == "runs/perf_screenshots_tiny/"
    )
    assert cpu["slides"].commands == [[sys.executable, "-m", "lecture_code.slides", "--check"]]
    notebooks = len(cpu["notebooks"].commands) // 2
    assert notebooks >= 5 and all("--execute" in c for c in cpu["notebooks"].commands[::2])
    gpu = {s.name: s for s in plan(small=False, gpu=True, chromium=False)}
    assert "--tiny" not in gpu["pictures"].commands[0] and gpu["pictures"].outputs.startswith(
        "perf_screenshots/"
    )
    assert gpu["slides"].commands[0][-1] == "--no-pdf" and "no Chromium" in gpu["slides"].note
    assert "--tiny" in plan(small=True, gpu=True, chromium=True)[1].commands[0]


def test_the_runner_builds_the_slides_and_reports_a_failure(monkeypatch, capsys):
    real = plan

    def with_a_failing_step(small, gpu, chromium, python=sys.executable):
        steps = real(small, gpu, chromium, python)
        broken = Step("pictures", [[python, "-c", "raise SystemExit(3)"]], "nowhere")
        return [s if s.name != "pictures" else broken for s in steps]

    monkeypatch.setattr(job, "plan", with_a_failing_step)
    status = job.main(["--small", "--skip", "notebooks"])
    out = capsys.readouterr().out
    report = out[out.index("make lecture: ") :]
    assert status == 1
    device = describe()["device"]  # "CPU" here, the GPU's name on a GPU machine
    assert (
        report.splitlines()[0].startswith(f"make lecture: {device}")
        and " min in all" in report.splitlines()[0]
    )
    lines = {ln.split()[0]: ln for ln in report.splitlines()[2:]}
    assert "skipped" in lines["notebooks"]
    assert "failed" in lines["pictures"] and "→ nowhere" in lines["pictures"]
    assert lines["slides"].split()[1] == "ok" and "artifacts/slides/deck.html" in lines["slides"]


def test_summary_names_every_step_with_its_time():
    steps = [Step("a", [], "out/a", seconds=1.25, status="ok"), Step("bb", [], "—", status="skipped")]
    text = summary(steps, "GPU X", 90.0)
    assert text.splitlines()[0] == "make lecture: GPU X, 1.5 min in all"
    assert "  a   ok          1.2 s  → out/a" in text and "bb  skipped        —  → —" in text
