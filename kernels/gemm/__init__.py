"""A GEMM built up one idea at a time, from a tiled matmul to a low-rank epilogue (the GEMM notebook, before
the LoRA case study). Each step is a small, tested Triton kernel with a public function; every step computes
``a @ b`` (reference :func:`kernels.reference.matmul`), the last one adds a low-rank term.

- :mod:`.tiled` — ``matmul_tiled(a, b)``: one program per output tile, a K loop, masked edges, fp32
  accumulator.
- :mod:`.grouped` — ``matmul_grouped(a, b)``: the same, tiles in grouped order (``GROUP_M``) for L2 reuse;
  ``grouped_tile`` (the mapping, shared by later steps), ``tile_order`` and ``wave_footprint`` (the order and
  the blocks a wave of programs reads, on the host).
- :mod:`.persistent` — ``matmul_persistent(a, b)``: a persistent grid, one program per SM looping over tiles.
- :mod:`.descriptors` — ``matmul_descriptors(a, b)``: tiles through tensor descriptors (TMA on sm_90+);
  ``descriptors_unmet`` (why a GPU cannot), ``descriptor_problem`` (why a layout cannot).
- :mod:`.lowrank_epilogue` — ``matmul_lowrank(a, b, lora_a, lora_b, scale)``: ``a @ b + s·(a Aᵀ) Bᵀ``, the
  shrink in the main loop, the expand in the epilogue (reference :func:`kernels.reference.matmul_lowrank`).
- :mod:`.tiles` — ``Tiles``, ``default_tiles`` (the one tile rule of every step), ``persistent_programs``.
- :mod:`.checks` — ``check_operands``, ``output``: the argument checks every step shares.

Import from the modules (``from kernels.gemm.tiled import matmul_tiled``); see :mod:`kernels.pointwise`.
"""
