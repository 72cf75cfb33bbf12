"""Streaming reader for raw Criteo files (plain or compressed), built on pyarrow's CSV reader.

Format (see schema.py): 40 tab-separated fields per line, no header: label, I1..I13, C1..C26 (8 hex
characters). Empty field = missing. ``.gz`` (also ``.bz2``, ``.zst``, ``.lz4``) is decompressed on the fly.
The competition's comma-separated layout with a header (``Id,Label,I1,...,C26``) is read too: the reader
decides from the first line (layout.py) and refuses, at once, a header it does not know.

``CriteoReader`` yields ``CriteoChunk`` objects of typed numpy arrays, one chunk of lines at a time, so
memory stays flat however long the file is:

1. csv_chunks.py cuts the byte stream into chunks of whole lines and parses each into an Arrow table:
   typed by pyarrow on the fast path, raw bytes on the slow path (after cutting out lines with a wrong
   field count or a stray carriage return: a ``\\r`` that does not end a line). Lines may end in ``\\r\\n``.
2. Here every value is checked and converted, vectorized: labels must be 0 or 1; integers must match
   ``-?[0-9]+`` (or a whole float, ``260.0``, in a layout with a header) and fit int64; categorical
   values must be empty or 8 hex digits, decoded to int64 ids in [0, 2**32) (hexids.py). A row with any
   bad value is dropped and reported with its 1-based line number, field and value (malformed.py);
   ``strict=True`` raises ``MalformedRowError`` at the first one instead.

Steps 1 and 2 run for several chunks at once in worker threads (pyarrow and numpy release the GIL, so
two cores are both busy); chunks come out, and malformed rows are numbered and reported, in file order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .csv_chunks import DEFAULT_CHUNK_BYTES, RawChunk, iter_raw_chunks, parse_chunk, read_head
from .hexids import decode_hex_column, decode_hex_words, fixed_width_words
from .layout import RawLayout, detect_layout
from .malformed import (
    BAD_HEX,
    BAD_INTEGER,
    BAD_LABEL,
    MalformedReport,
    MalformedRow,
    MalformedRowError,
    shorten,
)
from .schema import DENSE_COLUMNS, HEX_WIDTH, LABEL, NUM_DENSE, NUM_SPARSE, SPARSE_COLUMNS

_INTEGER_REGEX = r"^-?[0-9]+$"
_WHOLE_FLOAT_REGEX = r"^-?[0-9]+(\.0+)?$"  # 260 or 260.0 (layouts with a header); 2.5 is malformed
_ZERO_FRACTION = r"\.0+$"
_INT64_SAFE_CHARS = 18  # any 18-character integer fits in int64; longer ones are checked exactly


@dataclass(frozen=True)
class CriteoChunk:
    """Good rows of one chunk. 2-D arrays are column-major, so each feature's column is contiguous."""

    label: np.ndarray  # int8 [n], 0 or 1
    dense: np.ndarray  # int64 [n, 13], 0 where missing
    dense_missing: np.ndarray  # bool [n, 13]
    sparse: np.ndarray  # int64 [n, 26], raw ids in [0, 2**32), MISSING_ID where empty
    first_line: int  # 1-based line number of the chunk's first line
    num_lines: int  # lines in the chunk: len(self) + malformed lines dropped

    def __len__(self) -> int:
        return len(self.label)


@dataclass
class _Converted:
    """A worker's result for one chunk: good rows, plus its malformed rows (lines 0-based in the chunk)."""

    chunk: CriteoChunk  # first_line still 0: set in file order by the reader
    position: int
    counts: dict[str, int]
    examples: list[MalformedRow]


def _by_chunk(column: pa.ChunkedArray) -> Iterator[tuple[int, pa.Array]]:
    """``(first row, array)`` for each non-empty Arrow chunk of a column (no concatenation copy)."""
    start = 0
    for array in column.chunks:
        if len(array):
            yield start, array
        start += len(array)


def _typed_integers(column: pa.ChunkedArray, out: np.ndarray, missing: np.ndarray, fill: int) -> None:
    """An integer column converted by pyarrow -> ``out`` (``fill`` where null) and ``missing``."""
    for start, array in _by_chunk(column):
        n, dtype = len(array), out.dtype
        stop = start + n
        out[start:stop] = np.frombuffer(
            array.buffers()[1], dtype=dtype, count=n, offset=array.offset * dtype.itemsize
        )
        if array.null_count:
            bits = np.unpackbits(
                np.frombuffer(array.buffers()[0], dtype=np.uint8), count=array.offset + n, bitorder="little"
            )
            missing[start:stop] = bits[array.offset :] == 0
            out[start:stop][missing[start:stop]] = fill
        else:
            missing[start:stop] = False


def _parse_integers(
    column: pa.ChunkedArray, whole_floats: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw bytes -> (int64 values, missing mask, bad mask). Accepts exactly ``-?[0-9]+`` in int64 range;
    with ``whole_floats`` also ``-?[0-9]+\\.0+`` (``260.0``), read as the integer it names."""
    arr = column.combine_chunks()
    missing = arr.is_null().to_numpy(zero_copy_only=False)
    regex = _WHOLE_FLOAT_REGEX if whole_floats else _INTEGER_REGEX
    ok = pc.match_substring_regex(arr, regex).fill_null(False).to_numpy(zero_copy_only=False)
    if whole_floats:
        arr = pc.replace_substring_regex(arr, _ZERO_FRACTION, "")  # "260.0" -> "260"
    bad = ~missing & ~ok
    short = ok & (pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False) <= _INT64_SAFE_CHARS)
    values = np.zeros(len(arr), dtype=np.int64)
    if short.any():
        digits = pc.cast(arr.filter(pa.array(short)), pa.string())
        values[short] = pc.cast(digits, pa.int64()).to_numpy()
    for i in np.flatnonzero(ok & ~short).tolist():  # 19+ characters: rare, check the range exactly
        number = int(arr[i].as_py())
        if -(2**63) <= number < 2**63:
            values[i] = number
        else:
            bad[i] = True
    return values, missing, bad


def _hex_ids(column: pa.ChunkedArray, out: np.ndarray) -> np.ndarray | None:
    """Decode a column of hex ids into ``out``; return the mask of bad values, or None."""
    if column.type == pa.binary(HEX_WIDTH):  # fast path: one decode call for all of pyarrow's blocks
        words = [fixed_width_words(array) for array in column.chunks]
        out[:], bad = decode_hex_words(words[0] if len(words) == 1 else np.concatenate(words))
        return bad
    bad = None
    for start, array in _by_chunk(column):
        ids, chunk_bad = decode_hex_column(array)
        out[start : start + len(array)] = ids
        if chunk_bad is not None:
            bad = np.zeros(len(out), dtype=bool) if bad is None else bad
            bad[start : start + len(array)] = chunk_bad
    return bad


def _show(value) -> str:
    return "" if value is None else shorten(value) if isinstance(value, bytes) else str(value)


def _convert(raw: RawChunk, max_examples: int, layout: RawLayout) -> _Converted:
    """Parse one raw chunk and check and convert every value (runs in a worker thread)."""
    try:
        parsed = parse_chunk(raw, max_examples, layout)
    finally:
        raw.release()
    table, n = parsed.table, parsed.table.num_rows
    checks: list[tuple[str, str, np.ndarray | None]] = []  # (field, reason, bad mask) in column order
    if parsed.typed:
        label = np.empty(n, dtype=np.int8)
        _typed_integers(table.column(LABEL), label, np.empty(n, dtype=bool), -1)
        checks.append((LABEL, BAD_LABEL, label.view(np.uint8) > 1))  # not 0 or 1 (or missing: -1)
    else:
        values, missing, bad = _parse_integers(table.column(LABEL), layout.whole_floats)
        checks.append((LABEL, BAD_LABEL, bad | missing | ((values != 0) & (values != 1))))
        label = values.astype(np.int8)
    dense = np.empty((n, NUM_DENSE), dtype=np.int64, order="F")
    dense_missing = np.empty((n, NUM_DENSE), dtype=bool, order="F")
    for j, name in enumerate(DENSE_COLUMNS):
        if parsed.typed:
            _typed_integers(table.column(name), dense[:, j], dense_missing[:, j], 0)
        else:
            dense[:, j], dense_missing[:, j], bad = _parse_integers(table.column(name), layout.whole_floats)
            checks.append((name, BAD_INTEGER, bad))
    sparse = np.empty((n, NUM_SPARSE), dtype=np.int64, order="F")
    for j, name in enumerate(SPARSE_COLUMNS):
        checks.append((name, BAD_HEX, _hex_ids(table.column(name), sparse[:, j])))

    failed = [c for c in checks if c[2] is not None and c[2].any()]
    counts, examples = dict(parsed.bad_line_counts), list(parsed.bad_line_examples)
    if failed:  # report each bad row under its first bad field, then drop it
        first_failed = np.full(n, -1, dtype=np.int64)
        for k in reversed(range(len(failed))):
            first_failed[failed[k][2]] = k
        rows = np.flatnonzero(first_failed >= 0)
        lines = parsed.row_lines[rows] if parsed.row_lines is not None else rows
        for k, count in enumerate(np.bincount(first_failed[rows], minlength=len(failed)).tolist()):
            counts[failed[k][1]] = counts.get(failed[k][1], 0) + count
        for row, line in zip(rows[:max_examples].tolist(), lines[:max_examples].tolist(), strict=True):
            name, reason, _ = failed[first_failed[row]]
            examples.append(MalformedRow(line, reason, name, _show(table.column(name)[row].as_py())))
        examples.sort(key=lambda r: r.line)
        keep = first_failed < 0
        label, dense, dense_missing, sparse = (
            label[keep],
            np.asfortranarray(dense[keep]),
            np.asfortranarray(dense_missing[keep]),
            np.asfortranarray(sparse[keep]),
        )
    chunk = CriteoChunk(label, dense, dense_missing, sparse, 0, parsed.num_lines)
    return _Converted(chunk, parsed.position, counts, examples[:max_examples])


class CriteoReader:
    """Iterate a raw Criteo file as typed ``CriteoChunk`` objects, recording malformed rows.

    ``reader.report`` holds the malformed-row counts and examples; ``bytes_read`` / ``file_size`` track
    progress in bytes of the file on disk (compressed bytes for a .gz file); ``rows`` and ``lines`` count
    good rows yielded and lines consumed so far. With ``strict=True`` the first malformed row raises
    ``MalformedRowError`` naming its line number, field and value.

    ``layout`` (layout.py) is detected from the file's first line unless given; an unknown header raises
    ``RawFileError`` here, before any row is read. Line numbers count the header line, so they match the
    file; ``lines`` does not (it counts data lines: good rows + malformed rows).

    ``threads`` worker threads parse and convert chunks ahead, in parallel (pyarrow and most numpy
    operations release the GIL); the chunks are still yielded, and malformed rows recorded, in file
    order. ``threads=0`` does everything in the calling thread.
    """

    def __init__(
        self,
        path,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        strict: bool = False,
        max_examples: int = 100,
        threads: int = 2,
        layout: RawLayout | None = None,
    ):
        self.path = Path(path)
        self.layout = layout or detect_layout(read_head(self.path), self.path.name)
        self.chunk_bytes = int(chunk_bytes)
        self.strict = strict
        self.threads = threads
        self.report = MalformedReport(max_examples=max_examples)
        self.file_size = self.path.stat().st_size
        self.bytes_read = 0
        self.rows = 0
        self.lines = 0

    def __iter__(self) -> Iterator[CriteoChunk]:
        raw_chunks = iter_raw_chunks(self.path, self.chunk_bytes, self.layout.header_bytes)
        examples = max(1, self.report.max_examples)  # strict mode needs the first example
        layout = self.layout
        try:
            if self.threads <= 0:
                for raw in raw_chunks:
                    yield self._record(_convert(raw, examples, layout))
                return
            with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="criteo-parse") as pool:
                pending = deque(
                    pool.submit(_convert, raw, examples, layout)
                    for raw in islice(raw_chunks, self.threads + 1)
                )
                while pending:
                    converted = pending.popleft().result()
                    raw = next(raw_chunks, None)
                    if raw is not None:  # keep threads + 1 chunks in flight
                        pending.append(pool.submit(_convert, raw, examples, layout))
                    yield self._record(converted)
        finally:
            raw_chunks.close()

    def _record(self, converted: _Converted) -> CriteoChunk:
        """In file order: number the lines, report malformed rows (or raise under strict)."""
        first_line = self.lines + 1 + self.layout.has_header
        if converted.examples and self.strict:
            row = converted.examples[0]
            raise MalformedRowError(replace(row, line=first_line + row.line))
        for reason, count in converted.counts.items():
            self.report.counts[reason] = self.report.counts.get(reason, 0) + count
        room = max(0, self.report.max_examples - len(self.report.examples))
        self.report.examples.extend(replace(r, line=first_line + r.line) for r in converted.examples[:room])
        chunk = replace(converted.chunk, first_line=first_line)
        self.rows += len(chunk)
        self.lines += chunk.num_lines
        self.bytes_read = converted.position
        return chunk


def iter_criteo_chunks(path, **options) -> Iterator[CriteoChunk]:
    """Shorthand for ``iter(CriteoReader(path, **options))`` when the report is not needed."""
    return iter(CriteoReader(path, **options))
