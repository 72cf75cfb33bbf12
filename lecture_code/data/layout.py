"""Which raw layout a Criteo file is in, decided from its first line.

Two layouts carry the same 40 values per row (schema.py):

- **Tab-separated, no header** (the default): Kaggle's ``train.txt`` and the 1TB ``day_0`` .. ``day_23``
  files. Integers are exactly ``-?[0-9]+``.
- **Comma-separated with a header** naming the columns: the competition's ``train.csv``
  (``Id,Label,I1,...,I13,C1,...,C26``) or common samples (``label,I1,...,C26``). Columns are matched by
  name, case-insensitively and in any order; an ``Id`` column is read past and ignored. Integers may be
  written as whole floats (``260.0``, as pandas writes an integer column that has missing values); a
  value such as ``2.5`` makes its row malformed. Values are not quoted (a quoted value is malformed).
  A tab-separated file with such a header is read the same way.

A first line that starts with a letter (or a quote, after a UTF-8 byte-order mark if any) is a header.
A header that does not name exactly these columns (Kaggle's ``test.csv`` has no label) and a
comma-separated first line without a header are refused at once, with a message saying what was found
and what is expected.

Lines may end in ``\\n`` or in ``\\r\\n`` (Windows line endings, as a spreadsheet or a Windows download
writes them), in either layout, with or without a header; pyarrow reads ``\\r\\n`` as one line end, and
csv_chunks.py cuts out only a ``\\r`` that does not end a line.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from .malformed import RawFileError, shorten
from .schema import DENSE_COLUMNS, LABEL, RAW_COLUMNS, SPARSE_COLUMNS

ID_COLUMN = "Id"  # Kaggle's train.csv row number: read past, not kept
EXPECTED_HEADER = (
    f"an optional Id, then Label (or label), {DENSE_COLUMNS[0]}..{DENSE_COLUMNS[-1]}, "
    f"{SPARSE_COLUMNS[0]}..{SPARSE_COLUMNS[-1]} (Kaggle's train.csv: Id,Label,I1,...,C26)"
)
_KNOWN_NAMES = {name.lower(): name for name in RAW_COLUMNS} | {ID_COLUMN.lower(): ID_COLUMN}
_HEADER_START = re.compile(rb'["A-Za-z]')
HEAD_BYTES = 1 << 16  # bytes read to decide; a header line must fit (Kaggle's is 218 bytes)


@dataclass(frozen=True)
class RawLayout:
    """How the values of a raw file are laid out; ``columns`` names the file's fields in order."""

    delimiter: str  # "\t" or ","
    columns: tuple[str, ...] = RAW_COLUMNS  # schema.py names, plus ID_COLUMN where the file has one
    header_bytes: int = 0  # length of the header line with its newline (0: no header)
    whole_floats: bool = False  # accept integers written as whole floats ("260.0")

    @property
    def num_fields(self) -> int:
        return len(self.columns)

    @property
    def has_header(self) -> bool:
        return self.header_bytes > 0

    def describe(self) -> str:
        kind = {"\t": "tab-separated", ",": "comma-separated"}[self.delimiter]
        if not self.has_header:
            return f"{kind}, no header"
        return f"{kind} with a header{' (Id ignored)' if ID_COLUMN in self.columns else ''}"


TSV_LAYOUT = RawLayout("\t")


def detect_layout(head: bytes, source: str = "the file") -> RawLayout:
    """The layout of a file whose first (decompressed) bytes are ``head``: its first ``HEAD_BYTES``, or
    all of it when shorter. Raises ``RawFileError`` for a layout it cannot read."""
    bom = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0  # as spreadsheets write CSV
    end = head.find(b"\n")
    line = head[bom:] if end < 0 else head[bom:end]
    header_bytes = bom + len(line) + 1  # the line and its line end, if it is a header
    line = line.removesuffix(b"\r")  # a \r\n line end (Windows)
    delimiter = "\t" if b"\t" in line else "," if b"," in line else "\t"
    if not _HEADER_START.match(line):
        if delimiter == ",":
            raise RawFileError(
                f"{source}: the first line is comma-separated but is not a header "
                f"({shorten(line)!r}); expected a header line naming the columns, {EXPECTED_HEADER}, "
                "or the tab-separated layout without a header (Kaggle's train.txt)"
            )
        return TSV_LAYOUT
    if end < 0 and len(head) >= HEAD_BYTES:
        raise RawFileError(f"{source}: the header line is longer than {HEAD_BYTES:,} bytes")
    names = line.decode("utf-8", errors="backslashreplace").split(delimiter)
    columns = tuple(_KNOWN_NAMES.get(name.strip().lower(), name) for name in names)
    _check_header(columns, line, source)
    return RawLayout(delimiter, columns, header_bytes=header_bytes, whole_floats=True)


def _check_header(columns: tuple[str, ...], line: bytes, source: str) -> None:
    """Every schema column exactly once, an Id at most once, nothing else; else say what is wrong."""
    problems = []
    missing = [name for name in RAW_COLUMNS if name not in columns]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        problems.append(f"missing {shown}")
    unknown = [name for name in columns if name not in RAW_COLUMNS and name != ID_COLUMN]
    if unknown:
        problems.append("unknown " + ", ".join(repr(shorten(name)) for name in unknown[:5]))
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        problems.append("repeated " + ", ".join(repeated))
    if not problems:
        return
    hint = "; Kaggle's test.csv has no labels: preprocess train.csv" if missing == [LABEL] else ""
    raise RawFileError(
        f"{source}: unrecognised header ({'; '.join(problems)}{hint}): found {shorten(line)!r}; "
        f"expected {EXPECTED_HEADER}"
    )
