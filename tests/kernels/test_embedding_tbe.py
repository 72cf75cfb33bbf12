"""Table-batched embedding (Triton) against nn.Embedding / F.embedding_bag + torch.optim and the references.

Every update test runs several steps in a row with repeated ids and ids at the table edges (0 and n_f - 1), so
a row touched twice in one batch, or a neighbouring table's first row, would show a wrong update.
"""

from __future__ import annotations

import pytest
import torch

import kernels.dlrm.embedding_tbe as tbe_module
from kernels import reference
from kernels.dlrm.embedding_tbe import TableBatchedEmbedding, embedding_tbe, table_offsets_for
from kernels.runtime import default_device

SIZES = [5, 1, 9, 4]  # a one-row table, odd sizes
DIM = 6  # odd-ish: not a power of two, masked lanes
# (atol, rtol) per dtype. fp32: the kernel sums a run in a different order than index_add / embedding_bag
# (a few fp32 ulps). fp16: the pooled sum is accumulated in fp32 and rounded once, torch rounds per add.
TOL = {torch.float32: (1e-6, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 1.6e-2)}


def _ids(batch: int, sizes, device, bag: int | None = None) -> torch.Tensor:
    """Local ids [B, F] (or [B, F, L]) with repeats within the batch and both table edges present."""
    shape = (batch,) if bag is None else (batch, bag)
    cols = [torch.randint(0, n, shape) for n in sizes]
    ids = torch.stack(cols, dim=1)
    ids[0] = 0  # first row of every table
    ids[1] = torch.tensor(sizes).view(-1, *([1] * (ids.dim() - 2))) - 1  # last row of every table
    ids[2] = ids[3]  # a whole sample repeated: every table sees a repeated id
    return ids.to(device)


def _csr(batch: int, sizes, device, lengths_from=(0, 1, 2, 3)):
    """Ragged bags (some empty; tiny tables, so ids repeat) → (flat local ids, offsets [B·F+1])."""
    F = len(sizes)
    lengths = torch.tensor(lengths_from)[torch.randint(0, len(lengths_from), (batch * F,))]
    lengths[0] = 0  # an empty bag, certainly
    lengths[1] = max(lengths_from)
    feature = torch.repeat_interleave(torch.arange(batch * F) % F, lengths)
    n = torch.tensor(sizes)[feature]
    flat = (torch.rand(feature.shape) * n).long().clamp(max=n - 1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    return flat.to(device), offsets.to(device)


def _tbe_options(optimizer: str) -> dict:
    """TableBatchedEmbedding's options for a test's optimizer name: ``"sgd atomic"`` is SGD by atomic adds."""
    if optimizer == "sgd atomic":
        return {"optimizer": "sgd", "deterministic": False}
    return {"optimizer": optimizer}


@pytest.fixture
def no_sort(monkeypatch):
    """The atomic path must not sort: torch.sort raises inside the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the atomic SGD path called torch.sort")

    monkeypatch.setattr(torch, "sort", refuse)


def _reference_update(ref_w: torch.Tensor, ref_state: torch.Tensor, optimizer: str, lr: float, eps: float):
    """The reference step on ``ref_w``'s dense gradient, in place: SGD, or FBGEMM's row-wise Adagrad."""
    with torch.no_grad():
        if optimizer.startswith("sgd"):
            ref_w -= lr * ref_w.grad
        else:
            reference.rowwise_adagrad_step(ref_w, ref_state, ref_w.grad, lr, eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_one_hot_forward_and_sgd_match_nn_embedding(seed, poison_empty, dtype):
    device = default_device()
    tbe = TableBatchedEmbedding(SIZES, DIM, optimizer="sgd", lr=0.3, dtype=dtype, device=device)
    embs = [torch.nn.Embedding(n, DIM, dtype=torch.float32, device=device) for n in SIZES]
    for e, w in zip(embs, tbe.embedding_weights(), strict=True):
        e.weight.data.copy_(w.float())
    opt = torch.optim.SGD([e.weight for e in embs], lr=0.3)
    atol, rtol = TOL[dtype]
    for _ in range(3):
        ids = _ids(10, SIZES, device)
        out = tbe(ids)
        ref = torch.stack([e(ids[:, f]) for f, e in enumerate(embs)], dim=1)
        assert out.shape == (10, len(SIZES), DIM) and out.dtype == dtype
        torch.testing.assert_close(out.float(), ref, atol=atol, rtol=rtol)
        grad = torch.randn_like(ref)
        out.backward(grad.to(dtype))
        opt.zero_grad()
        ref.backward(grad)
        opt.step()
        for f, (e, w) in enumerate(zip(embs, tbe.embedding_weights(), strict=True)):
            torch.testing.assert_close(
                w.float(), e.weight, atol=atol, rtol=rtol, msg=lambda m, f=f: f"t{f}: {m}"
            )
            if dtype != torch.float32:  # the fp32 copy would drift from the rounded tables
                e.weight.data.copy_(w.float())


@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "sgd atomic"])
def test_multi_hot_csr_update_matches_reference(seed, poison_empty, pooling, optimizer):
    """Ragged bags with empty ones: forward vs F.embedding_bag, the update vs torch.optim.SGD on its dense
    gradient (SGD, sorted or by atomic adds) or FBGEMM's row-wise Adagrad rule written in torch
    (reference.rowwise_adagrad_step)."""
    device = default_device()
    lr, eps = 0.2, 1e-6
    tbe = TableBatchedEmbedding(
        SIZES, DIM, lr=lr, eps=eps, pooling=pooling, device=device, **_tbe_options(optimizer)
    )
    ref_w = tbe.weight.clone().requires_grad_()
    ref_state = torch.zeros(ref_w.shape[0], device=device)
    opt = torch.optim.SGD([ref_w], lr=lr)
    for _ in range(3):
        flat, offsets = _csr(7, SIZES, device)
        out = tbe(flat, offsets)
        ref = reference.embedding_tbe(ref_w, tbe.table_offsets, flat, offsets, pooling)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
        assert not out[0, 0].any(), "an empty bag pools to zeros"
        grad = torch.randn_like(ref)
        out.backward(grad)
        opt.zero_grad()
        ref.backward(grad)
        if optimizer.startswith("sgd"):
            opt.step()
        else:
            with torch.no_grad():
                reference.rowwise_adagrad_step(ref_w, ref_state, ref_w.grad, lr, eps)
            torch.testing.assert_close(tbe.momentum, ref_state, atol=1e-7, rtol=1e-5)
        torch.testing.assert_close(tbe.weight, ref_w.detach(), atol=1e-6, rtol=1e-5)


def test_fixed_bags_mean_adagrad(seed, poison_empty):
    """ids [B, F, L]: every bag has L entries (repeats inside a bag included)."""
    device = default_device()
    tbe = TableBatchedEmbedding(SIZES, 5, optimizer="rowwise_adagrad", lr=0.1, pooling="mean", device=device)
    ref_w, ref_state = tbe.weight.clone().requires_grad_(), torch.zeros(tbe.weight.shape[0], device=device)
    for _ in range(2):
        ids = _ids(6, SIZES, device, bag=3)
        ids[4, :, 1] = ids[4, :, 0]
        out = tbe(ids)
        ref = reference.embedding_tbe(ref_w, tbe.table_offsets, ids, None, "mean")
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
        grad = torch.randn_like(ref)
        out.backward(grad)
        ref_w.grad = None
        ref.backward(grad)
        with torch.no_grad():
            reference.rowwise_adagrad_step(ref_w, ref_state, ref_w.grad, 0.1, tbe.eps)
        torch.testing.assert_close(tbe.weight, ref_w.detach(), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(tbe.momentum, ref_state, atol=1e-7, rtol=1e-5)


def test_hot_row_update_is_deterministic(seed):
    """Each table's row 0 in every sample: runs of 150 entries, longer than the update kernel's block of
    sorted positions (64 at D = 6), so each is summed in pieces across blocks. Summed once, same bits every
    run, and equal to the reference."""
    device = default_device()
    ids = torch.zeros(150, len(SIZES), dtype=torch.long, device=device)
    results = []
    grad = torch.randint(-64, 65, (150, len(SIZES), DIM), device=device) / 16.0  # exact sums in any order
    for _ in range(2):
        torch.manual_seed(1)
        tbe = TableBatchedEmbedding(SIZES, DIM, optimizer="rowwise_adagrad", lr=0.1, device=device)
        ref_w, ref_state = (
            tbe.weight.clone().requires_grad_(),
            torch.zeros(tbe.weight.shape[0], device=device),
        )
        tbe(ids).backward(grad)
        results.append(tbe.weight.clone())
    assert torch.equal(results[0], results[1])
    reference.embedding_tbe(ref_w, tbe.table_offsets, ids).backward(grad)
    with torch.no_grad():
        reference.rowwise_adagrad_step(ref_w, ref_state, ref_w.grad, 0.1, tbe.eps)
    torch.testing.assert_close(results[0], ref_w.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(tbe.momentum, ref_state, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("form", ["one-hot", "csr-mean"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "sgd atomic"])
def test_runs_across_update_blocks_match_reference(seed, poison_empty, form, optimizer):
    """About a thousand entries: runs of equal rows start, end and pass through the update kernel's blocks of
    sorted positions at random places (a 1-row and a 3-row table give runs of 50–150, the 700-row table
    mostly single entries), and out-of-range ids (check_ids=False) sort last as a run of their own that
    crosses blocks too: they pool to zeros and update nothing.

    The upstream gradients are multiples of 1/16 in [-4, 4] and bags hold 0, 1, 2 or 4 entries, so every
    run's sum is exact in fp32 whatever its order (a run of 500 random floats, summed in the scan's order
    and in index_add's, differs by a few ulps of its terms' sum: 3e-6 here). Kernel and reference then agree
    to the rounding of the update alone. For the atomic path, which updates the weight add by add, the
    weights start on multiples of 2⁻¹⁰ and lr is 1/4, so every intermediate value is exact too."""
    device = default_device()
    sizes, lr, eps, batch = [3, 1, 700, 2, 40], 0.25, 1e-6, 150
    tbe = TableBatchedEmbedding(
        sizes, DIM, lr=lr, eps=eps, check_ids=False, device=device,
        pooling="sum" if form == "one-hot" else "mean", **_tbe_options(optimizer),
    )  # fmt: skip
    tbe.weight.copy_(torch.round(tbe.weight * 1024) / 1024)
    ref_w = tbe.weight.clone().requires_grad_()
    ref_state = torch.zeros(ref_w.shape[0], device=device)
    for _ in range(2):
        if form == "one-hot":
            ids, offsets = _ids(batch, sizes, device), None
            bad = torch.rand(ids.shape, device=device) < 0.1
            ids_in_range = ids.clone()
            ids[bad] = torch.tensor(sizes, device=device).expand_as(ids)[bad]  # one past the table's end
            bad_bags = bad
        else:
            ids, offsets = _csr(batch, sizes, device, lengths_from=(0, 1, 2, 4))
            bad = torch.rand(ids.shape, device=device) < 0.1
            ids_in_range = ids.clone()
            ids[bad] = -1
            bag = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=device), offsets.diff())
            bad_bags = torch.zeros(batch * len(sizes), dtype=torch.bool, device=device)
            bad_bags[bag[bad]] = True
            bad_bags = bad_bags.view(batch, len(sizes))
        assert ids.numel() > 8 * tbe_module._segment_block(DIM), "several blocks of sorted positions"
        out = tbe(ids, offsets)
        grad = torch.randint(-64, 65, out.shape, device=device) / 16.0
        grad[bad_bags] = 0.0  # the reference: the same entries in range, with no gradient through them
        ref = reference.embedding_tbe(ref_w, tbe.table_offsets, ids_in_range, offsets, tbe.pooling)
        if offsets is None:
            assert torch.equal(out[bad], torch.zeros_like(out[bad])), "out-of-range ids pool to zeros"
            torch.testing.assert_close(out[~bad], ref[~bad].detach(), atol=1e-6, rtol=1e-5)
        out.backward(grad)
        ref_w.grad = None
        ref.backward(grad)
        _reference_update(ref_w, ref_state, optimizer, lr, eps)
        if optimizer == "rowwise_adagrad":
            torch.testing.assert_close(tbe.momentum, ref_state, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(tbe.weight, ref_w.detach(), atol=1e-6, rtol=1e-5)


def test_atomic_sgd_makes_no_sort_and_refuses_what_it_cannot_do(seed, no_sort):
    """deterministic=False: the update by atomic adds (torch.sort refused here: the path really taken) equals
    the sorted path's on hot rows; Adagrad and a 16-bit weight are refused with the reason."""
    device = default_device()
    ids = torch.zeros(40, len(SIZES), dtype=torch.long, device=device)  # one row per table, hit 40 times
    ids[::3] = _ids(14, SIZES, device)
    grad = torch.randint(-64, 65, (40, len(SIZES), DIM), device=device) / 16.0
    atomic = TableBatchedEmbedding(SIZES, DIM, lr=0.25, deterministic=False, device=device)
    ref_w = atomic.weight.clone().requires_grad_()
    atomic(ids).backward(grad)
    reference.embedding_tbe(ref_w, atomic.table_offsets, ids).backward(grad)
    torch.testing.assert_close(atomic.weight, ref_w.detach() - 0.25 * ref_w.grad, atol=1e-6, rtol=1e-5)
    assert "deterministic=False" in repr(atomic)
    refused = (({"optimizer": "rowwise_adagrad"}, "rowwise_adagrad"), ({"dtype": torch.float16}, "16"))
    for options, reason in refused:
        tbe = TableBatchedEmbedding(SIZES, DIM, deterministic=False, device=device, **options)
        with pytest.raises(ValueError, match=f"deterministic=False.*{reason}"):
            tbe(ids)


@pytest.mark.parametrize("bad", [-1, "size"])
def test_out_of_range_ids_raise(bad):
    device = default_device()
    tbe = TableBatchedEmbedding(SIZES, DIM, device=device)
    ids = _ids(4, SIZES, device)
    ids[2, 2] = -1 if bad == -1 else SIZES[2]  # table 2, one past its last row: a valid row of table 3
    with pytest.raises(IndexError, match="feature 2"):
        tbe(ids)
    flat, offsets = _csr(4, SIZES, device)
    flat[-1] = -5
    with pytest.raises(IndexError, match="out of range"):
        tbe(flat, offsets)


def test_unchecked_out_of_range_ids_pool_zeros_and_update_nothing():
    """check_ids=False (the CUDA-graph path): no error, but nothing outside the table is read or written."""
    device = default_device()
    tbe = TableBatchedEmbedding(SIZES, DIM, lr=0.5, check_ids=False, device=device)
    before = tbe.weight.clone()
    ids = torch.tensor([[-1, 1, 9, 4]], device=device)  # every id out of range for its table
    out = tbe(ids)
    assert torch.equal(out, torch.zeros_like(out))
    out.backward(torch.randn_like(out))
    assert torch.equal(tbe.weight, before)


def test_no_update_in_eval_or_no_grad():
    device = default_device()
    tbe = TableBatchedEmbedding(SIZES, DIM, lr=0.5, device=device)
    before = tbe.weight.clone()
    ids = _ids(5, SIZES, device)
    with torch.no_grad():
        assert not tbe(ids).requires_grad
    tbe.eval()
    assert not tbe(ids).requires_grad
    assert torch.equal(tbe.weight, before)
    assert "weight" not in dict(tbe.named_parameters()), "the packed weight is a buffer: no outer optimizer"


def test_checkpoints_interchange_with_nn_embedding(seed):
    device = default_device()
    embs = torch.nn.ModuleList(torch.nn.Embedding(n, DIM, device=device) for n in SIZES)
    tbe = TableBatchedEmbedding.from_embeddings(list(embs), optimizer="sgd", lr=0.1)
    for e, w in zip(embs, tbe.embedding_weights(), strict=True):
        assert torch.equal(e.weight, w)
    tbe.weight.add_(1.0)
    state = tbe.embedding_state_dict(prefix="embeddings.")
    holder = torch.nn.Module()
    holder.embeddings = embs
    holder.load_state_dict(state)  # strict: the keys are exactly a ModuleList of nn.Embedding's
    other = TableBatchedEmbedding(SIZES, DIM, device=device)
    other.load_embedding_state_dict(holder.state_dict(), prefix="embeddings.")
    assert torch.equal(other.weight, tbe.weight)
    assert torch.equal(table_offsets_for(SIZES), torch.tensor([0, 5, 6, 15, 19]))


def test_functional_forward_only(seed, poison_empty):
    device = default_device()
    weight = torch.randn(sum(SIZES), DIM, device=device)
    offs = table_offsets_for(SIZES, device)
    ids = _ids(5, SIZES, device)
    out = embedding_tbe(weight, offs, ids)
    torch.testing.assert_close(out, reference.embedding_tbe(weight, offs, ids))
    with pytest.raises(ValueError, match="optimizer"):
        embedding_tbe(weight, offs, ids, optimizer="adam", lr=0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "sgd atomic"])
def test_kaggle_tables_gpu(seed, dtype, optimizer):
    """The 26 Kaggle tables (33.8M rows), B = 2048, one-hot, Zipf-ish skew (hot rows repeat), two steps."""
    from lecture_code.data import KAGGLE_CARDINALITIES

    if optimizer == "sgd atomic" and dtype != torch.float32:
        pytest.skip("atomic SGD is fp32 only (refused otherwise: test_atomic_sgd_makes_no_sort_…)")
    device = torch.device("cuda")
    lr, eps = 0.1, 1e-8
    tbe = TableBatchedEmbedding(
        KAGGLE_CARDINALITIES, 16, lr=lr, dtype=dtype, device=device, **_tbe_options(optimizer)
    )
    ref_w = tbe.weight.float().clone().requires_grad_()
    ref_state = torch.zeros(ref_w.shape[0], device=device)
    sizes = torch.tensor(KAGGLE_CARDINALITIES, device=device)
    atol, rtol = TOL[dtype]
    for _ in range(2):
        u = torch.rand(2048, len(KAGGLE_CARDINALITIES), device=device)
        ids = ((u**4) * sizes).long().clamp(max=sizes - 1)  # skewed toward small ids: many repeats
        out = tbe(ids)
        ref = reference.embedding_tbe(ref_w, tbe.table_offsets, ids)
        torch.testing.assert_close(out.float(), ref, atol=atol, rtol=rtol)
        grad = torch.randn_like(ref).to(dtype).float()  # the values the kernel sees, for the reference too
        out.backward(grad.to(dtype))
        ref_w.grad = None
        ref.backward(grad)
        _reference_update(ref_w, ref_state, optimizer, lr, eps)
        with torch.no_grad():
            touched = ref_w.grad.abs().sum(1) != 0
            # A hot row sums up to B gradients, in another order than index_add_: bound that rounding
            # (n·eps·Σ|g| per element, Higham's γ_n) on top of the dtype's tolerance.
            abs_sum = torch.zeros_like(ref_w).index_add_(
                0, (ids + tbe.table_offsets[:-1]).flatten(), grad.abs().flatten(0, 1)
            )
            count = torch.zeros(ref_w.shape[0], device=device).index_add_(
                0, (ids + tbe.table_offsets[:-1]).flatten(), torch.ones(ids.numel(), device=device)
            )
            sum_err = lr * count[:, None] * torch.finfo(torch.float32).eps * abs_sum
            if optimizer == "sgd atomic":  # each add also rounds the weight (|w| + lr·Σ|g| at most)
                sum_err += count[:, None] * torch.finfo(torch.float32).eps * (ref_w.abs() + lr * abs_sum)
            if optimizer.startswith("sgd"):
                err = (tbe.weight.float() - ref_w).abs()[touched]
                bound = (atol + rtol * ref_w.abs() + sum_err)[touched]
                assert (err <= bound).all(), f"worst excess {(err - bound).max().item():.3g}"
            else:  # row-wise Adagrad divides by the root of the row's summed squares: no such growth
                torch.testing.assert_close(tbe.weight[touched].float(), ref_w[touched], atol=atol, rtol=rtol)
            ref_w.copy_(tbe.weight.float())  # keep the reference on the kernel's rounded weights


@pytest.mark.parametrize("keys", ["i32", "i64"])
def test_kernels_compile_for_h100(keys):
    """The five kernels through Triton's real compiler for sm_90 (no GPU needed): the interpreter runs
    Python and checks less (it let a plain-int global in a kernel through; the compiler refuses those)."""
    from lecture_code.ptx import compile_for_gpu

    int64_ptrs = (
        "table_offsets_ptr",
        "flat_ptr",
        "indices_ptr",
        "offsets_ptr",
        "bag_of_entry_ptr",
        "order_ptr",
    )
    types = {n: "*i64" for n in int64_ptrs} | {"rows_ptr": f"*{keys}", "sorted_rows_ptr": f"*{keys}"}
    types |= {"flags_ptr": "*i32", "eps": "fp32"}
    builds = [
        (tbe_module._tbe_fwd_kernel, {"FIXED_BAG": False, "MEAN": True, "BLOCK_BAGS": 16, "BLOCK_D": 16}, 1),
        (tbe_module._tbe_rows_kernel, {"FIXED_BAG": False, "BLOCK": 1024}, 4),
        (tbe_module._tbe_block_update_kernel,
         {"FIXED_BAG": False, "MEAN": True, "ADAGRAD": True, "BLOCK_P": 64, "BLOCK_D": 16}, 4),
        (tbe_module._tbe_cross_block_update_kernel,
         {"ADAGRAD": True, "BLOCK_P": 64, "HEADS": 32, "BLOCK_D": 16}, 1),
        (tbe_module._tbe_atomic_sgd_kernel,
         {"FIXED_BAG": False, "MEAN": True, "BLOCK": 128, "BLOCK_D": 16}, 4),
    ]  # fmt: skip
    for kernel, constexprs, warps in builds:
        names = [n for n in kernel.arg_names if n not in constexprs]  # other pointers fp32, scalars i32
        signature = {n: types.get(n, "*fp32" if n.endswith("_ptr") else "i32") for n in names}
        asm = compile_for_gpu(kernel, signature, constexprs, num_warps=warps)
        assert ".target sm_90" in asm["ptx"], kernel
