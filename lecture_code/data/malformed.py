"""Malformed raw rows: the reasons, the error raised under ``strict=True``, and the report kept otherwise.

A malformed row is dropped, never repaired: a guess would turn a bad value into a wrong value silently.
Each one is counted by reason, and the first ``max_examples`` are kept with their 1-based line number,
the field and the offending value, so a report on a 45M-line file stays small.

A file as a whole is refused with ``RawFileError`` (and nothing is written) when none of its rows is
valid or when malformed lines are more than ``max_fraction`` of its lines (``DEFAULT_MAX_MALFORMED``,
1%: more than that means the wrong file or layout, not a few damaged lines); ``check_malformed``
decides. layout.py and preprocess.py raise it too, for an unknown header and an empty file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

FIELD_COUNT = "wrong field count"
CARRIAGE_RETURN = "carriage return inside a line"  # a \r\n line end is fine, a lone \r is not
BAD_LABEL = "bad label"
BAD_INTEGER = "non-integer dense value"
BAD_HEX = "bad categorical hex id"
REASONS = (FIELD_COUNT, CARRIAGE_RETURN, BAD_LABEL, BAD_INTEGER, BAD_HEX)

MAX_VALUE_CHARS = 80
DEFAULT_MAX_MALFORMED = 0.01  # the largest fraction of malformed lines a file may have


def shorten(value: bytes | str | None) -> str | None:
    """The offending value as text, cut to ``MAX_VALUE_CHARS`` (a whole bad line can be long)."""
    if value is None:
        return None
    text = value.decode("utf-8", errors="backslashreplace") if isinstance(value, bytes) else value
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "..."


@dataclass(frozen=True)
class MalformedRow:
    line: int  # 1-based line number in the (decompressed) file
    reason: str  # one of REASONS
    field: str | None  # column name, or None when the line as a whole is bad
    value: str | None  # the offending value (shortened)

    def describe(self) -> str:
        where = f", field {self.field}" if self.field else ""
        return f"line {self.line}: {self.reason}{where}: {self.value!r}"


class MalformedRowError(ValueError):
    """Raised under ``strict=True`` at the first malformed row."""

    def __init__(self, row: MalformedRow):
        super().__init__(f"malformed row at {row.describe()}")
        self.row = row


class RawFileError(ValueError):
    """The file as a whole cannot be preprocessed: empty, an unknown layout, no valid row, or more
    malformed rows than allowed. The message is one line saying what was found and what is expected."""


@dataclass
class MalformedReport:
    """Counts per reason plus the first ``max_examples`` malformed rows."""

    max_examples: int = 100
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[MalformedRow] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, row: MalformedRow) -> None:
        self.counts[row.reason] = self.counts.get(row.reason, 0) + 1
        if len(self.examples) < self.max_examples:
            self.examples.append(row)

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "counts": dict(self.counts),
            "max_examples": self.max_examples,
            "examples": [asdict(row) for row in self.examples],
        }

    @classmethod
    def from_dict(cls, data: dict) -> MalformedReport:
        return cls(
            max_examples=data.get("max_examples", 100),
            counts=dict(data.get("counts", {})),
            examples=[MalformedRow(**row) for row in data.get("examples", [])],
        )


def check_malformed(report: MalformedReport, rows: int, lines: int, max_fraction: float, source: str) -> None:
    """Raise ``RawFileError`` when ``lines`` lines gave no valid row, or when more than ``max_fraction``
    of them were malformed (``rows`` valid rows were kept)."""
    first = f"; first: {report.examples[0].describe()}" if report.examples else ""
    if lines and not rows:
        raise RawFileError(
            f"{source}: none of the {lines:,} lines read is a valid row {report.counts}{first}"
        )
    if report.total > max_fraction * lines:
        raise RawFileError(
            f"{source}: {report.total:,} of {lines:,} lines are malformed ({report.total / lines:.2%}, "
            f"more than the {max_fraction:.2%} allowed) {report.counts}{first}; "
            "raise the limit (--max-malformed) to keep the valid rows"
        )
