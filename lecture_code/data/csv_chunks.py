"""Raw bytes -> Arrow tables, one chunk of whole lines at a time, with exact line numbers.

1. Cut: the file is taken ``chunk_bytes`` at a time and cut after the last newline, so a chunk holds whole
   lines; counting the lines of earlier chunks gives exact line numbers. A plain file is memory-mapped one
   window at a time (pyarrow parses straight from the page cache, no copy into Python); a compressed one
   is decompressed by pyarrow's stream and the partial last line carried over.
2. Fast path: a chunk with none of the bytes that could hide a problem (space, ``x``/``X``, a ``\\r`` that
   does not end a line) is parsed by ``pyarrow.csv`` with typed columns (label int8, I1..I13 int64,
   C1..C26 8-byte fixed-size binary): the C++ parser splits and converts, and raises on any wrong field
   count, non-integer, or categorical value that is not 8 characters long. An empty line shows up as a
   row with a null label and also sends the chunk down the slow path.
3. Slow path (the byte scan found a suspect, or pyarrow raised): numpy finds each line's field count and
   stray carriage returns; those lines are recorded and cut out; the rest is parsed with every column as
   raw bytes, for reader.py to validate value by value.

Line ends: ``\\n``, or ``\\r\\n`` (Windows), which pyarrow reads as one line end, so a file written on Windows
parses to the same values as the same file with ``\\n``; lines are still cut and counted at each ``\\n``, so
line numbers stay exact. Any other ``\\r`` is a stray one: pyarrow would read it as a line end too and cut
the row in two, so its line is reported as malformed (``CARRIAGE_RETURN``) and dropped.

The layout (layout.py) gives the delimiter, the columns in file order (an ``Id`` column is parsed and
dropped) and the header line to skip; the default, Kaggle's headerless TSV, is the path measured by
benchmarks/bench_preprocess.py.

Why not one ``pyarrow.csv.open_csv`` with an ``invalid_row_handler`` over the whole file: the handler's
``InvalidRow.number`` is None in pyarrow's streaming reader (line numbers would be lost), pyarrow treats a
lone ``\\r`` as a line end (a row would be cut in two, and the line numbers after it shifted), and its int64
conversion trims spaces and reads ``0x10`` as 16 (a malformed value would become a number silently). The
byte scan keeps those cases out of the fast path, at the cost of four ``find`` scans (memchr speed) per
chunk, and one numpy pass over a chunk that has ``\\r`` bytes (a Windows file's: each must end a line).
"""

from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from .layout import HEAD_BYTES, TSV_LAYOUT, RawLayout
from .malformed import CARRIAGE_RETURN, FIELD_COUNT, MalformedRow, shorten
from .schema import DENSE_COLUMNS, HEX_WIDTH, LABEL, RAW_COLUMNS, SPARSE_COLUMNS

DEFAULT_CHUNK_BYTES = 8 << 20  # raw bytes per chunk (about 33k Kaggle lines; 8 MiB measured best)
PARSE_BLOCK_BYTES = 1 << 20  # pyarrow's block size inside a chunk (1 MiB measured fastest: cache-sized)
SUSPECT_BYTES = (b" ", b"x", b"X")  # bytes that pyarrow would hide or forgive (see above; \r: _stray_cr)
COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}

_TYPES = {
    LABEL: pa.int8(),
    **dict.fromkeys(DENSE_COLUMNS, pa.int64()),
    **dict.fromkeys(SPARSE_COLUMNS, pa.binary(HEX_WIDTH)),  # fixed width: other lengths raise
}


@dataclass(frozen=True)
class _ArrowOptions:
    parse: pcsv.ParseOptions
    typed: pcsv.ConvertOptions  # the fast path
    raw: pcsv.ConvertOptions  # the slow path: every column as bytes


@functools.cache
def _arrow_options(layout: RawLayout) -> _ArrowOptions:
    parse = pcsv.ParseOptions(
        delimiter=layout.delimiter, quote_char=False, double_quote=False, ignore_empty_lines=False
    )
    common = {"strings_can_be_null": True, "null_values": [""], "quoted_strings_can_be_null": False}
    keep = list(RAW_COLUMNS) if layout.columns != RAW_COLUMNS else None  # drops an Id column
    typed = pcsv.ConvertOptions(column_types=_TYPES, include_columns=keep, **common)
    raw = pcsv.ConvertOptions(
        column_types=dict.fromkeys(RAW_COLUMNS, pa.binary()), include_columns=keep, **common
    )
    return _ArrowOptions(parse, typed, raw)


@dataclass
class RawChunk:
    """Whole lines ``source[start:end]`` (``source``: bytes, or a memory-mapped window of the file)."""

    source: bytes | mmap.mmap
    start: int
    end: int
    position: int  # bytes of the file on disk consumed after this chunk (for progress)

    def release(self) -> None:
        if isinstance(self.source, mmap.mmap):
            try:
                self.source.close()
            except BufferError:  # still referenced somewhere: the garbage collector will unmap it
                pass


@dataclass
class ParsedChunk:
    """One chunk as an Arrow table. Line numbers here are 0-based within the chunk."""

    table: pa.Table
    typed: bool  # fast path: label/dense already converted by pyarrow
    num_lines: int
    position: int
    row_lines: np.ndarray | None = None  # line of each table row, when lines were cut out (slow path)
    bad_line_counts: dict[str, int] = field(default_factory=dict)
    bad_line_examples: list[MalformedRow] = field(default_factory=list)


def _iter_mapped_chunks(path: Path, chunk_bytes: int, skip_bytes: int) -> Iterator[RawChunk]:
    """Plain file: map one window at a time; the consumer unmaps it (``release``) once parsed, so resident
    memory does not grow with the file."""
    granularity = mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = skip_bytes
        while start < size:
            base = start - start % granularity  # a mapping must start at a multiple of the granularity
            length = min(start + chunk_bytes, size) - base
            while True:
                window = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ, offset=base)
                end = length if base + length == size else window.rfind(b"\n", start - base, length) + 1
                if end > 0:
                    break
                window.close()  # a line longer than the window: map a longer one
                length = min(2 * length, size - base)
            if window[end - 1] != ord("\n"):  # the file's last line lacks its newline
                data = window[start - base : end] + b"\n"
                window.close()
                yield RawChunk(data, 0, len(data), size)
            else:
                yield RawChunk(window, start - base, end, base + end)
            start = base + end


def _iter_stream_chunks(path: Path, chunk_bytes: int, codec: str, skip_bytes: int) -> Iterator[RawChunk]:
    """Compressed file: decompress ``chunk_bytes`` at a time; carry the partial last line over."""
    raw = pa.OSFile(str(path), "rb")
    stream = pa.CompressedInputStream(raw, codec)
    try:
        while skip_bytes > 0 and (skipped := len(stream.read(skip_bytes))):  # the header line
            skip_bytes -= skipped
        remainder = b""
        while True:
            block = stream.read(chunk_bytes)
            data = remainder + block if remainder else block
            if not block:  # end of file: the last line may lack its newline
                if data:
                    data = data if data.endswith(b"\n") else data + b"\n"
                    yield RawChunk(data, 0, len(data), raw.tell())
                return
            end = data.rfind(b"\n") + 1
            if end == 0:  # a line longer than chunk_bytes: keep reading
                remainder = data
                continue
            remainder = data[end:]
            yield RawChunk(data, 0, end, raw.tell())  # data and end, not data[:end]: saves a copy
    finally:
        stream.close()
        raw.close()


def iter_raw_chunks(path, chunk_bytes: int = DEFAULT_CHUNK_BYTES, skip_bytes: int = 0) -> Iterator[RawChunk]:
    """Cut a raw file (plain, or compressed by its suffix) into chunks of whole lines, in order, after its
    first ``skip_bytes`` (decompressed) bytes: the header line, if any."""
    path = Path(path)
    codec = COMPRESSION.get(path.suffix.lower())
    if codec:
        return _iter_stream_chunks(path, chunk_bytes, codec, skip_bytes)
    return _iter_mapped_chunks(path, chunk_bytes, skip_bytes)


def read_head(path, limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes of a raw file, decompressed (fewer when the file is shorter)."""
    path = Path(path)
    codec = COMPRESSION.get(path.suffix.lower())
    if not codec:
        with open(path, "rb") as f:
            return f.read(limit)
    with pa.OSFile(str(path), "rb") as raw, pa.CompressedInputStream(raw, codec) as stream:
        return stream.read(limit)


def read_table(data: pa.Buffer, convert: pcsv.ConvertOptions, layout: RawLayout = TSV_LAYOUT) -> pa.Table:
    options = pcsv.ReadOptions(
        column_names=list(layout.columns), block_size=PARSE_BLOCK_BYTES, use_threads=False
    )
    reader = pcsv.open_csv(
        pa.BufferReader(data),
        read_options=options,
        parse_options=_arrow_options(layout).parse,
        convert_options=convert,
    )
    return reader.read_all()


def _stray_cr(a: np.ndarray) -> np.ndarray:
    """Offsets of the ``\\r`` bytes of ``a`` that do not end a line (a ``\\r\\n`` line end is not stray)."""
    cr = np.flatnonzero(a == ord("\r"))
    return cr[a[np.minimum(cr + 1, len(a) - 1)] != ord("\n")]  # a \r as the very last byte: stray


def _has_stray_cr(source: bytes | mmap.mmap, start: int, end: int) -> bool:
    if source.find(b"\r", start, end) < 0:
        return False  # the common case: a file with \n line ends, one memchr scan
    return _stray_cr(np.frombuffer(source, dtype=np.uint8, count=end - start, offset=start)).size > 0


def parse_chunk(chunk: RawChunk, max_examples: int = 100, layout: RawLayout = TSV_LAYOUT) -> ParsedChunk:
    """Parse one chunk: fast path when possible, else the slow path (see the module docstring)."""
    source, start, end = chunk.source, chunk.start, chunk.end
    suspect = any(source.find(s, start, end) >= 0 for s in SUSPECT_BYTES)
    suspect = suspect or _has_stray_cr(source, start, end)
    if source[start] != ord("\n") and not suspect:
        try:
            typed = _arrow_options(layout).typed
            table = read_table(pa.py_buffer(memoryview(source)[start:end]), typed, layout)
            # No stray CR and no empty line (it would parse as a row with a null label): one row per line.
            if table.column(LABEL).null_count == 0:
                return ParsedChunk(table, True, table.num_rows, chunk.position)
        except pa.ArrowInvalid:
            pass  # a wrong field count, a non-integer or a wrong-length id somewhere: the slow path finds it
    return parse_chunk_slow(source[start:end], chunk.position, max_examples, layout)


def parse_chunk_slow(
    chunk: bytes, position: int, max_examples: int, layout: RawLayout = TSV_LAYOUT
) -> ParsedChunk:
    """Cut out lines with a stray carriage return or a wrong field count, parse the rest as raw bytes."""
    num_fields = layout.num_fields
    a = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(a == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    fields = np.diff(np.searchsorted(np.flatnonzero(a == ord(layout.delimiter)), ends), prepend=0) + 1
    has_cr = np.zeros(len(ends), dtype=bool)
    has_cr[np.searchsorted(ends, _stray_cr(a))] = True
    bad = np.flatnonzero(has_cr | (fields != num_fields))
    parsed = ParsedChunk(None, False, len(ends), position)
    pieces, previous = [], 0
    for k, i in enumerate(bad.tolist()):
        pieces.append(chunk[previous : starts[i]])
        previous = ends[i] + 1
        reason = CARRIAGE_RETURN if has_cr[i] else FIELD_COUNT
        parsed.bad_line_counts[reason] = parsed.bad_line_counts.get(reason, 0) + 1
        if k < max_examples:
            text = chunk[starts[i] : ends[i]].removesuffix(b"\r")  # without a \r\n line end's \r
            if has_cr[i] and fields[i] == num_fields:  # the first field with a stray \r, and its value
                values = text.split(layout.delimiter.encode())
                j = next(j for j, value in enumerate(values) if b"\r" in value)
                row = MalformedRow(i, reason, layout.columns[j], shorten(values[j]))
            else:
                row = MalformedRow(i, reason, None, f"{fields[i]} of {num_fields} fields: {shorten(text)}")
            parsed.bad_line_examples.append(row)
    pieces.append(chunk[previous:])
    kept = np.ones(len(ends), dtype=bool)
    kept[bad] = False
    parsed.row_lines = np.flatnonzero(kept)
    if parsed.row_lines.size:
        data = pa.py_buffer(b"".join(pieces) if bad.size else chunk)
        parsed.table = read_table(data, _arrow_options(layout).raw, layout)
    else:
        parsed.table = pa.table({name: pa.array([], pa.binary()) for name in RAW_COLUMNS})
    if parsed.table.num_rows != parsed.row_lines.size:
        raise RuntimeError(
            f"a chunk of {len(ends)} lines parsed to {parsed.table.num_rows} rows, not {kept.sum()}"
        )
    return parsed
