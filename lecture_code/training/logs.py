"""Where training reports its progress: loguru in a terminal, plain stdout lines in a notebook.

loguru writes to stderr, in colour when it thinks the stream is a terminal. Inside a Jupyter kernel both
go wrong for a learner: JupyterLab draws stderr in a red box, which reads as an error, and the colour codes
can end up in the saved output as ANSI escapes. So :func:`default_log` picks plain lines on stdout (no
colour, no timestamp) inside a kernel, and loguru's ``logger.info`` everywhere else (the command line
configures loguru itself: stderr, above the progress bar). :func:`lecture_code.training.train` takes any
``log`` callable, so a caller can also collect the messages (``log=messages.append``) or silence them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from loguru import logger

__all__ = ["default_log", "in_jupyter_kernel", "stdout_log"]


def in_jupyter_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, nbclient, nbval); False in a terminal, script or IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def stdout_log(message: str) -> None:
    """One plain line on stdout: what a notebook cell shows as ordinary output."""
    print(message, file=sys.stdout, flush=True)


def default_log() -> Callable[[str], None]:
    """:func:`stdout_log` inside a Jupyter kernel, loguru's ``logger.info`` otherwise."""
    return stdout_log if in_jupyter_kernel() else logger.info
