"""Helpers for the data tests: build raw Criteo lines by hand and write them as plain or gzip files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from loguru import logger

from lecture_code.data import DENSE_COLUMNS, SPARSE_COLUMNS


class RawRows:
    """Random but known raw rows: ``line(i)`` is the text, ``expected(i)`` the values it must parse to."""

    def __init__(self, seed: int, n: int):
        rng = np.random.default_rng(seed)
        self.label = rng.integers(0, 2, n)
        self.dense = rng.integers(-3, 5000, (n, len(DENSE_COLUMNS)))
        self.dense_missing = rng.random((n, len(DENSE_COLUMNS))) < 0.2
        self.sparse = rng.integers(0, 2**32, (n, len(SPARSE_COLUMNS)), dtype=np.int64)
        self.sparse_missing = rng.random((n, len(SPARSE_COLUMNS))) < 0.2
        self.sparse[self.sparse_missing] = -1
        self.dense[self.dense_missing] = 0

    def __len__(self) -> int:
        return len(self.label)

    def fields(self, i: int) -> list[str]:
        dense = ["" if m else str(v) for v, m in zip(self.dense[i], self.dense_missing[i], strict=True)]
        sparse = ["" if v < 0 else f"{v:08x}" for v in self.sparse[i]]
        return [str(self.label[i]), *dense, *sparse]

    def line(self, i: int) -> str:
        return "\t".join(self.fields(i))

    @staticmethod
    def csv_header(row_id: bool = True) -> str:
        """Kaggle's train.csv header (``Id,Label,I1,...,C26``), or a common sample's (``label,I1,...``)."""
        names = ["Id", "Label"] if row_id else ["label"]
        return ",".join([*names, *DENSE_COLUMNS, *SPARSE_COLUMNS])

    def csv_line(self, i: int, row_id: bool = True, whole_floats: bool = True) -> str:
        """Row ``i`` in the competition's comma-separated layout (``Id,Label,I1,...``, or without the Id);
        with ``whole_floats``, every other present integer is written as a whole float (``260.0``)."""
        fields = self.fields(i)
        for j in range(1, 1 + len(DENSE_COLUMNS), 2) if whole_floats else ():
            fields[j] = f"{fields[j]}.0" if fields[j] else ""
        return ",".join([str(10_000_000 + i), *fields] if row_id else fields)


@pytest.fixture
def raw_rows(seed):
    """A fresh set of random rows per test (the seed is printed by the top-level fixture)."""
    return lambda n: RawRows(seed, n)


@pytest.fixture
def write_lines(tmp_path):
    """Write text lines to ``tmp_path / name`` (gzip when the name ends in .gz) and return the path;
    ``newline="\\r\\n"`` writes Windows line ends."""

    def write(lines: list[str], name: str = "raw.tsv", final_newline: bool = True, newline: str = "\n"):
        data = (newline.join(lines) + (newline if final_newline else "")).encode()
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        return path

    return write


@pytest.fixture
def warnings_logged():
    """The messages of the loguru warnings logged during the test, in order."""
    messages = []
    handler = logger.add(lambda message: messages.append(message.record["message"]), level="WARNING")
    yield messages
    logger.remove(handler)
