"""Measured performance experiments of notebooks 02 and 03, and the command that draws ``perf_screenshots/``.

- :mod:`.step_timing`: time a training step (ms per step, no host sync inside the timed loop) and the memory
  one step allocates (from the profiler's allocation events).
- :mod:`.host_sync`: finding 1, ``loss.item()`` every step against a loss kept on the device.
- :mod:`.hash_cost`: finding 2, the naive index hash against searchsorted and modulus as the vocabulary grows.
- :mod:`.hashing_stages`: finding 3, metadata on the host → on the device → vocabulary lookup → modulus.
- :mod:`.eager_vs_compiled`: the same step eager and under ``torch.compile``.
- :mod:`.charts`: the bar charts; :mod:`.screenshots`: ``python -m lecture_code.perf.screenshots``.
"""
