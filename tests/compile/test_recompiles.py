"""``count_compiles`` and ``recompiles_logged``: guards, recompiles and automatic dynamic shapes.

The counting backend only traces (no inductor), so every test here takes a fraction of a second.
"""

from __future__ import annotations

import torch

from lecture_code.compile import count_compiles, guard_failures
from lecture_code.internals import recompiles_logged


def _mlp_like(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w.t()).sum(1)


def _batches(device, sizes, dtype=torch.float32, views=True):
    """``(x, w)`` per size: ``x`` the first ``n`` rows of one batch (a view, as the notebook slices), or a
    tensor of its own (``views=False``)."""
    w = torch.randn(4, 8, device=device, dtype=dtype)
    x = torch.randn(max(sizes), 8, device=device, dtype=dtype)
    return [(x[:n] if views else x[:n].clone(), w) for n in sizes]


def test_three_batch_sizes_compile_twice_the_second_graph_dynamic(device):
    seen = count_compiles(_mlp_like, _batches(device, (64, 32, 16)))
    assert seen.calls == 3
    assert [c.call for c in seen.compiles] == [0, 1]  # the third size reuses the dynamic graph
    assert not seen.compiles[0].dynamic
    assert seen.compiles[1].dynamic and len(seen.compiles[1].symbolic_sizes) == 1
    assert len(seen.guard_failures) == 1
    assert "size mismatch at index 0" in seen.guard_failures[0]
    assert "expected 64, actual 32" in seen.guard_failures[0]
    assert "compile 2: triggered by call 1, symbolic sizes" in str(seen)


def test_dynamic_false_compiles_every_size(device):
    seen = count_compiles(_mlp_like, _batches(device, (64, 32, 16)), dynamic=False)
    assert [c.call for c in seen.compiles] == [0, 1, 2]
    assert not any(c.dynamic for c in seen.compiles)
    # a failed call lists the failure of every graph cached so far: one, then two
    assert len(seen.guard_failures) == 3
    assert "expected 32, actual 16" in " ".join(seen.guard_failures)


def test_dynamic_true_compiles_once_with_a_symbol(device):
    seen = count_compiles(_mlp_like, _batches(device, (64, 32, 16), views=False), dynamic=True)
    assert len(seen.compiles) == 1 and seen.compiles[0].dynamic
    assert seen.guard_failures == []


def test_same_sizes_compile_once(device):
    seen = count_compiles(_mlp_like, _batches(device, (32, 32, 32)))
    assert len(seen.compiles) == 1 and not seen.compiles[0].dynamic
    assert seen.guard_failures == []


def test_a_dtype_change_breaks_a_guard(device):
    calls = _batches(device, (16,)) + _batches(device, (16,), dtype=torch.float64)
    seen = count_compiles(_mlp_like, calls)
    assert [c.call for c in seen.compiles] == [0, 1]
    assert len(seen.guard_failures) == 1 and "dtype" in seen.guard_failures[0].lower()


def test_dlrm_batch_slices(tiny_dlrm):
    model, dense, sparse, _ = tiny_dlrm
    b = dense.shape[0]
    seen = count_compiles(model.predict_proba, [(dense[:n], sparse[:n]) for n in (b, b // 2, b // 4)])
    assert [c.call for c in seen.compiles] == [0, 1]
    assert [c.dynamic for c in seen.compiles] == [False, True]
    assert any(f"expected {b}, actual {b // 2}" in line for line in seen.guard_failures)


def test_recompiles_logged_collects_instead_of_printing_and_resets(capfd):
    def double(x):
        return x * 2

    compiled = torch.compile(double, backend="eager")
    torch.compiler.reset()
    try:
        with recompiles_logged() as messages:
            compiled(torch.randn(3))
            compiled(torch.randn(4))
        assert len(messages) == 1 and "Recompiling function double" in messages[0]
        assert "triggered by the following guard failure(s)" in messages[0]
        compiled(torch.randn(3, 2))  # outside the block: logged nowhere
        assert len(messages) == 1
    finally:
        torch.compiler.reset()
    assert "Recompiling" not in capfd.readouterr().err


def test_guard_failures_keeps_only_the_failure_lines():
    message = (
        "Recompiling function f in /some/abs/path.py:12\n"
        "    triggered by the following guard failure(s):\n"
        "    - 0/0: tensor 'x' size mismatch at index 0. expected 64, actual 32\n"
        "    - 0/0: tensor 'y' dtype mismatch"
    )
    assert guard_failures([message, "unrelated"]) == [
        "- 0/0: tensor 'x' size mismatch at index 0. expected 64, actual 32",
        "- 0/0: tensor 'y' dtype mismatch",
    ]
