"""An output folder that appears whole or not at all, and the staging folders that killed runs leave.

preprocess writes into a staging folder beside the output, ``.NAME.tmp-PID-RANDOM``, and renames it to
``NAME`` when complete; an existing ``NAME`` is first renamed to ``.NAME.old-PID`` and removed after the
new one is in place. An exception or Ctrl-C removes the staging folder; a killed run (SIGKILL, a lost
machine) cannot, so the next run for the same ``NAME`` cleans up with ``remove_stale_staging``:

- Stale means the process id in the folder's name is not running on this machine. A stale folder is
  removed with one warning line; a folder whose process is alive belongs to a concurrent run and is left
  alone (one line says so). The test is the pid, not the folder's age: a run over a 1TB day file may
  take hours and is not stale, and a killed run's folder is cleaned at the next run, not days later.
  Limits: pids are per machine (two machines sharing an output folder over NFS would see each other's
  live folders as stale), and a dead run's pid reused by another process keeps its folder until that
  process ends.
- A stale ``.NAME.old-PID`` while ``NAME`` is missing is the previous output of a run killed between its
  two renames: it is renamed back to ``NAME`` instead of removed.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from loguru import logger

_STAGING_SUFFIX = re.compile(r"tmp-(?P<tmp_pid>[0-9]+)-[0-9a-f]+|old-(?P<old_pid>[0-9]+)")


def staging_dir(out_dir: Path) -> Path:
    """A fresh staging folder name beside ``out_dir``, owned by this process."""
    return out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (this process counts; when unsure, True)."""
    if pid == os.getpid() or os.name == "nt":  # on Windows, os.kill(pid, 0) would send CTRL_C_EVENT
        return True
    if pid <= 0:  # not a process id (0 and negatives name process groups for os.kill)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove (or, for a previous output, restore) the staging folders of dead runs writing ``out_dir``;
    return the stale folders found. Each is reported in one warning line, as is each live one kept."""
    prefix = f".{out_dir.name}."
    if not out_dir.parent.is_dir():
        return []
    stale = []
    for path in sorted(out_dir.parent.iterdir()):
        match = _STAGING_SUFFIX.fullmatch(path.name[len(prefix) :]) if path.name.startswith(prefix) else None
        if match is None or not path.is_dir():
            continue
        pid = int(match["tmp_pid"] or match["old_pid"])
        if process_alive(pid):
            logger.warning(f"leaving {path.name}: process {pid} is still running (a concurrent run?)")
            continue
        stale.append(path)
        if match["old_pid"] and not out_dir.exists():
            os.rename(path, out_dir)
            logger.warning(
                f"restored {out_dir.name} from {path.name}, left by a run killed while replacing it"
            )
        else:
            shutil.rmtree(path)
            logger.warning(f"removed {path.name}, left by process {pid}, which was killed before it finished")
    return stale


def replace_dir(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target``, replacing a previous ``target`` whole."""
    if not target.exists():
        os.rename(new, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.rename(target, old)  # between these two renames only `old` and `new` exist, both complete
    os.rename(new, target)
    shutil.rmtree(old)
