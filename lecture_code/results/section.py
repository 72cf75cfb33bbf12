"""What RESULTS.md says about one workload: tables, goal checks and a headline, all read from one result file.

A workload module (``lecture_code/results/workloads/``) turns a :class:`~.sources.ResultFile` into a
:class:`Section`; :mod:`.page` renders sections as Markdown. Every number in a section is read from the file;
a baseline or goal row the file lacks is written :data:`NOT_MEASURED`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lecture_code.results.goals import Goal
from lecture_code.results.sources import ResultFile

__all__ = ["NOT_MEASURED", "GoalCheck", "Headline", "Section", "Table", "num", "pct", "span"]

NOT_MEASURED = "not measured"


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class GoalCheck:
    """A goal against the latest measurement: ``value`` None means the CSV has no row for it."""

    goal: Goal
    value: float | None
    reached: str  # the measured value as the page states it, with where it comes from

    @property
    def verdict(self) -> str:
        if self.value is None:
            return NOT_MEASURED
        return "met" if self.goal.met(self.value) else "not met"


@dataclass
class Headline:
    """One row of the README's "Measured so far" table."""

    what: str
    number: str


@dataclass
class Section:
    workload: str
    title: str
    command: str  # what makes the result file
    what: str  # what is measured, in one or two sentences
    result: ResultFile | None
    tables: list[Table] = field(default_factory=list)
    goals: list[GoalCheck] = field(default_factory=list)
    headlines: list[Headline] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def num(value: float | str | None, digits: int = 3) -> str:
    """A number with ``digits`` significant figures (no exponent below 1e6); ``None``/NaN: not measured."""
    if value is None or value == "":
        return NOT_MEASURED
    value = float(value)
    if math.isnan(value):
        return NOT_MEASURED
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - magnitude, 0)
    return f"{value:,.{decimals}f}"


def pct(value: float | str | None, signed: bool = False) -> str:
    """A percentage, 3 significant figures; ``signed`` writes +/-, as overheads are."""
    text = num(value)
    if text == NOT_MEASURED:
        return text
    return ("+" if signed and float(value) >= 0 else "") + text + "%"


def span(values: list[float], fmt=num) -> str:
    """``lo–hi`` of some values (one value: itself)."""
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"
