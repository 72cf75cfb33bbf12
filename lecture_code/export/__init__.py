"""The model graph out of PyTorch: export to ONNX, check it against PyTorch, summarize it, view it in Netron.

- :mod:`.onnx_export`: :func:`export_onnx`, :func:`validate_onnx` (checker + onnxruntime vs torch at other
  batch sizes), :func:`summarize_onnx`;
- :mod:`.netron`: serve a file to Netron on localhost, or screenshot it in headless Chromium, with a readable
  1:1 crop beside the overview (:func:`~.netron.side_by_side_html` shows both in a notebook);
- :mod:`.netron_crop`: which part to crop, in graph terms (an operator and the layout ranks above it);
- :mod:`.cli`: ``python -m lecture_code.export --out data/dlrm.onnx [--open] [--screenshot x.png]``.
"""

from lecture_code.export.netron import open_in_netron, screenshot_netron, serve_netron
from lecture_code.export.onnx_export import (
    OnnxSummary,
    ONNXValidationError,
    export_onnx,
    summarize_onnx,
    validate_onnx,
)

__all__ = [
    "ONNXValidationError",
    "OnnxSummary",
    "export_onnx",
    "open_in_netron",
    "screenshot_netron",
    "serve_netron",
    "summarize_onnx",
    "validate_onnx",
]
