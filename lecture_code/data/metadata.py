"""What preprocessing learned about a dataset, saved beside the parquet file.

A processed folder holds three files::

    data.parquet      label int8, I1..I13 float32 (log(1 + max(x, 0)), missing -> 0),
                      C1..C26 int64 raw ids (MISSING_ID = -1 where empty)
    vocabulary.npz    per categorical feature (keys C1..C26): sorted int64 ids kept by the threshold
    metadata.json     row count, positive rate, per-feature statistics, malformed-row report

Per categorical feature: ``num_unique`` distinct ids seen, ``vocabulary_size`` ids kept (count >=
``frequency_threshold``), ``num_embeddings = vocabulary_size + 1`` (row 0 is for missing, unseen and
rare ids), ``missing`` count. Per integer feature: ``count`` rows with a value, ``missing`` rows without,
and ``min``/``max``/``mean``/``std`` of the transformed value over the rows with a value.
No absolute paths are stored: ``source`` is the raw file's name only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .malformed import MalformedReport
from .schema import SPARSE_COLUMNS

PARQUET_FILE = "data.parquet"
VOCABULARY_FILE = "vocabulary.npz"
METADATA_FILE = "metadata.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class DenseFeatureStats:
    name: str
    count: int  # rows with a value
    missing: int
    min: float  # min, max, mean, std of log(1 + max(x, 0)) over the rows with a value
    max: float
    mean: float
    std: float


@dataclass(frozen=True)
class SparseFeatureStats:
    name: str
    num_unique: int  # distinct ids seen
    vocabulary_size: int  # ids seen at least frequency_threshold times
    num_embeddings: int  # vocabulary_size + 1: row 0 is for missing, unseen and rare ids
    missing: int


@dataclass(frozen=True)
class CriteoMetadata:
    source: str  # raw file name (no directory)
    num_rows: int  # good rows written
    num_lines: int  # data lines read (good rows + malformed rows; a header line is not counted)
    positive_rate: float
    frequency_threshold: int
    dense: tuple[DenseFeatureStats, ...]
    sparse: tuple[SparseFeatureStats, ...]
    malformed: MalformedReport
    extra: dict = field(default_factory=dict)  # e.g. {"synthetic": {"seed": 0, "num_rows": ...}}
    vocabularies: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)
    format_version: int = FORMAT_VERSION

    @property
    def num_embeddings_per_feature(self) -> tuple[int, ...]:
        return tuple(s.num_embeddings for s in self.sparse)

    def to_json_dict(self) -> dict:
        data = asdict(replace(self, vocabularies=[]))
        del data["vocabularies"]
        data["malformed"] = self.malformed.to_dict()
        return data

    @classmethod
    def from_json_dict(cls, data: dict, vocabularies: list[np.ndarray] | None = None) -> CriteoMetadata:
        data = dict(data)
        data["dense"] = tuple(DenseFeatureStats(**d) for d in data["dense"])
        data["sparse"] = tuple(SparseFeatureStats(**s) for s in data["sparse"])
        data["malformed"] = MalformedReport.from_dict(data["malformed"])
        return cls(**data, vocabularies=vocabularies or [])


def save_metadata(out_dir, metadata: CriteoMetadata) -> None:
    """Write ``metadata.json`` and, when present, the vocabularies to ``vocabulary.npz``."""
    out_dir = Path(out_dir)
    if metadata.vocabularies:
        np.savez(out_dir / VOCABULARY_FILE, **dict(zip(SPARSE_COLUMNS, metadata.vocabularies, strict=True)))
    text = json.dumps(metadata.to_json_dict(), indent=2)
    (out_dir / METADATA_FILE).write_text(text + "\n", encoding="utf-8")


def load_metadata(out_dir, vocabularies: bool = True) -> CriteoMetadata:
    """Read a processed folder's metadata (and its vocabularies unless ``vocabularies=False``)."""
    out_dir = Path(out_dir)
    data = json.loads((out_dir / METADATA_FILE).read_text(encoding="utf-8"))
    if data.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{out_dir}: metadata format {data.get('format_version')}, expected {FORMAT_VERSION}"
        )
    vocab = []
    if vocabularies:
        with np.load(out_dir / VOCABULARY_FILE) as npz:
            vocab = [npz[name] for name in SPARSE_COLUMNS]
    return CriteoMetadata.from_json_dict(data, vocab)
