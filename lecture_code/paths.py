"""Where the repository is: the one place that finds its root, so every module agrees on it.

Notebooks run in ``notebooks/``, benchmarks and scripts anywhere; paths start from :data:`REPO_ROOT` (the
folder holding ``lecture_code``) instead of the working directory. Imports nothing but ``pathlib``, so the
data code stays model-free.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "RESULTS_DIR"]

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"  # the committed results README and RESULTS.md read
