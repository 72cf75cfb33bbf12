"""The DLRM exports to ONNX with every hashing kind and runs in onnxruntime with the same logits.

The fast TorchScript exporter covers the model's export path (VocabularyHash's binary search, taken
whenever ``torch.onnx.is_in_onnx_export()``); the slower dynamo exporter is exercised for every hashing kind
by ``tests/export/test_onnx_export.py`` (marked slow).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from dlrm_test_data import random_batch, random_metadata

from lecture_code.model import DLRM

# fp32: onnxruntime runs the same ops with its own GEMM kernels.
ATOL, RTOL = 1e-5, 1e-5


def _export_torchscript_and_run(model, example, other, path):
    """Export with a dynamic batch, check the file, run ``other`` (another batch size) in onnxruntime."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation and tracer warnings
        torch.onnx.export(
            model,
            example,
            str(path),
            dynamo=False,
            opset_version=18,
            input_names=["dense", "sparse"],
            output_names=["logits"],
            dynamic_axes={"dense": {0: "B"}, "sparse": {0: "B"}, "logits": {0: "B"}},
        )
    onnx.checker.check_model(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"dense": other[0].numpy(), "sparse": other[1].numpy()})[0]


@pytest.mark.parametrize("hashing", ["vocabulary", "index", "modulus"])
def test_torchscript_export_matches_eager(rng, tmp_path, hashing):
    metadata = random_metadata(rng, num_features=3, max_vocab=40)
    model = DLRM.from_metadata(metadata, hashing=hashing).eval()
    example, other = random_batch(rng, metadata, 8), random_batch(rng, metadata, 5)  # another batch size
    logits = _export_torchscript_and_run(model, example, other, tmp_path / "dlrm.onnx")
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(*other).numpy(), atol=ATOL, rtol=RTOL)


def test_vocabulary_hash_exports_one_search_for_all_features(rng, tmp_path):
    """The batched lookup exports one unrolled binary search over all features' keys: ``ΣV.bit_length()``
    steps (each with one ``Less``), not one search per feature."""
    metadata = random_metadata(rng, num_features=6, max_vocab=40)
    model = DLRM.from_metadata(metadata, hashing="vocabulary").eval()
    example, other = random_batch(rng, metadata, 8), random_batch(rng, metadata, 5)
    logits = _export_torchscript_and_run(model, example, other, tmp_path / "dlrm.onnx")
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(*other).numpy(), atol=ATOL, rtol=RTOL)
    steps = sum(len(v) for v in metadata.vocabularies).bit_length()
    per_feature_steps = sum(len(v).bit_length() for v in metadata.vocabularies)
    less = sum(node.op_type == "Less" for node in onnx.load(str(tmp_path / "dlrm.onnx")).graph.node)
    assert steps <= less <= steps + 1 < per_feature_steps  # + 1: the ``id < 2^32`` range check
