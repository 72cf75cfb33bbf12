"""RESULTS.md and the README's "Measured so far" table, generated from the benchmark result files.

- :mod:`.sources`: the newest result file per workload and device under ``benchmarks/results/``.
- :mod:`.goals`: the lecture's goals, each with its bound and the CSV row it is checked against.
- :mod:`.section`: what the page says about one workload (tables, goal checks, README headlines).
- :mod:`.workloads`: one module per workload that turns its file into a section.
- :mod:`.screenshots`: README rows from the sidecars of ``perf_screenshots/``.
- :mod:`.page`: render both files; ``python -m lecture_code.results [--check]`` writes or checks them.
"""

from lecture_code.results.page import render, sections, stale

__all__ = ["render", "sections", "stale"]
