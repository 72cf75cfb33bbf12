"""Measured performance experiments of notebooks 02 and 03, and the command that draws ``perf_screenshots/``.

- :mod:`.step_timing`: time a training step (ms per step, no host sync inside the timed loop), several
  configurations with their repeats interleaved (median, min, max), and the memory one step allocates.
- :mod:`.step_anatomy`: wall time vs GPU busy time vs host waits as the batch grows, and sentences from them.
- :mod:`.host_sync`: finding 1, ``loss.item()`` every step against a loss kept on the device.
- :mod:`.hash_cost`: finding 2, the naive index hash against searchsorted and modulus as the vocabulary
  grows, and all 26 features hashed one module each against one batched module.
- :mod:`.hashing_stages`: finding 3, metadata on the host → on the device → vocabulary lookup → modulus per
  feature → modulus for all features at once.
- :mod:`.kaggle_tables`: the same step with the data's small tables and with the Kaggle tables (2 GiB).
- :mod:`.eager_vs_compiled`: the same step eager and under ``torch.compile``.
- :mod:`.charts`: the bar charts; :mod:`.sidecars`: the JSON beside each picture; :mod:`.screenshots`:
  ``python -m lecture_code.perf.screenshots``.
"""
