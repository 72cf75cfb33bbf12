"""Many LoRA adapters in one batch, as a server runs them (notebook 08): shrink and expand (SGMV).

- :mod:`.shrink_expand` — ``add_multi_lora(y, x, lora_a, lora_b, adapter_ids, ...)``, the public function,
  ``plan``: which path (``PATHS``: fused, split, one_launch) and tiles a call takes, and ``shrink_split``:
  the K chunks its shrink launches.
- :mod:`.metadata` — ``build_meta``: the token→adapter metadata (tokens sorted by adapter, block offsets),
  built on the device without a host sync.

Import from the modules (``from kernels.multi_lora.shrink_expand import add_multi_lora``); see
:mod:`kernels.pointwise`.
"""
