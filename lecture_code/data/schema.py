"""The Criteo click-log schema: one label, 13 integer features, 26 categorical features.

Raw format (Kaggle Display Advertising Challenge ``train.txt`` and the Criteo 1TB ``day_0`` ..
``day_23`` files): one row per line, tab-separated, no header, 40 fields::

    label \t I1 .. I13 \t C1 .. C26 \n

- ``label``: ``0`` or ``1`` (clicked or not). Kaggle's positive rate is 0.256.
- ``I1`` .. ``I13``: integer counts, mostly small and long-tailed; may be negative (``-1``, ``-2`` in I2).
- ``C1`` .. ``C26``: categorical values hashed to 32 bits and written as 8 lowercase hex characters
  (``"68fd1e64"``). Ids reach 0xffffffff = 4294967295, so they need int64 (int32 overflows).
- Any field may be empty: the value is missing.

Processed form: dense values transformed as in DLRM, ``log(1 + max(x, 0))`` as float32 (missing -> 0);
categorical ids kept as raw int64 with ``MISSING_ID`` for an empty field; a vocabulary per feature maps
raw ids to embedding rows (row 0 = missing, unseen or rare).
"""

from __future__ import annotations

LABEL = "label"
NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_COLUMNS: tuple[str, ...] = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))
SPARSE_COLUMNS: tuple[str, ...] = tuple(f"C{i}" for i in range(1, NUM_SPARSE + 1))
RAW_COLUMNS: tuple[str, ...] = (LABEL, *DENSE_COLUMNS, *SPARSE_COLUMNS)
NUM_FIELDS = len(RAW_COLUMNS)  # 40 tab-separated fields per line

MISSING_ID = -1
"""The raw id stored for an empty categorical field (real ids are in [0, 2**32))."""

HEX_WIDTH = 8  # characters per categorical value: 32 bits as lowercase hex

KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
"""Distinct values per categorical feature C1..C26 in the Kaggle set, as published in
facebookresearch/dlrm (the ``ln_emb`` sizes of its Kaggle runs)."""

TERABYTE_CARDINALITIES: tuple[int, ...] = (
    45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10,
    2209, 11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35,
)  # fmt: skip
"""Distinct values per categorical feature C1..C26 in the Criteo 1TB logs (177,944,275 in all): the default
``--num_embeddings_per_feature`` of TorchRec's DLRM example (uncapped). Used for sizes only (sharding plans);
the synthetic data mirrors Kaggle's."""

CRITEO_CARDINALITIES = {"kaggle": KAGGLE_CARDINALITIES, "terabyte": TERABYTE_CARDINALITIES}


def criteo_table_rows(name: str) -> tuple[int, ...]:
    """Rows per table of Criteo ``"kaggle"`` or ``"terabyte"``: each cardinality plus row 0 (missing ids)."""
    if name not in CRITEO_CARDINALITIES:
        raise ValueError(f"Criteo tables are one of {tuple(CRITEO_CARDINALITIES)}, got {name!r}")
    return tuple(c + 1 for c in CRITEO_CARDINALITIES[name])


KAGGLE_POSITIVE_RATE = 0.256

assert len(KAGGLE_CARDINALITIES) == len(TERABYTE_CARDINALITIES) == NUM_SPARSE
