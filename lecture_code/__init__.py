"""Lecture code: Criteo data, the DLRM model, training, profiling, compile inspection, export, LoRA.

Subpackages stand on their own: ``lecture_code.data`` knows no model, ``lecture_code.model`` reads only the
data's metadata, and anything that runs Triton kernels imports ``kernels`` (which fixes the runtime mode
on import).
"""
