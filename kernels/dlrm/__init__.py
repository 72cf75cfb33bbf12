"""DLRM's own kernels (notebook 05): the embedding tables and the feature interaction.

- :mod:`.embedding_tbe` — ``TableBatchedEmbedding`` / ``embedding_tbe(...)``: every table in one buffer, one
  lookup launch, the optimizer (SGD, row-wise Adagrad) inside the backward.
- :mod:`.tbe_inputs` — the embedding's two bag layouts and the checks its arguments get.
- :mod:`.interaction_dot` — ``interaction_dot(dense, sparse)``: the pairwise dot products of DLRM's ``dot``
  interaction, forward and backward.

Import from the module (``from kernels.dlrm.embedding_tbe import TableBatchedEmbedding``); see
:mod:`kernels.pointwise` for why.
"""
