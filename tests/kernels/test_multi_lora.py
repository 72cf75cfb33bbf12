"""add_multi_lora (fused and shrink/expand paths) and its metadata against a float64 per-token reference."""

from __future__ import annotations

import pytest
import torch

import kernels.multi_lora.shrink_expand as ml
from kernels import reference, runtime
from kernels.configs import BranchConfig
from kernels.multi_lora.metadata import build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora, multi_lora_rule

# (dtype, tol). Checked elementwise as |got - want| ≤ tol · (max|want| + |want|) against float64: the kernels
# sum x Aᵀ in fp32, round s·t to the dtype once, add t Bᵀ to y in fp32 and round y once.
DTYPES = [
    pytest.param(torch.float32, 2e-5, id="fp32"),  # fp32 (ieee dots): summation order only
    pytest.param(torch.float16, 4e-3, id="fp16"),  # a few fp16 ulps (2^-10): s·t and y rounded
    pytest.param(torch.bfloat16, 3e-2, id="bf16", marks=pytest.mark.gpu),  # the same in bf16 (2^-7)
]
PATHS = ["fused", "split", "one_launch"]
# name: (T, K, slice widths, r, L, ids: "mixed" | "none" | "one" | "sparse", scale: "float" | "tensor")
CASES = {
    "odd": (33, 40, (24,), 5, 3, "mixed", "float"),  # T past a 16/32-row tile, r = 5 padded to 16
    "slices": (17, 24, (8, 20, 12), 3, 4, "mixed", "tensor"),  # Q, K, V of unequal widths
    "all-minus-one": (9, 16, (16,), 4, 2, "none", "float"),
    "one-adapter": (33, 24, (12, 8), 8, 3, "one", "tensor"),  # every token on adapter 2 of 3
    "zero-token-adapters": (20, 16, (16,), 16, 8, "sparse", "tensor"),  # adapters 1-4, 6 get no tokens
    "r64": (5, 32, (16,), 64, 2, "mixed", "float"),
    "one-token": (1, 16, (8,), 1, 1, "one", "float"),
    "32-adapters-odd-K": (12, 129, (33,), 8, 32, "mixed", "tensor"),  # K = 129: a masked last K step
    "r128": (16, 32, (16,), 128, 8, "mixed", "float"),  # the largest rank (split path by default)
}


def _ids(kind: str, T: int, L: int, device) -> torch.Tensor:
    if kind == "none":
        return torch.full((T,), -1, device=device, dtype=torch.int64)
    if kind == "one":
        return torch.full((T,), L - 1, device=device, dtype=torch.int32)
    if kind == "sparse":
        pool = torch.tensor([-1, 0, 5, 7], device=device)
        return pool[torch.randint(0, 4, (T,), device=device)]
    ids = torch.randint(-1, L, (T,), device=device)  # unsorted, with −1s
    ids[0] = -1  # at least one untouched row
    return ids


def _inputs(T, K, widths, r, L, ids_kind, scale_kind, dtype, device=None):
    device = device or runtime.default_device()
    x = torch.randn(T, K, device=device).to(dtype)
    y = torch.randn(T, sum(widths), device=device).to(dtype)  # a base output: fresh values, never zeros
    a = [(torch.randn(L, r, K, device=device) / K**0.5).to(dtype) for _ in widths]
    b = [(torch.randn(L, n, r, device=device) / r**0.5).to(dtype) for n in widths]
    if len(widths) == 1:
        a, b = a[0], b[0]
    scale = torch.rand(L, device=device) + 0.25 if scale_kind == "tensor" else 0.75
    return y, x, a, b, _ids(ids_kind, T, L, device), scale


def _double(t):
    if isinstance(t, float):
        return t
    if isinstance(t, torch.Tensor):
        return t.double()
    return [s.double() for s in t]


def _check(y, x, a, b, ids, scale, tol, **kw):
    """add_multi_lora on a copy of y against the float64 reference; rows with −1 must be bit-identical."""
    want = reference.multi_lora(y.double(), x.double(), _double(a), _double(b), ids, _double(scale))
    got = y.clone()
    out = add_multi_lora(got, x, a, b, ids, scale, **kw)
    assert out is got, "add_multi_lora must work in place and return y"
    untouched = ids < 0
    assert torch.equal(got[untouched], y[untouched]), "rows with id −1 changed"
    assert torch.isfinite(got).all(), "non-finite values (read of an unwritten buffer?)"
    err = (got.double() - want).abs()
    bound = tol * (want.abs().max() + want.abs())
    assert (err <= bound).all(), f"max error {err.max().item():.3g}, bound {bound.min().item():.3g}"
    return got


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_matches_reference(case, path, dtype, tol, seed, poison_empty):
    _check(*_inputs(*CASES[case], dtype), tol, path=path)


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("dtype, tol", DTYPES[:2])
def test_split_k_and_split_n(deterministic, dtype, tol, seed, poison_empty):
    # Several tiles per adapter and tiles of different adapters side by side; split-K = 3 chunks summed in
    # order (deterministic) or atomically; the fused kernel with its output tiles shared by 2 programs.
    args = _inputs(45, 48, (40, 24), 6, 3, "mixed", "tensor", dtype)
    small = BranchConfig(block_m=16, block_n=16, block_k=16)
    configs = {"shrink": BranchConfig(16, 16, 16, 3, 4, 1), "expand": small}
    _check(*args, tol, path="split", deterministic=deterministic, configs=configs)
    # split-N = 4 over 16-column tiles: programs 2 and 3 of the 24-wide slice have no tile and exit
    _check(*args, tol, path="fused", configs={"fused": BranchConfig(16, 16, 16, 4, 4, 1)})
    # one launch: 3 K chunks × 3 groups of 16 columns (2 for the 24-wide slice: its third group exits);
    # the last chunk of each group sums the partials (unwritten slots would be NaN: poison_empty)
    _check(*args, tol, path="one_launch", configs={"one_launch": BranchConfig(16, 16, 16, 3, 4, 1)})


def test_deterministic_mode_is_bitwise_reproducible(seed):
    y, x, a, b, ids, scale = _inputs(40, 64, (32,), 7, 3, "mixed", "float", torch.float32)
    configs = {"shrink": BranchConfig(16, 16, 16, 4, 4, 1)}
    runs = [add_multi_lora(y.clone(), x, a, b, ids, scale, path="split", configs=configs) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    fused = [add_multi_lora(y.clone(), x, a, b, ids, scale, path="fused") for _ in range(2)]
    assert torch.equal(fused[0], fused[1])
    configs = {"one_launch": BranchConfig(16, 16, 16, 4, 4, 1)}
    one = [
        add_multi_lora(y.clone(), x, a, b, ids, scale, path="one_launch", configs=configs) for _ in range(2)
    ]
    assert torch.equal(one[0], one[1])


def test_strided_inputs_and_meta_reuse(seed):
    # x a column slice, y a column slice of a wider tensor (its other columns untouched); one meta for two
    # layers of different widths, as a model step would reuse it.
    device = runtime.default_device()
    T, K, L, r = 21, 24, 3, 4
    ids = _ids("mixed", T, L, device)
    meta = build_meta(ids, L)
    wide_x = torch.randn(T, 2 * K, device=device)
    x = wide_x[:, 1::2]
    for N in (16, 40):
        wide_y = torch.randn(T, N + 8, device=device)
        before = wide_y.clone()
        y = wide_y[:, 3 : 3 + N]
        a = torch.randn(L, r, K, device=device)
        b = torch.randn(L, N, r, device=device)
        want = reference.multi_lora(y.double(), x.double(), a.double(), b.double(), ids, 0.5)
        add_multi_lora(y, x, a, b, ids, 0.5, meta=meta)
        assert torch.equal(wide_y[:, :3], before[:, :3]) and torch.equal(
            wide_y[:, 3 + N :], before[:, 3 + N :]
        )
        assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", DTYPES[:2])
def test_slices_as_unaligned_views(dtype, tol, seed, poison_empty):
    # Slices cut out of wider stacks at odd offsets (pointers and strides not 16-byte multiples: the slice
    # table's unaligned variant), in ascending and then reversed order.
    device = runtime.default_device()
    T, K, L, r = 19, 24, 3, 5
    big_a = (torch.randn(L, 3 * r + 1, K + 1, device=device) / K**0.5).to(dtype)
    big_b = (torch.randn(L, 41, r + 1, device=device) / r**0.5).to(dtype)
    a = [big_a[:, 1 + i * r : 1 + (i + 1) * r, 1:] for i in range(3)]
    b = [big_b[:, 1:9, 1:], big_b[:, 9:30, :r], big_b[:, 30:41, 1:]]
    y = torch.randn(T, 8 + 21 + 11, device=device).to(dtype)
    ids = _ids("mixed", T, L, device)
    table, sliced = ml._slice_table(list(zip(a, b, strict=True)), device)
    assert sliced == 1 and table.shape == (3, 10)
    _check(y, x := torch.randn(T, K, device=device).to(dtype), a, b, ids, 0.5, tol)
    _check(y, x, a[::-1], [b[2], b[1], b[0]], ids, 0.5, tol, path="split")


@pytest.mark.parametrize(
    "T, L, dtype",
    [(50, 5, torch.int64), (1, 1, torch.int32), (700, 3, torch.int32), (2500, 40, torch.int64),
     (17, 200, torch.int32)],
    ids=["one-block", "one-token", "blocks-of-512", "40-adapters", "more-adapters-than-tokens"],
)  # fmt: skip
def test_meta(T, L, dtype, seed):
    # Against torch's stable sort and bincount; 700 and 2500 tokens take the two-launch path (several blocks).
    device = runtime.default_device()
    wide = torch.randint(-1, L, (T, 2), device=device, dtype=dtype)
    ids = wide[:, 1]  # strided ids
    ids[0] = -1
    meta = build_meta(ids, L)
    counts = torch.bincount(ids[ids >= 0], minlength=L)
    assert meta.counts.tolist() == counts.tolist()
    assert meta.starts.tolist() == [0, *torch.cumsum(counts, 0).tolist()]
    order = torch.sort(torch.where(ids >= 0, ids, L), stable=True).indices
    assert meta.sorted_tokens.tolist() == order.tolist()  # grouped, ascending token order within an adapter
    active = [i for i in range(L) if counts[i] > 0]
    assert meta.num_active.item() == len(active)
    assert meta.active.tolist() == active + [i for i in range(L) if counts[i] == 0]


def test_meta_bad_ids_and_empty_batch():
    device = runtime.default_device()
    ids = torch.tensor([0, 2**32 + 1, -7, 3, 1, -1], device=device)  # 2³² + 1 is not adapter 1
    loose = build_meta(ids, 3, validate=False)  # out-of-range ids never reach an adapter
    assert loose.counts.tolist() == [1, 1, 0]
    assert loose.sorted_tokens.tolist() == [0, 4, 1, 2, 3, 5]
    with pytest.raises(ValueError, match=r"adapter_ids\[1\] = 4294967297 is out of range"):
        build_meta(ids, 3, validate=True)
    empty = build_meta(torch.zeros(0, dtype=torch.int32, device=device), 3)
    assert empty.counts.tolist() == [0, 0, 0] and empty.starts.tolist() == [0] * 4
    assert empty.active.tolist() == [0, 1, 2] and empty.num_active.item() == 0


def test_bad_inputs(monkeypatch):
    monkeypatch.setenv("FUSED_KERNELS_DEBUG", "1")  # the id check on CUDA tensors (a host sync)
    device = runtime.default_device()
    y, x, a, b, ids, scale = _inputs(6, 16, (8,), 4, 3, "mixed", "float", torch.float32, device)
    bad_ids = ids.clone()
    bad_ids[1] = 3
    cases = [
        ((y, x, a, b, bad_ids, scale), ValueError, r"adapter_ids\[1\] = 3 is out of range.*\[0, 3\)"),
        ((y, x, a, b[:, :, :3], ids, scale), ValueError, "mismatched ranks.*r = 4.*r = 3"),
        ((y, x[:, :8], a, b, ids, scale), ValueError, "lora_a has K = 16 but x has K = 8"),
        ((y, x, a, b, ids.float(), scale), TypeError, "adapter_ids has dtype torch.float32"),
        ((y, x, a, b, ids[:4], scale), ValueError, r"adapter_ids must be a \[T\] = \[6\] tensor"),
        ((y, x.half(), a, b, ids, scale), TypeError, "y has dtype torch.float32 but x has torch.float16"),
        ((y, x, a.double(), b, ids, scale), TypeError, "lora_a has dtype torch.float64, not supported"),
        ((y, x, a, b, ids, torch.ones(2)), ValueError, r"scale tensor must be floating point of shape \[L\]"),
        ((y, x, a, b, ids, "0.5"), TypeError, "scale must be a float or an"),
        ((y[:, :5], x, a, b, ids, scale), ValueError, r"widths \[8\] sum to 8, but y has 5 columns"),
        ((y, x, [a, a], [b[:, :4], b[:, :4, :2]], ids, scale), ValueError, r"mismatched ranks: lora_a\[1\]"),
        ((y, x, a, [b], ids, scale), TypeError, "both be tensors or both be sequences"),
        ((y, x, a[:, :, None], b, ids, scale), ValueError, r"lora_a must be \[L, r, K\]"),
        ((y, x, a[:2], b, ids, scale), ValueError, "same L = 2 adapters"),
        (
            (y, x, [a, a], [b[:, :4], b[:, 4:].transpose(1, 2).contiguous().transpose(1, 2)], ids, scale),
            ValueError,
            "innermost strides",
        ),  # fmt: skip
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            add_multi_lora(*args)
    wide = torch.randn(3, 129, 16, device=device)
    with pytest.raises(ValueError, match=r"rank r = 129 is not supported \(1 ≤ r ≤ 128"):
        add_multi_lora(y, x, wide, torch.randn(3, 8, 129, device=device), ids, scale)
    with pytest.raises(ValueError, match="meta is for 5 tokens"):
        add_multi_lora(y, x, a, b, ids, scale, meta=build_meta(ids[:5], 3))
    with pytest.raises(ValueError, match="path='sgmv' must be"):
        add_multi_lora(y, x, a, b, ids, scale, path="sgmv")


def test_baselines_match_reference(seed):
    y, x, a, b, ids, scale = _inputs(19, 16, (8, 12), 3, 3, "mixed", "tensor", torch.float64, "cpu")
    want = reference.multi_lora(y, x, a, b, ids, scale)
    for baseline in (reference.multi_lora_loop_, reference.multi_lora_gather_bmm_):
        got = baseline(y.clone(), x, a, b, ids, scale)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), baseline.__name__


def test_rule_fills_an_h100(monkeypatch):
    # The GPU rule at the issue's shape (8 adapters, K = N = 4096, r = 16, one slice, 132 SMs). Fused: decode
    # sizes get 16-row tiles and enough N-splits for ≈ 2 programs per SM; large batches need no split.
    # Shrink: 32-row tiles and split-K for ≈ 1 program per SM (the configs the H100 sweep found fastest).
    monkeypatch.setattr(ml, "interpreting", lambda: False)
    decode = multi_lora_rule("fused", 16, 4096, 4096, 16, 1, 8, 132)
    assert decode.block_m == 16 and decode.split == 32  # 8 tiles × 32 N-splits of 128 columns
    big = multi_lora_rule("fused", 16384, 4096, 4096, 16, 1, 8, 132)
    assert big.block_m == 64 and big.split == 2  # 256 row tiles
    shrink = {T: multi_lora_rule("shrink", T, 4096, 4096, 16, 1, 8, 132) for T in (16, 4096, 16384)}
    assert shrink[16].block_m == 32 and shrink[16].block_k == 128
    assert [shrink[T].split for T in (16, 4096, 16384)] == [17, 2, 1]  # 8, 128, 512 tiles
    assert multi_lora_rule("expand", 16, 4096, 4096, 16, 1, 8, 132).block_n == 256
    for T in (1, 16, 256, 4096, 16384):
        for kernel in ("fused", "shrink", "expand"):
            assert multi_lora_rule(kernel, T, 4096, 4096, 128, 3, 32, 132).is_complete()


def test_shrink_split_is_what_launches():
    # The config's split is a request: rounded to whole BLOCK_K steps per chunk, no chunk empty.
    def split_plan(block_k, split):
        return ml.MultiLoRAPlan("split", shrink=BranchConfig(32, 16, block_k, split, 4, 4),
                                expand=BranchConfig(32, 128, 16, 1, 8, 1))  # fmt: skip

    assert ml.shrink_split(split_plan(128, 17), 4096) == (16, 256)  # the H100 rule at T = 16 (see above)
    assert ml.shrink_split(split_plan(128, 1), 4096) == (1, 4096)
    assert ml.shrink_split(split_plan(64, 4), 300) == (3, 128)  # 75 columns asked, 2 steps each
    assert ml.shrink_split(split_plan(64, 99), 129) == (3, 64)  # at most the K steps; a masked last chunk
    for K, block_k, split in ((4096, 128, 17), (300, 64, 4), (129, 64, 99), (16, 16, 4)):
        p = split_plan(block_k, split)
        chunks, k_per = ml.shrink_split(p, K)
        assert k_per % block_k == 0 and (chunks - 1) * k_per < K <= chunks * k_per
        shrink = ml._launches(p, 16, K, (64,), 16, 8, torch.float32, 0, False, True)[0]
        assert (shrink.split, shrink.extra) == (chunks, k_per)
    with pytest.raises(ValueError, match="split"):
        ml.shrink_split(ml.MultiLoRAPlan("fused", fused=BranchConfig(16, 128, 128, 1, 4, 3)), 4096)


def test_plan_is_resolved_once_per_shape():
    ml.forget_plans()
    device = runtime.default_device()
    key = (12, 16, (8,), 4, 3, torch.float32, device, None, False, False, True)
    first = ml._cached(*key)
    assert ml._cached(*key) is first and ml._cached.cache_info().hits == 1
    assert ml.plan(12, 16, (8,), 4, 3, torch.float32, device).path == "split"  # the default, any rank
    assert ml.plan(12, 16, (8,), 4, 3, torch.float32, device, path="fused").path == "fused"


# ---------------------------------------------------------------- GPU only: bf16, full grid, CUDA graphs
GPU_GRID = [
    (T, L, r, widths)
    for T in (1, 4, 16, 33, 128)
    for L in (1, 3, 8, 32)
    for r in (1, 8, 16, 64, 128)
    for widths in ((2049,), (512, 128, 128))
]


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("T, L, r, widths", GPU_GRID)
def test_gpu_bf16_grid(T, L, r, widths, path, seed, poison_empty):
    args = _inputs(
        T, 2049 if len(widths) == 1 else 1024, widths, r, L, "mixed", "tensor", torch.bfloat16, device="cuda"
    )
    assert _check(*args, 3e-2, path=path).is_cuda


@pytest.mark.gpu
@pytest.mark.parametrize("T", [16, 256, 4096, 16384])
def test_gpu_issue_shapes_and_determinism(T, seed):
    args = _inputs(T, 4096, (4096,), 16, 8, "mixed", "float", torch.bfloat16, device="cuda")
    for path in PATHS:
        got = _check(*args, 3e-2, path=path)
        assert got.is_cuda
        again = add_multi_lora(args[0].clone(), *args[1:], path=path)
        assert torch.equal(got, again), f"{path}: not bitwise reproducible"
    _check(*args, 3e-2, path="split", deterministic=False)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
def test_gpu_cuda_graph_capture(path, seed):
    # Metadata and kernels captured once, replayed for a new batch of ids copied into the static buffer.
    y, x, a, b, ids, scale = _inputs(
        64, 512, (256, 128), 16, 4, "mixed", "tensor", torch.bfloat16, device="cuda"
    )
    y_static, ids_static = y.clone(), ids.clone()

    def step():
        meta = build_meta(ids_static, 4)
        add_multi_lora(y_static, x, a, b, ids_static, scale, meta=meta, path=path)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up: compiles, fills the launch and slice-table caches
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    new_ids = _ids("mixed", 64, 4, ids.device)
    ids_static.copy_(new_ids)
    y_static.copy_(y)
    graph.replay()
    torch.cuda.synchronize()
    want = add_multi_lora(y.clone(), x, a, b, new_ids, scale, path=path)
    assert torch.equal(y_static, want)


def _types(kernel, constexprs: dict) -> dict:
    """Triton types of a kernel's runtime arguments: pointers by name, the scale fp32, the rest i32."""
    pointers = {"tbl_ptr": "*i64", "part_ptr": "*fp32", "scale_ptr": "*fp32", "counts_ptr": "*i32"}
    out = {}
    for name in kernel.arg_names:
        if name in constexprs:
            continue
        if name.endswith("_ptr"):
            out[name] = pointers.get(name, "*i32" if name == "sorted_ptr" else "*bf16")
        else:
            out[name] = "fp32" if name == "scale" else "i32"
    return out


@pytest.mark.parametrize("sliced", [0, 1, 2])
def test_kernels_compile_for_h100(sliced):
    # The three kernels through Triton's real compiler for sm_90 (no GPU needed), at the rule's decode and
    # large-batch tiles, unit inner strides specialized as the launcher does: the GPU session finds no
    # compile error. bf16 dots become tensor-core MMAs.
    from lecture_code.ptx import compile_for_gpu, tensor_core_instructions

    unit = {"stride_xk": 1, "stride_yn": 1, "sa_k": 1, "sb_r": 1}
    common = {"SLICED": sliced, "DOT_UPCAST": False, "INPUT_PRECISION": "ieee", "BLOCK_R": 16, "BLOCK_L": 16}
    builds = [
        (ml._fused_kernel, {"SCALE_TENSOR": True, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128}, 4, 3),
        (ml._shrink_kernel, {"ATOMIC": sliced == 1, "BLOCK_M": 64, "BLOCK_K": 64}, 4, 3),
        (ml._expand_kernel, {"SCALE_TENSOR": False, "BLOCK_M": 64, "BLOCK_N": 128}, 8, 2),
    ]
    for kernel, constexprs, warps, stages in builds:
        ce = {k: v for k, v in unit.items() if k in kernel.arg_names} | common | constexprs
        asm = compile_for_gpu(kernel, _types(kernel, ce), ce, num_warps=warps, num_stages=stages)
        assert tensor_core_instructions(asm["ptx"]), f"{kernel.__name__}: no tensor-core MMA"


@pytest.mark.parametrize("path, kernels", [("fused", ["fused"]), ("split", ["shrink", "expand"]),
                                           ("one_launch", ["one_launch"])])  # fmt: skip
def test_each_path_launches_its_kernels_once(path, kernels, monkeypatch, seed):
    launched = []
    for name in ("fused", "shrink", "expand", "one_launch"):
        real = getattr(ml, f"_launch_{name}")

        def spy(*args, name=name, real=real):
            launched.append(name)
            return real(*args)

        monkeypatch.setattr(ml, f"_launch_{name}", spy)
    _check(*_inputs(*CASES["slices"], torch.float32), 2e-5, path=path)
    assert launched == kernels
