"""Criteo-faithful synthetic click logs: the repository's embedded default data.

Writes the raw Criteo format (schema.py: 40 tab-separated fields, hex ids, empty = missing), so the real
reader and preprocessing run end to end on it. What is modelled on the Kaggle set:

- Categorical ids: rank ``r`` in ``[0, cardinality)`` drawn from a power law (a continuous Zipf, density
  ``~ x**-s`` on ``[1, N + 1)``, floored) over the Kaggle cardinality of each feature, so a few ids are
  frequent and most are rare. The rank goes through a fixed 32-bit bijection per feature
  (``scramble_ids``, invertible by ``unscramble_ids``) and is written as 8 lowercase hex characters,
  like Criteo's hashed values.
- Missing values at rates close to Kaggle's (e.g. I12 77 %, C22 76 %, C19/C20/C25/C26 44 %); features
  with the same rate share one draw, so they are missing together as in the real data.
- Integer features: long-tailed counts ``floor(lognormal) - 1`` (many zeros, a few huge values);
  I2 is sometimes -1, -2 or -3.
- Label: Bernoulli of ``sigmoid(b + sum_j w_j log1p(I_j) + sum_f effect_f(id_f))`` for a few dense and a
  few categorical features, so a model has something to learn; ``b`` is calibrated once so the positive
  rate is Kaggle's 0.256.

Deterministic: rows come in blocks of ``BLOCK_ROWS``, block ``k`` drawn from ``default_rng([seed, k])``,
so the same seed gives identical bytes and a shorter file is a prefix of a longer one. Fast: everything is
vectorized numpy; hex strings come from one ``bytes.hex()`` call per column and block, and pyarrow's CSV
writer formats the rows (1M rows in a few seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from .hexids import encode_hex_ids
from .schema import (
    DENSE_COLUMNS,
    HEX_WIDTH,
    KAGGLE_CARDINALITIES,
    KAGGLE_POSITIVE_RATE,
    LABEL,
    NUM_DENSE,
    SPARSE_COLUMNS,
)

BLOCK_ROWS = 1 << 16
ZIPF_EXPONENT = 1.05
GENERATOR_VERSION = 1  # bump when the output for a given seed changes

# fmt: off
DENSE_MISSING_RATE = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22)
SPARSE_MISSING_RATE = (0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0,
                       0.0, 0.0, 0.03, 0.0, 0.0, 0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44)
DENSE_LOG_MEAN = (0.5, 2.0, 2.0, 1.5, 7.5, 3.5, 1.5, 2.2, 4.0, 0.3, 1.0, 0.2, 1.7)  # of the lognormal
DENSE_LOG_STD = (1.2, 2.0, 1.5, 1.0, 2.0, 1.8, 1.5, 1.2, 1.5, 0.5, 1.0, 1.5, 1.2)
I2_NEGATIVE = ((-1, 0.08), (-2, 0.01), (-3, 0.005))  # (value, probability)
# The label's signal: weights on log1p(max(I_j, 0)) and amplitudes of per-id effects in [-1, 1).
LABEL_DENSE_WEIGHTS = {"I1": 0.5, "I3": -0.2, "I7": 0.3, "I11": 0.4, "I13": -0.2}
LABEL_SPARSE_AMPLITUDES = {"C2": 1.0, "C6": 0.8, "C9": 0.5, "C14": 0.8, "C17": 0.6, "C20": 0.7}
# fmt: on

_MASK = 0xFFFFFFFF
_M1, _M2 = 0x85EBCA6B, 0xC2B2AE35  # odd multipliers (MurmurHash3's finalizer): invertible mod 2**32
_M1_INV, _M2_INV = pow(_M1, -1, 1 << 32), pow(_M2, -1, 1 << 32)
_EFFECT_KEY = 1000  # scramble key offset that turns an id into its pseudo-random label effect


def _key(feature: int) -> int:
    return ((feature + 1) * 0x9E3779B9) & _MASK


def scramble_ids(ranks: np.ndarray, feature: int) -> np.ndarray:
    """Fixed bijection of [0, 2**32) for feature ``feature`` (0-based): rank -> 32-bit id (uint64 array)."""
    x = (np.asarray(ranks, dtype=np.uint64) + np.uint64(_key(feature))) & np.uint64(_MASK)
    for multiplier in (_M1, _M2):
        x ^= x >> np.uint64(16)
        x = (x * np.uint64(multiplier)) & np.uint64(_MASK)
    return x ^ (x >> np.uint64(16))


def unscramble_ids(ids: np.ndarray, feature: int) -> np.ndarray:
    """Inverse of ``scramble_ids``: 32-bit id -> rank (uint64 array)."""
    x = np.asarray(ids, dtype=np.uint64)
    for inverse in (_M2_INV, _M1_INV):
        x = x ^ (x >> np.uint64(16))  # x ^= x >> 16 undoes itself on 32-bit values
        x = (x * np.uint64(inverse)) & np.uint64(_MASK)
    x ^= x >> np.uint64(16)
    return (x - np.uint64(_key(feature))) & np.uint64(_MASK)


def _zipf_ranks(rng: np.random.Generator, n: int, cardinality: int) -> np.ndarray:
    """Inverse CDF of the density ~ x**-s on [1, N + 1), floored to ranks in [0, N)."""
    one_minus_s = 1.0 - ZIPF_EXPONENT
    top = (cardinality + 1.0) ** one_minus_s - 1.0
    x = (1.0 + rng.random(n) * top) ** (1.0 / one_minus_s)
    return np.minimum(x.astype(np.int64) - 1, cardinality - 1)


def _missing_masks(rng: np.random.Generator, n: int, rates) -> list[np.ndarray]:
    """One uniform draw per distinct rate, shared by the features with that rate."""
    draws = {rate: rng.random(n) for rate in sorted(set(rates)) if rate > 0}
    return [draws[rate] < rate if rate > 0 else np.zeros(n, dtype=bool) for rate in rates]


def _draw_block(rng: np.random.Generator, n: int, intercept: float) -> dict:
    """One block of rows as arrays: dense int64 + missing, sparse ranks + missing, label int8."""
    dense_missing = _missing_masks(rng, n, DENSE_MISSING_RATE)
    dense = []
    for j in range(NUM_DENSE):
        values = np.floor(rng.lognormal(DENSE_LOG_MEAN[j], DENSE_LOG_STD[j], n)).astype(np.int64) - 1
        dense.append(np.maximum(values, 0))
    u = rng.random(n)
    low = 0.0
    for value, probability in I2_NEGATIVE:
        dense[1][(u >= low) & (u < low + probability)] = value
        low += probability
    sparse_missing = _missing_masks(rng, n, SPARSE_MISSING_RATE)
    ranks = [_zipf_ranks(rng, n, card) for card in KAGGLE_CARDINALITIES]

    logit = np.full(n, intercept)
    for name, weight in LABEL_DENSE_WEIGHTS.items():
        j = DENSE_COLUMNS.index(name)
        logit += weight * np.where(dense_missing[j], 0.0, np.log1p(np.maximum(dense[j], 0)))
    for name, amplitude in LABEL_SPARSE_AMPLITUDES.items():
        f = SPARSE_COLUMNS.index(name)
        effect = scramble_ids(ranks[f], _EFFECT_KEY + f) * (2.0 / 2**32) - 1.0
        logit += amplitude * np.where(sparse_missing[f], 0.0, effect)
    label = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int8)
    return {
        "label": label,
        "dense": dense,
        "dense_missing": dense_missing,
        "ranks": ranks,
        "sparse_missing": sparse_missing,
        "logit_without_intercept": logit - intercept,
    }


@functools.cache
def label_intercept(target_rate: float = KAGGLE_POSITIVE_RATE) -> float:
    """The intercept ``b`` giving mean sigmoid(logit) = target_rate on a fixed calibration sample."""
    logits = _draw_block(np.random.default_rng(20_260_000), BLOCK_ROWS, 0.0)["logit_without_intercept"]
    low, high = -20.0, 20.0
    for _ in range(60):  # bisection: the mean is increasing in b
        mid = 0.5 * (low + high)
        low, high = (
            (mid, high) if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < target_rate else (low, mid)
        )
    return 0.5 * (low + high)


_RAW_SCHEMA = pa.schema(
    [(LABEL, pa.int8())]
    + [(name, pa.int64()) for name in DENSE_COLUMNS]
    + [(name, pa.string()) for name in SPARSE_COLUMNS]
)


def _block_table(block: dict, feature_offsets: np.ndarray) -> pa.Table:
    n = len(block["label"])
    columns = {LABEL: pa.array(block["label"])}
    for j, name in enumerate(DENSE_COLUMNS):
        columns[name] = pa.array(block["dense"][j], mask=block["dense_missing"][j])
    for f, name in enumerate(SPARSE_COLUMNS):
        hex_bytes = encode_hex_ids(scramble_ids(block["ranks"][f], f))
        validity = pa.array(~block["sparse_missing"][f]).buffers()[1]
        columns[name] = pa.StringArray.from_buffers(
            n, pa.py_buffer(feature_offsets[: n + 1]), pa.py_buffer(hex_bytes), validity
        )
    return pa.table(columns, schema=_RAW_SCHEMA)


@contextlib.contextmanager
def _open_sink(path: Path, compress: str | None):
    if compress is None:
        with pa.OSFile(str(path), "wb") as sink:
            yield sink
    elif compress == "gzip":  # level 6 as the gzip tool; no name or time in the header: same bytes every run
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as sink,
        ):
            yield sink
    else:
        raise ValueError(f"compress must be None or 'gzip', not {compress!r}")


def generate_criteo_tsv(path, num_rows: int, seed: int = 0, compress: str | None = None) -> Path:
    """Write ``num_rows`` synthetic rows in the raw Criteo format to ``path`` and return it.

    ``compress``: ``None`` (plain, or gzip when ``path`` ends in ``.gz``) or ``"gzip"``. The file is written
    beside ``path`` under a temporary name and renamed at the end, so it is never seen half-written.
    """
    path = Path(path)
    if num_rows < 0 or seed < 0:
        raise ValueError("num_rows and seed must be non-negative")
    compress = compress or ("gzip" if path.suffix == ".gz" else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    offsets = np.arange(0, HEX_WIDTH * BLOCK_ROWS + 1, HEX_WIDTH, dtype=np.int32)
    options = pcsv.WriteOptions(
        include_header=False, delimiter="\t", quoting_style="none", batch_size=BLOCK_ROWS
    )
    intercept = label_intercept()
    try:
        with (
            _open_sink(tmp, compress) as sink,
            pcsv.CSVWriter(sink, _RAW_SCHEMA, write_options=options) as writer,
        ):
            for k, start in enumerate(range(0, num_rows, BLOCK_ROWS)):
                block = _draw_block(np.random.default_rng([seed, k]), BLOCK_ROWS, intercept)
                table = _block_table(block, offsets)
                writer.write_table(table.slice(0, min(BLOCK_ROWS, num_rows - start)))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Write synthetic Criteo-format click logs (raw TSV).")
    parser.add_argument("out", type=Path, help="output file (.tsv, or .gz for gzip)")
    parser.add_argument("--rows", type=int, default=200_000, help="number of rows (default 200000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--gzip", action="store_true", help="gzip the output whatever its suffix")
    args = parser.parse_args(argv)
    path = generate_criteo_tsv(args.out, args.rows, seed=args.seed, compress="gzip" if args.gzip else None)
    print(f"wrote {args.rows} rows to {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
