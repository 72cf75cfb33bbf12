"""The embedded default data: synthetic Criteo logs, generated and preprocessed on first use.

    from lecture_code.data import ensure_default_data, load_metadata, load_tensors
    folder = ensure_default_data()          # data/generated/criteo_synthetic_200000_seed0
    data, meta = load_tensors(folder), load_metadata(folder)

The first call writes a raw TSV with ``synthetic.generate_criteo_tsv``, runs the real ``preprocess`` on it
(so the default data goes through the same reader as Kaggle's ``train.txt``) and deletes the TSV; later
calls find the folder and return at once. A folder is reused only if its metadata records the same row
count, seed, frequency threshold and generator version. ``root`` is resolved against the repository root
(the folder holding ``lecture_code``), so notebooks in ``notebooks/`` and scripts anywhere share one copy.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from lecture_code.paths import REPO_ROOT

from .metadata import PARQUET_FILE, load_metadata
from .preprocess import preprocess
from .synthetic import GENERATOR_VERSION, generate_criteo_tsv

DEFAULT_ROOT = "data/generated"
DEFAULT_ROWS = 200_000


def _is_current(out_dir: Path, expected: dict, frequency_threshold: int) -> bool:
    try:
        metadata = load_metadata(out_dir, vocabularies=False)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (
        metadata.extra.get("synthetic") == expected
        and metadata.frequency_threshold == frequency_threshold
        and (out_dir / PARQUET_FILE).exists()
    )


@contextlib.contextmanager
def _exclusive(root: Path):
    """Serialize generation between processes (e.g. two notebooks starting at once), where supported."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; the atomic renames still keep each output whole
        yield
        return
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_default_data(
    root=DEFAULT_ROOT,
    num_rows: int = DEFAULT_ROWS,
    seed: int = 0,
    frequency_threshold: int = 1,
    show_progress: bool = False,
) -> Path:
    """Return the processed folder of the synthetic default data, making it first if needed."""
    root = Path(root)
    root = root if root.is_absolute() else REPO_ROOT / root
    name = f"criteo_synthetic_{num_rows}_seed{seed}"
    out_dir = root / name
    expected = {"num_rows": num_rows, "seed": seed, "generator_version": GENERATOR_VERSION}
    if _is_current(out_dir, expected, frequency_threshold):
        return out_dir
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        if not _is_current(out_dir, expected, frequency_threshold):  # another process may have made it
            raw = generate_criteo_tsv(root / f"{name}.tsv", num_rows, seed=seed)
            try:
                preprocess(
                    raw,
                    out_dir,
                    frequency_threshold,
                    show_progress=show_progress,
                    extra={"synthetic": expected},
                )
            finally:
                raw.unlink(missing_ok=True)
    return out_dir
