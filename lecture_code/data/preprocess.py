"""Raw Criteo file -> parquet + vocabularies + metadata, in one streaming pass.

    python -m lecture_code.data.preprocess RAW OUT_DIR [--frequency-threshold N] [--max-malformed F]
                                           [--strict] [--quiet]

RAW is Kaggle's train.txt or a 1TB day_N file (tab-separated, no header), or the competition's
comma-separated train.csv with its header (layout.py decides from the first line), plain or .gz.

For each chunk from the reader (reader.py): transform the integer features as DLRM does,
``log(1 + max(x, 0))`` as float32 with missing -> 0, update their running statistics, count the raw ids
of every categorical feature (vocabulary.py) and append the chunk to ``data.parquet`` (one row group per
chunk). After the pass, keep the ids seen at least ``frequency_threshold`` times and write
``vocabulary.npz`` and ``metadata.json`` (metadata.py describes the folder).

Memory stays flat in the number of rows: one chunk at a time, plus the id counts (they grow with the
number of distinct ids). The output appears atomically: everything is written into a staging folder
beside ``OUT_DIR`` and renamed at the end (staging.py), so an interrupted run leaves no half-written
parquet, and an existing output is replaced only once the new one is complete. A killed run's staging
folder is removed by the next run.

Nothing is written, and the command exits non-zero with one line, for: a missing input, an unknown
header, an empty file, a file without a valid row, or more malformed lines than ``--max-malformed``
(a fraction, default 0.01; malformed.py); Ctrl-C exits with 130.

The reference DLRM preprocessing (``dlrm_data_pytorch.py``) runs at about 15k rows/s; this runs at
several hundred thousand rows/s on two cores (benchmarks/bench_preprocess.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from loguru import logger
from tqdm import tqdm

from .malformed import DEFAULT_MAX_MALFORMED, MalformedRowError, RawFileError, check_malformed
from .metadata import (
    METADATA_FILE,
    PARQUET_FILE,
    CriteoMetadata,
    DenseFeatureStats,
    SparseFeatureStats,
    save_metadata,
)
from .reader import DEFAULT_CHUNK_BYTES, CriteoChunk, CriteoReader
from .schema import DENSE_COLUMNS, KAGGLE_CARDINALITIES, LABEL, SPARSE_COLUMNS
from .staging import remove_stale_staging, replace_dir, staging_dir
from .vocabulary import VocabularyCounter, build_vocabulary

PARQUET_SCHEMA = pa.schema(
    [(LABEL, pa.int8())]
    + [(name, pa.float32()) for name in DENSE_COLUMNS]
    + [(name, pa.int64()) for name in SPARSE_COLUMNS]
)
# Written for speed (measured on 2 cores: 0.6 s per 1M rows, vs 1.9 s for pyarrow's snappy + dictionary
# default, at 150 instead of 69 bytes per row): no compression, dictionaries only where they pay off (the
# label and the categorical features with a small Kaggle cardinality), no column statistics.
PARQUET_OPTIONS = {
    "compression": "none",
    "use_dictionary": [LABEL]
    + [c for c, card in zip(SPARSE_COLUMNS, KAGGLE_CARDINALITIES, strict=True) if card <= 1 << 16],
    "write_statistics": False,
}


def transform_dense(values: np.ndarray) -> np.ndarray:
    """DLRM's transform of the integer features: ``log(1 + max(x, 0))`` as float32 (0 stays 0)."""
    return np.log1p(np.maximum(values, 0).astype(np.float32))


class _RunningStats:
    """count / min / max / mean / M2 of one feature, merged chunk by chunk (Chan et al.'s update)."""

    def __init__(self):
        self.count, self.missing, self.mean, self.m2 = 0, 0, 0.0, 0.0
        self.min, self.max = np.inf, -np.inf

    def add(self, values: np.ndarray, missing: np.ndarray) -> None:
        n_missing = int(np.count_nonzero(missing))
        present = values[~missing] if n_missing else values
        self.missing += n_missing
        if present.size == 0:
            return
        present = present.astype(np.float64)  # float32 deviations would lose digits in M2
        n, mean = present.size, float(present.mean())
        m2 = float(np.square(present - mean).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total
        self.min, self.max = min(self.min, float(present.min())), max(self.max, float(present.max()))

    def result(self, name: str) -> DenseFeatureStats:
        if self.count == 0:
            return DenseFeatureStats(name, 0, self.missing, 0.0, 0.0, 0.0, 0.0)
        std = float(np.sqrt(self.m2 / self.count))
        return DenseFeatureStats(name, self.count, self.missing, self.min, self.max, self.mean, std)


def _chunk_table(chunk: CriteoChunk, stats: list[_RunningStats]) -> pa.Table:
    columns = [pa.array(chunk.label)]
    for j in range(len(DENSE_COLUMNS)):
        values = transform_dense(chunk.dense[:, j])  # missing values are 0 in the chunk: 0 after too
        stats[j].add(values, chunk.dense_missing[:, j])
        columns.append(pa.array(values))
    columns += [pa.array(chunk.sparse[:, f]) for f in range(len(SPARSE_COLUMNS))]
    return pa.Table.from_arrays(columns, schema=PARQUET_SCHEMA)


def _stream(
    reader: CriteoReader,
    out_dir: Path,
    frequency_threshold: int,
    max_malformed: float,
    show_progress: bool,
    extra: dict | None,
) -> CriteoMetadata:
    raw_path = reader.path
    counters = [VocabularyCounter() for _ in SPARSE_COLUMNS]
    stats = [_RunningStats() for _ in DENSE_COLUMNS]
    positives = 0
    bar = tqdm(
        total=reader.file_size, unit="B", unit_scale=True, desc=raw_path.name, disable=not show_progress
    )
    with bar, pq.ParquetWriter(out_dir / PARQUET_FILE, PARQUET_SCHEMA, **PARQUET_OPTIONS) as writer:
        for chunk in reader:
            writer.write_table(_chunk_table(chunk, stats))
            for f, counter in enumerate(counters):
                counter.add(chunk.sparse[:, f])
            positives += int(np.count_nonzero(chunk.label))
            bar.update(reader.bytes_read - bar.n)
            if not reader.rows and max_malformed < 1:  # a first chunk without one valid row: stop now
                check_malformed(reader.report, reader.rows, reader.lines, max_malformed, raw_path.name)
    if not reader.lines:
        header = " has a header but no rows" if reader.layout.has_header else " is empty"
        raise RawFileError(f"{raw_path.name}{header}: nothing to preprocess")
    check_malformed(reader.report, reader.rows, reader.lines, max_malformed, raw_path.name)
    vocabularies, sparse = [], []
    for name, counter in zip(SPARSE_COLUMNS, counters, strict=True):
        ids, counts, missing = counter.result()
        vocabulary = build_vocabulary(ids, counts, frequency_threshold)
        vocabularies.append(vocabulary)
        sparse.append(SparseFeatureStats(name, len(ids), len(vocabulary), len(vocabulary) + 1, missing))
    metadata = CriteoMetadata(
        source=raw_path.name,
        num_rows=reader.rows,
        num_lines=reader.lines,
        positive_rate=positives / reader.rows if reader.rows else 0.0,
        frequency_threshold=frequency_threshold,
        dense=tuple(s.result(name) for name, s in zip(DENSE_COLUMNS, stats, strict=True)),
        sparse=tuple(sparse),
        malformed=reader.report,
        extra=dict(extra or {}),
        vocabularies=vocabularies,
    )
    save_metadata(out_dir, metadata)
    return metadata


def _check_target(out_dir: Path) -> None:
    """Refuse to replace anything but a previous output (a folder with metadata.json) or an empty folder."""
    if out_dir.exists() and (
        not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / METADATA_FILE).exists())
    ):
        raise FileExistsError(f"{out_dir} exists and is not a preprocessed Criteo folder: not replacing it")


def preprocess(
    raw_path,
    out_dir,
    frequency_threshold: int = 1,
    strict: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    show_progress: bool = True,
    extra: dict | None = None,
    max_malformed: float = DEFAULT_MAX_MALFORMED,
) -> CriteoMetadata:
    """Preprocess a raw Criteo file (plain or .gz, either layout of layout.py) into ``out_dir``; return
    its metadata.

    ``frequency_threshold``: ids seen fewer times go to the shared row 0. ``strict``: raise
    ``MalformedRowError`` at the first malformed row instead of dropping and reporting it.
    ``max_malformed``: the largest fraction of malformed lines accepted (0: none, 1: any); beyond it, or
    with no valid row at all, or an empty file, ``RawFileError`` is raised and nothing is written.
    ``chunk_bytes``: raw bytes per chunk. ``show_progress``: a tqdm bar over the file's bytes and log lines
    at start and end (a warning about dropped malformed rows is logged either way). ``extra``: JSON-able
    notes stored in the metadata.
    """
    raw_path, out_dir = Path(raw_path), Path(out_dir)
    if frequency_threshold < 1:
        raise ValueError(f"frequency_threshold must be at least 1, got {frequency_threshold}")
    if not 0 <= max_malformed <= 1:
        raise ValueError(f"max_malformed must be a fraction in [0, 1], got {max_malformed}")
    if raw_path.is_dir():
        raise IsADirectoryError(f"{raw_path}: a folder, not a file")
    if not raw_path.is_file():
        raise FileNotFoundError(f"{raw_path}: no such file")
    reader = CriteoReader(raw_path, chunk_bytes=chunk_bytes, strict=strict)  # refuses an unknown header
    _check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out_dir)
    tmp = staging_dir(out_dir)
    tmp.mkdir()
    start = time.perf_counter()
    if show_progress:
        logger.info(
            f"preprocessing {raw_path.name} ({reader.layout.describe()}) -> {out_dir.name} "
            f"(threshold {frequency_threshold})"
        )
    try:
        metadata = _stream(reader, tmp, frequency_threshold, max_malformed, show_progress, extra)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    seconds = time.perf_counter() - start
    if show_progress:
        logger.info(
            f"{metadata.num_rows:,} rows in {seconds:.1f} s ({metadata.num_rows / seconds:,.0f} rows/s)"
        )
    if metadata.malformed.total:  # logged even when quiet: dropped rows should not go unnoticed
        logger.warning(f"dropped {metadata.malformed.total} malformed rows: {metadata.malformed.counts}")
    return metadata


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1], got {text}")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Preprocess a raw Criteo file (train.txt / day_N TSV, or train.csv with its header; "
        "plain or .gz) to parquet."
    )
    parser.add_argument(
        "raw", type=Path, help="raw file: Kaggle train.txt or train.csv, a 1TB day_N file, or a synthetic one"
    )
    parser.add_argument("out_dir", type=Path, help="output folder (replaced atomically when complete)")
    parser.add_argument(
        "--frequency-threshold", type=_at_least_one, default=1, help="min count to keep an id (default 1)"
    )
    parser.add_argument(
        "--max-malformed",
        type=_fraction,
        default=DEFAULT_MAX_MALFORMED,
        metavar="FRACTION",
        help=f"refuse the file when more than this fraction of its lines are malformed "
        f"(default {DEFAULT_MAX_MALFORMED}; 1 keeps the valid rows of any file)",
    )
    parser.add_argument("--strict", action="store_true", help="stop at the first malformed row")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or progress log lines")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    existed = args.out_dir.exists()
    try:
        metadata = preprocess(
            args.raw,
            args.out_dir,
            args.frequency_threshold,
            args.strict,
            show_progress=not args.quiet,
            max_malformed=args.max_malformed,
        )
    except KeyboardInterrupt:
        kept = f"{args.out_dir} is unchanged" if existed else f"{args.out_dir} was not created"
        print(f"stopped (Ctrl-C): nothing written, {kept}", file=sys.stderr)
        raise SystemExit(130) from None
    except (RawFileError, MalformedRowError, OSError) as error:  # one line, no traceback
        parser.exit(1, f"error: {error}\n")
    seconds = time.perf_counter() - start
    print(f"rows:          {metadata.num_rows:,} of {metadata.num_lines:,} lines")
    counts = f" {metadata.malformed.counts}" if metadata.malformed.total else ""
    print(f"malformed:     {metadata.malformed.total:,}{counts}")
    for row in metadata.malformed.examples[:5]:
        print(f"               {row.describe()}")
    print(f"positive rate: {metadata.positive_rate:.4f}")
    print(f"embeddings:    {sum(metadata.num_embeddings_per_feature):,} rows over 26 tables")
    print(f"time:          {seconds:.1f} s ({metadata.num_rows / max(seconds, 1e-9):,.0f} rows/s)")
    print(f"output:        {args.out_dir}")


if __name__ == "__main__":
    main()
