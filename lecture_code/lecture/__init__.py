"""The main job (``make lecture``): notebooks, the pictures cheap on this machine, the slides, then a summary.

``python -m lecture_code.lecture [--small] [--skip notebooks pictures slides]``; :func:`plan` says what runs,
:func:`summary` writes the closing report.
"""

from lecture_code.lecture.job import Step, main, plan, summary

__all__ = ["Step", "main", "plan", "summary"]
