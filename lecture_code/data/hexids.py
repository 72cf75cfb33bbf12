"""Categorical ids <-> 8-character hex strings, in bulk, without a Python loop per value.

Criteo writes each 32-bit categorical id as 8 hex characters. On pyarrow's fast path a column of N values
arrives as ``fixed_size_binary(8)``: one buffer of 8 * N bytes, nulls zero-filled. Writing "00000000"
into the null slots makes it one run of hex text, so a single ``binascii.a2b_hex`` call decodes the whole
column to 4 * N big-endian bytes (about 1 ns per character) and rejects any non-hex character. On the slow
path the column is a binary array (offsets + data); when every value is empty or 8 characters long the
present values are again one contiguous run. Only a column that fails these checks takes the slower
path, which finds the bad values with a 256-entry lookup table.

Ids are returned as int64 in [0, 2**32): int32 would turn ``ffffffff`` into -1.
"""

from __future__ import annotations

import binascii

import numpy as np
import pyarrow as pa

from .schema import HEX_WIDTH, MISSING_ID

_NIBBLE = np.full(256, 255, dtype=np.uint8)  # byte -> hex digit value, 255 = not a hex digit
for _i, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _NIBBLE[_c] = 10 + _i
_SHIFTS = np.arange(4 * (HEX_WIDTH - 1), -1, -4, dtype=np.int64)  # 28, 24, ..., 0
_ZEROS_WORD = np.frombuffer(b"0" * HEX_WIDTH, dtype=np.uint64)[0]  # "00000000" stands in for a null slot


def encode_hex_ids(ids: np.ndarray) -> bytes:
    """8 lowercase hex characters per id, concatenated: ``[1, 4294967295] -> b"00000001ffffffff"``."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() > 0xFFFFFFFF):
        raise ValueError("hex ids must be in [0, 2**32)")
    return ids.astype(">u4").tobytes().hex().encode("ascii")


def fixed_width_words(array: pa.Array) -> np.ndarray:
    """The 8-byte values of a ``fixed_size_binary(8)`` array as uint64 words (a view, no copy)."""
    if array.type != pa.binary(HEX_WIDTH):
        raise TypeError(f"expected fixed_size_binary({HEX_WIDTH}), got {array.type}")
    return np.frombuffer(
        array.buffers()[1], dtype=np.uint64, count=len(array), offset=array.offset * HEX_WIDTH
    )


def decode_hex_words(words: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode 8-character hex values held as uint64 words; a zero word (a null slot) is missing."""
    missing = words == 0  # a present value is 8 printable characters, never 8 zero bytes
    try:
        text = np.where(missing, _ZEROS_WORD, words) if missing.any() else words
        ids = np.frombuffer(binascii.a2b_hex(text), dtype=">u4").astype(np.int64)
        ids[missing] = MISSING_ID
        return ids, None
    except binascii.Error:  # some value has a non-hex character: find which below
        present = np.flatnonzero(~missing)
        chars = np.ascontiguousarray(words).view(np.uint8).reshape(len(words), HEX_WIDTH)[present]
        return _decode_slow(chars, present, np.zeros(len(words), dtype=bool), np.full(len(words), MISSING_ID))


def decode_hex_column(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode one Arrow array of hex ids: ``fixed_size_binary(8)`` (pyarrow's CSV fast path, nulls
    zero-filled) or binary/string (any lengths; empty and null entries must have zero length, as pyarrow's
    CSV reader makes them).

    Returns ``(ids, bad)``: ``ids`` int64 with ``MISSING_ID`` where the value is empty or null, and ``bad``
    a boolean mask of values that are not exactly 8 hex digits (their id is ``MISSING_ID``), or ``None``
    when every value is good. Upper-case digits are accepted: they name the same id.
    """
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.int64), None
    if pa.types.is_fixed_size_binary(array.type):
        return decode_hex_words(fixed_width_words(array))

    width = (
        np.int64 if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type) else np.int32
    )
    offsets = np.frombuffer(
        array.buffers()[1], dtype=width, count=n + 1, offset=array.offset * np.dtype(width).itemsize
    )
    lengths = np.diff(offsets)
    data_buf = array.buffers()[2]
    ids = np.full(n, MISSING_ID, dtype=np.int64)
    if not np.any(
        (lengths | HEX_WIDTH) != HEX_WIDTH
    ):  # every length is 0 or 8: present values are contiguous
        try:
            data = memoryview(data_buf)[offsets[0] : offsets[-1]] if data_buf is not None else b""
            ids[lengths != 0] = np.frombuffer(binascii.a2b_hex(data), dtype=">u4")
            return ids, None
        except binascii.Error:
            pass
    bad = (lengths != 0) & (lengths != HEX_WIDTH)
    present = np.flatnonzero(lengths == HEX_WIDTH)
    chars = (
        np.frombuffer(data_buf, dtype=np.uint8)[offsets[present][:, None] + np.arange(HEX_WIDTH)]
        if present.size
        else None
    )
    return _decode_slow(chars, present, bad, ids)


def _decode_slow(chars, present, bad, ids) -> tuple[np.ndarray, np.ndarray]:
    """``chars``: (m, 8) bytes of the 8-character values at rows ``present``; marks non-hex ones bad."""
    if present.size:
        nibbles = _NIBBLE[chars]
        not_hex = (nibbles == 255).any(axis=1)
        bad[present[not_hex]] = True
        ids[present[~not_hex]] = (nibbles[~not_hex].astype(np.int64) << _SHIFTS).sum(axis=1)
    return ids, bad
