"""The name notebook 07's first exercise imports: the checker now lives in :mod:`lecture_code.exercises`."""

from lecture_code.exercises.lora_linear import check_lora_linear

__all__ = ["check_lora_linear"]
