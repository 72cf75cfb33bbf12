"""Lecture code: Criteo data, the DLRM model, training, profiling, compile inspection, export, LoRA.

Importing ``kernels`` first (done here) fixes the runtime mode before any Triton kernel is defined.
"""

import kernels  # noqa: F401  (decides GPU vs CPU-interpreter mode first)
