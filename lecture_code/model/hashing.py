"""Three ways to turn raw categorical ids into embedding rows, each measured in the lecture.

Input: ``ids`` int64 ``[B]``, raw Criteo ids (32-bit values in ``[0, 2^32)``; missing = ``-1``).
Output: ``rows`` int64 ``[B]`` in ``[0, num_embeddings)``.

Convention shared by all three: **row 0 is reserved** for missing ids (any negative id), and for the
vocabulary hashes also for unseen or rare ids (those preprocessing did not keep). Vocabulary entry ``i``
(``vocabulary`` sorted ascending, ``V`` entries) owns row ``i + 1``; ``num_embeddings = V + 1``.

==========================  ===============  ===============  =====================================
hash                        time             extra memory     notes
==========================  ===============  ===============  =====================================
``IndexHash``               O(B·V)           2·B·V bytes      the original lecture's; the anti-pattern
``VocabularyHash``          O(B·log V)       O(B)             exact; searchsorted over the vocabulary
``BatchedVocabularyHash``   O(B·F·log ΣV)    O(B·F)           all ``F`` features in one searchsorted
``ModulusHash``             O(B)             none (no vocab)  collisions: unrelated ids share rows
``BatchedModulusHash``      O(B·F)           ``[F]`` sizes    all ``F`` features in one pass
==========================  ===============  ===============  =====================================

The first three are exact and give identical rows (tested). The two ``Batched`` hashes take the whole
``[B, F]`` batch where the others take one feature's column ``[B]``, give the same rows as their
per-feature twins (tested), and are what ``DLRM`` uses for ``hashing="vocabulary"`` and
``hashing="modulus"``: a handful of launches per step instead of ``F`` times a handful.

Each hash is an ``nn.Module`` holding its vocabulary as a buffer, so ``model.to(device)`` moves the
metadata with the tables: the lookup runs where the ids are, with no host round trip.
The vocabulary buffer is persistent: a checkpoint carries the id → row mapping it was trained with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

__all__ = [
    "BatchedModulusHash",
    "BatchedVocabularyHash",
    "IndexHash",
    "ModulusHash",
    "VocabularyHash",
    "binary_search_lower_bound",
    "index_hash_rows",
    "make_hash",
]

ID_BITS = 32  # raw Criteo ids are 32-bit: every id of a vocabulary lies in [0, 2^32)


def _as_vocabulary(vocabulary, num_embeddings: int) -> torch.Tensor:
    """Validate a vocabulary (numpy array, tensor or sequence) and return it as a 1-D int64 tensor."""
    vocab = torch.as_tensor(np.asarray(vocabulary) if not torch.is_tensor(vocabulary) else vocabulary)
    if vocab.dim() != 1:
        raise ValueError(f"a vocabulary is 1-D, got shape {tuple(vocab.shape)}")
    if vocab.is_floating_point() or vocab.dtype == torch.bool:
        raise TypeError(f"a vocabulary holds integer ids, got dtype {vocab.dtype}")
    vocab = vocab.to(torch.int64).cpu().contiguous()
    if vocab.numel() > 1 and not bool((vocab[1:] > vocab[:-1]).all()):
        raise ValueError("the vocabulary must be sorted ascending without duplicates")
    if num_embeddings != vocab.numel() + 1:
        raise ValueError(
            f"num_embeddings must be len(vocabulary) + 1 = {vocab.numel() + 1} (row 0 is reserved for "
            f"missing/unseen ids), got {num_embeddings}"
        )
    return vocab


def binary_search_lower_bound(sorted_values: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``torch.searchsorted(sorted_values, values)`` written with ops every ONNX exporter knows.

    ONNX has no searchsorted operator (neither ``torch.onnx`` exporter converts ``aten::searchsorted``),
    so this computes the same lower bound, ``pos = #{k : sorted_values[k] < value}``, by binary lifting:
    start at ``pos = 0`` and, for each power of two ``step`` from the largest ``<= V`` down to 1, advance
    ``pos += step`` where ``sorted_values[pos + step - 1] < value``. Because the "less than" entries form a
    prefix, this builds ``pos`` bit by bit. The loop has ``floor(log2 V) + 1`` iterations fixed by the
    vocabulary's size (not by the data), each a Gather, a Less and a Where: O(B·log V), same as searchsorted.
    """
    n = int(sorted_values.shape[0])  # a Python int, also under tracing: the loop is unrolled at export
    pos = torch.zeros_like(values)
    if n == 0:
        return pos
    step = 1 << (n.bit_length() - 1)
    while step > 0:
        candidate = pos + step
        probe = sorted_values[(candidate - 1).clamp(max=n - 1)]
        pos = torch.where((candidate <= n) & (probe < values), candidate, pos)
        step >>= 1
    return pos


def index_hash_rows(ids: torch.Tensor, vocabulary: torch.Tensor) -> torch.Tensor:
    """:class:`IndexHash`'s lookup: ids ``[B]`` → rows ``[B]`` through a ``[B, V]`` comparison matrix."""
    if vocabulary.shape[0] == 0:  # fixed by the vocabulary, not by the data: every id is unseen
        return torch.zeros_like(ids)
    matches = ids.unsqueeze(-1) == vocabulary  # [B, V] bool: the O(B·V) part
    found = matches.any(dim=-1)  # [B]
    first = matches.to(torch.uint8).argmax(dim=-1)  # [B]; 0 for all-False rows: the original's bug
    return torch.where(found, first + 1, torch.zeros_like(first))


class IndexHash(nn.Module):
    """The original lecture's lookup, kept as the anti-pattern to measure: O(B·V) time *and* memory.

    ``matches = ids[:, None] == vocabulary[None, :]`` builds a ``[B, V]`` boolean matrix, and ``argmax``
    (which needs numbers, so a ``uint8`` copy of it) finds the first ``True`` per row: 2·B·V bytes, 41 GB
    for a Criteo feature with V = 10M and a batch of B = 2048.

    Bug fixed here: ``argmax`` of an all-``False`` row is 0, so the original silently sent every unseen or
    missing id to vocabulary entry 0's row. This version maps unseen explicitly to the reserved row 0 and
    vocabulary entry ``i`` to row ``i + 1``, exactly like :class:`VocabularyHash` (tested equal).
    """

    def __init__(self, vocabulary, num_embeddings: int):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.register_buffer("vocabulary", _as_vocabulary(vocabulary, num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids int64 ``[B]`` → rows int64 ``[B]`` in ``[0, V]``."""
        return index_hash_rows(ids, self.vocabulary)

    def extra_repr(self) -> str:
        return f"vocabulary_size={self.vocabulary.numel()}, num_embeddings={self.num_embeddings}"


class VocabularyHash(nn.Module):
    """Exact id → row lookup by binary search over the sorted vocabulary: O(B·log V), O(B) memory.

    ``pos = searchsorted(vocabulary, ids)`` is where each id would be inserted; the id is in the vocabulary
    iff ``vocabulary[pos] == id`` (``pos`` clamped to ``V - 1`` so the gather stays in range). Seen ids go to
    row ``pos + 1``; missing (negative), unseen and rare ids go to row 0.

    Under ``torch.onnx.export`` (either exporter) the search runs as :func:`binary_search_lower_bound`,
    because ONNX has no searchsorted operator; the rows are identical (tested).
    """

    def __init__(self, vocabulary, num_embeddings: int):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.register_buffer("vocabulary", _as_vocabulary(vocabulary, num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids int64 ``[B]`` → rows int64 ``[B]`` in ``[0, V]``."""
        v = int(self.vocabulary.shape[0])
        if v == 0:  # fixed by the vocabulary, not by the data: every id is unseen
            return torch.zeros_like(ids)
        if torch.onnx.is_in_onnx_export():
            pos = binary_search_lower_bound(self.vocabulary, ids)
        else:
            pos = torch.searchsorted(self.vocabulary, ids)
        found = self.vocabulary[pos.clamp(max=v - 1)] == ids
        return torch.where(found, pos + 1, torch.zeros_like(pos))

    def extra_repr(self) -> str:
        return f"vocabulary_size={self.vocabulary.numel()}, num_embeddings={self.num_embeddings}"


class BatchedVocabularyHash(nn.Module):
    """All ``F`` features' vocabulary lookups in one search: ``[B, F]`` raw ids → ``[B, F]`` rows.

    :class:`VocabularyHash` searches each feature's vocabulary on its own: 26 ``searchsorted`` launches
    for Criteo (and, in an ONNX export, 26 unrolled binary searches of ~17 steps each). Here the ``F``
    sorted vocabularies become **one** sorted buffer of combined keys::

        key(f, id) = f · 2^32 + id          (ids are 32-bit, so feature f's keys fill [f·2^32, (f+1)·2^32))

    Feature ``f``'s block is its vocabulary shifted by ``f · 2^32``: still sorted, and every key of feature
    ``f`` is below every key of feature ``f + 1``, so the concatenation of the blocks in feature order is
    sorted. ``starts[f]`` is where block ``f`` begins (``starts[f] = V_0 + ... + V_{f-1}``). For a batch::

        pos   = searchsorted(keys, f · 2^32 + sparse[b, f])      one search for all B·F ids
        found = keys[pos] == f · 2^32 + sparse[b, f]  and  0 <= sparse[b, f] < 2^32
        row   = pos - starts[f] + 1  if found, else 0            row within feature f's own table

    The range check matters: an id outside ``[0, 2^32)`` makes a key in a neighbouring feature's block
    (``-2`` in feature ``f`` is id ``2^32 - 2`` of feature ``f - 1``; ``2^32`` is id 0 of feature ``f + 1``),
    and a match there would give ``pos - starts[f] + 1`` outside table ``f``'s rows ``[1, V_f]``. Missing
    ids (``-1``) are masked with every other negative id.

    Cost: O(B·F·log ΣV) comparisons, where ``ΣV`` is the total of all vocabularies, in one kernel instead
    of ``F`` launches of O(B·log V_f). On the default data (ΣV ≈ 474k, largest V ≈ 69k) that is 19 binary
    steps per id against up to 17: about the same work, but ``F`` times fewer launches and, in an ONNX
    export, one unrolled search of 19 steps instead of 26 of up to 17. Memory: the ``ΣV`` keys, as
    before, plus ``O(B·F)`` int64 temporaries.

    This is the first taste of *batching the 26 tables*: treat the features as one indexed collection
    instead of 26 modules. Notebook 05 takes the same step for the embeddings themselves (table-batched
    embeddings: one weight buffer, per-table row offsets, one gather).

    Under ``torch.onnx.export`` the search runs as :func:`binary_search_lower_bound` over the combined keys.

    Args:
        vocabularies: ``F`` sorted integer arrays of kept ids in ``[0, 2^32)`` (an empty one is allowed:
            every id of that feature goes to row 0).
        num_embeddings_per_feature: ``V_f + 1`` rows per table (row 0 reserved), checked against them.
    """

    def __init__(self, vocabularies: Sequence, num_embeddings_per_feature: Sequence[int]):
        super().__init__()
        if len(vocabularies) != len(num_embeddings_per_feature):
            raise ValueError(
                f"need one vocabulary per feature: {len(vocabularies)} vocabularies for "
                f"{len(num_embeddings_per_feature)} tables"
            )
        if not vocabularies:
            raise ValueError("a BatchedVocabularyHash needs at least one feature")
        blocks = []
        for f, (vocab, n) in enumerate(zip(vocabularies, num_embeddings_per_feature, strict=True)):
            try:
                vocab = _as_vocabulary(vocab, n)
            except (ValueError, TypeError) as error:
                raise type(error)(f"feature {f}: {error}") from error
            if vocab.numel() and (int(vocab[0]) < 0 or int(vocab[-1]) >= 1 << ID_BITS):
                raise ValueError(
                    f"feature {f}: vocabulary ids must lie in [0, 2^{ID_BITS}), got "
                    f"[{int(vocab[0])}, {int(vocab[-1])}]"
                )
            blocks.append(vocab + (f << ID_BITS))
        sizes = torch.tensor([b.numel() for b in blocks], dtype=torch.int64)
        self.num_embeddings_per_feature = tuple(int(n) for n in num_embeddings_per_feature)
        # The id → row mapping a checkpoint must carry: persistent, like VocabularyHash's vocabulary.
        self.register_buffer("keys", torch.cat(blocks))  # [ΣV], sorted ascending
        # Derived from the table sizes (which the model's config records): not saved in checkpoints.
        self.register_buffer("starts", torch.cumsum(sizes, 0) - sizes, persistent=False)  # [F]
        self.register_buffer(
            "key_offsets", torch.arange(len(blocks), dtype=torch.int64) << ID_BITS, persistent=False
        )  # [F]: f · 2^32

    @property
    def num_features(self) -> int:
        """``F``."""
        return len(self.num_embeddings_per_feature)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Raw ids int64 ``[B, F]`` → rows int64 ``[B, F]``; ``rows[b, f]`` in ``[0, V_f]`` (table ``f``)."""
        total = int(self.keys.shape[0])
        if total == 0:  # fixed by the vocabularies, not by the data: every id is unseen
            return torch.zeros_like(sparse)
        # Feature-major [F, B]: the B searches of one feature land in one block of the keys, which stays in
        # cache (batch-major [B, F] order hops between all F blocks: ~1.6x slower on a CPU).
        ids = sparse.t().contiguous()  # [F, B]
        query = ids + self.key_offsets[:, None]  # [F, B]: f · 2^32 + id; meaningless outside [0, 2^32)
        if torch.onnx.is_in_onnx_export():
            pos = binary_search_lower_bound(self.keys, query)
        else:  # one search over all features' keys; flat, so torch.compile keeps the feature-major order
            pos = torch.searchsorted(self.keys, query.view(-1)).view_as(query)  # [F, B]
        in_range = (ids >= 0) & (ids < 1 << ID_BITS)  # e.g. missing (-1) must not match feature f-1's block
        found = (self.keys[pos.clamp(max=total - 1)] == query) & in_range
        rows = torch.where(found, pos - self.starts[:, None] + 1, torch.zeros_like(pos))  # [F, B]
        return rows.t()  # [B, F], a transposed view: rows[:, f] is contiguous, ready for table f

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, total_vocabulary_size={self.keys.numel()}"


class ModulusHash(nn.Module):
    """No vocabulary: ``row = 1 + id mod (num_embeddings - 1)``; missing (negative) ids → row 0.

    O(B), nothing to store, and any id gets a row — at the price of collisions: unrelated ids that agree
    modulo ``num_embeddings - 1`` share (and fight over) one embedding. The ``1 +`` keeps row 0 meaning
    "missing" as in the vocabulary hashes, so the three are interchangeable over the same tables.
    With ``num_embeddings == 1`` every id goes to row 0.
    """

    def __init__(self, num_embeddings: int):
        super().__init__()
        if num_embeddings < 1:
            raise ValueError(f"num_embeddings must be >= 1, got {num_embeddings}")
        self.num_embeddings = num_embeddings

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids int64 ``[B]`` → rows int64 ``[B]`` in ``[0, num_embeddings)``."""
        if self.num_embeddings == 1:
            return torch.zeros_like(ids)
        hashed = 1 + torch.remainder(ids, self.num_embeddings - 1)  # remainder >= 0 for a positive divisor
        return torch.where(ids < 0, torch.zeros_like(hashed), hashed)

    def extra_repr(self) -> str:
        return f"num_embeddings={self.num_embeddings}"


class BatchedModulusHash(nn.Module):
    """:class:`ModulusHash` for all ``F`` features at once: ``[B, F]`` raw ids → ``[B, F]`` rows.

    With ``n_f`` rows in table ``f``, ``row[b, f] = 1 + ids[b, f] mod (n_f - 1)``, row 0 for missing
    (negative) ids and for every id of a one-row table: the same rows as ``F`` :class:`ModulusHash` modules,
    one per column (tested). The ``F`` moduli are one ``[F]`` tensor broadcast over the batch, so the whole
    hash is one ``remainder`` and one ``where`` over ``B·F`` ids, whatever ``F`` is; the per-feature version
    launches its handful of kernels ``F`` times (26 for Criteo). The lecture this repo descends from made
    the same move (its ``_forward_modulus_hash``: ``(inputs + 1) % self.cardinality_tensor``) after the
    per-feature loop of its ``_forward_bad_modulus_hash``.

    Args:
        num_embeddings_per_feature: ``n_f`` rows per table (``>= 1``; row 0 is reserved).
    """

    def __init__(self, num_embeddings_per_feature: Sequence[int]):
        super().__init__()
        sizes = tuple(int(n) for n in num_embeddings_per_feature)
        if not sizes:
            raise ValueError("a BatchedModulusHash needs at least one feature")
        bad = [(f, n) for f, n in enumerate(sizes) if n < 1]
        if bad:
            raise ValueError(f"num_embeddings must be >= 1 per feature; got (feature, rows) {bad}")
        self.num_embeddings_per_feature = sizes
        n = torch.tensor(sizes, dtype=torch.int64)
        # Derived from the table sizes (which the model's config records): not saved in checkpoints.
        self.register_buffer("moduli", (n - 1).clamp(min=1), persistent=False)  # [F]; 1 avoids x mod 0
        self.register_buffer("hashed", n > 1, persistent=False)  # [F]: a one-row table has only row 0

    @property
    def num_features(self) -> int:
        """``F``."""
        return len(self.num_embeddings_per_feature)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Raw ids int64 ``[B, F]`` → rows int64 ``[B, F]``; ``rows[b, f]`` in ``[0, n_f)`` (table ``f``)."""
        rows = 1 + torch.remainder(sparse, self.moduli)  # [B, F]: the [F] moduli broadcast over the batch
        keep = (sparse >= 0) & self.hashed  # [B, F]: missing ids and one-row tables go to row 0
        return torch.where(keep, rows, torch.zeros_like(rows))

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}"


def make_hash(kind: str, vocabulary, num_embeddings: int) -> nn.Module:
    """The hash module named ``kind`` (``"vocabulary"``, ``"index"``, ``"modulus"``).

    ``vocabulary`` is a sorted int array of kept ids (ignored, may be ``None``, for ``"modulus"``);
    ``num_embeddings`` is the table's row count (``len(vocabulary) + 1`` for the vocabulary hashes).
    """
    if kind == "vocabulary":
        return VocabularyHash(vocabulary, num_embeddings)
    if kind == "index":
        return IndexHash(vocabulary, num_embeddings)
    if kind == "modulus":
        return ModulusHash(num_embeddings)
    raise ValueError(f"unknown hashing kind {kind!r}; choose 'vocabulary', 'index' or 'modulus'")
