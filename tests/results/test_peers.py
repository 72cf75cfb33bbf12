"""The public peers the LoRA benchmarks time (NeMo's Triton LoRA, vLLM's shrink/expand) from their own files.

Without the fetched files (``python -m benchmarks.fetch_peers``, git-ignored ``build/peers/``) each benchmark
says why its peer row is missing instead of crashing; the fetch step's extraction and patching run on a
made-up wheel. Where the files are there, both peers run at tiny shapes (in the Triton interpreter on a CPU,
on the GPU where there is one) against the reference, each kernel's launches counted (so the peer's Triton
path ran, not a torch fallback); those tests skip, saying so, where the files are absent (a CI machine), and
fail where they are there but do not run.
"""

from __future__ import annotations

import sys
import zipfile

import pytest
import torch

from benchmarks import bench_lora, bench_multi_lora, fetch_peers, peer_nemo, peer_vllm, peers
from kernels import reference, runtime
from lecture_code.results.workloads.lora import PUBLIC_KERNELS


def test_the_nemo_row_is_named_as_the_results_page_reads_it():
    assert bench_lora.NEMO in PUBLIC_KERNELS


def test_a_missing_folder_is_a_reason_naming_the_fetch_step(tmp_path):
    for load, peer in ((peer_nemo.load, peers.NEMO), (peer_vllm.load, peers.VLLM)):
        got, why = load(tmp_path / "absent")
        assert got is None
        assert why.startswith(f"{peer.name}=={peer.version} not fetched (no folder at ")
        assert why.endswith("run `python -m benchmarks.fetch_peers`)")


def test_a_partial_or_unpatched_folder_is_a_reason(tmp_path):
    (tmp_path / peers.NEMO.kernels[0]).parent.mkdir(parents=True)
    (tmp_path / peers.NEMO.kernels[0]).write_text("x")
    absent = f"{len(peers.NEMO.files) - 1} file(s) missing, e.g. {peers.NEMO.kernels[1]}"
    assert absent in peers.NEMO.missing(tmp_path)
    for f in peers.NEMO.files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(peers.NEMO.patches[0].new)
    assert peers.NEMO.missing(tmp_path) is None
    (tmp_path / peers.NEMO.patches[0].file).write_text(peers.NEMO.patches[0].old)
    assert "fetched unpatched (run `python -m benchmarks.fetch_peers --force`)" in peers.NEMO.missing(
        tmp_path
    )


def test_the_benchmarks_say_why_a_peer_is_missing(monkeypatch):
    monkeypatch.setattr(peer_nemo, "load", lambda: (None, "not fetched here"))
    monkeypatch.setattr(bench_lora, "_peft_layer", lambda *args: None)  # importing peft: seconds
    w, a, b = torch.randn(16, 16), torch.randn(4, 16), torch.randn(16, 4)
    fns, skipped = bench_lora.providers(w, a, b, 4, compile_=False)
    assert bench_lora.NEMO not in fns and "v3" in fns
    assert skipped == ["NeMo's fused Triton LoRA: not fetched here"]

    monkeypatch.setattr(peer_vllm, "installed_or_fetched", lambda: (None, "not fetched here"))
    x, y, a, b, ids = _multi_lora_inputs(torch.float16)
    fns, skipped = bench_multi_lora.providers(y, x, a, b, ids, (y.shape[1],), x.device)
    assert not any(name.startswith("vllm") for name in fns) and "vllm: not fetched here" in skipped


def _multi_lora_inputs(dtype, T=5, L=2, r=4, K=16):
    """x, y, one slice's A and B stacks, adapter ids (one −1), on the kernels' device."""
    device = runtime.default_device()
    x, y = (torch.randn(T, K, device=device).to(dtype) for _ in range(2))
    a, b = [torch.randn(L, r, K, device=device).to(dtype)], [torch.randn(L, K, r, device=device).to(dtype)]
    return x, y, a, b, torch.arange(T, device=device) % (L + 1) - 1


class _NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(y):
        return y.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, dy):
        raise RuntimeError("no backward here")


def test_a_peer_that_fails_or_answers_wrong_is_left_out_with_its_reason(monkeypatch):
    def eager(w, r):
        return lambda x, a, b: reference.lora_linear(x, w, a, b, bench_lora.ALPHA / r)

    def peer_only(peer):
        return lambda w, a, b, r, compile_: ({"eager": eager(w, r), bench_lora.NEMO: peer(w, r)}, [])

    device = runtime.default_device()
    zeros = peer_only(lambda w, r: lambda x, a, b: torch.zeros(8, 16, device=x.device))
    monkeypatch.setattr(bench_lora, "providers", zeros)
    rows, why = bench_lora.run_shape(8, 16, 16, 4, torch.float32, device, False)
    assert {r["provider"] for r in rows} == {bench_lora.BASE, "eager", bench_lora.SMALL}  # M = 8: small runs
    assert why == [
        "8x16x16 r4: NeMo's fused Triton LoRA: relative error 1 against the fp32 reference: not timed"
    ]
    no_backward = peer_only(lambda w, r: lambda x, a, b: _NoBackward.apply(eager(w, r)(x, a, b)))
    monkeypatch.setattr(bench_lora, "providers", no_backward)
    rows, why = bench_lora.run_shape(8, 16, 16, 4, torch.float32, device, False)
    assert [r["pass"] for r in rows if r["provider"] == bench_lora.NEMO] == ["fwd"]
    assert why == ["8x16x16 r4 fwd+bwd: NeMo's fused Triton LoRA: RuntimeError: no backward here"]

    monkeypatch.setattr(bench_multi_lora, "_vllm_provider", lambda *args: (lambda y: 1 / 0, None))
    x, y, a, b, ids = _multi_lora_inputs(torch.float32)
    fns, skipped = bench_multi_lora.providers(y, x, a, b, ids, (y.shape[1],), x.device)
    assert "vllm" not in fns and "vllm: ZeroDivisionError: division by zero" in skipped


def _wheel(tmp_path, peer: peers.Peer, patched_file_text: str) -> None:
    with zipfile.ZipFile(tmp_path / f"{peer.name}-{peer.version}-py3-none-any.whl", "w") as zf:
        for f in peer.files:
            zf.writestr(f, patched_file_text if any(p.file == f for p in peer.patches) else f"# {f}\n")


def test_fetch_extracts_only_the_listed_files_patched_and_leaves_a_fetched_peer_alone(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(peers, "PEERS_DIR", tmp_path / "peers")
    patch = peers.NEMO.patches[0]
    _wheel(tmp_path, peers.NEMO, f"before\n{patch.old}\nafter\n")
    fetch_peers.fetch(peers.NEMO, tmp_path, force=False)
    got = sorted(
        p.relative_to(peers.NEMO.folder).as_posix() for p in peers.NEMO.folder.rglob("*") if p.is_file()
    )
    assert got == sorted(peers.NEMO.files)
    assert (peers.NEMO.folder / patch.file).read_text() == f"before\n{patch.new}\nafter\n"
    assert peers.NEMO.missing() is None and f"patched {patch.file}" in capsys.readouterr().out
    fetch_peers.fetch(peers.NEMO, tmp_path, force=False)  # no download, no extraction: it is all there
    assert "already in" in capsys.readouterr().out
    _wheel(tmp_path, peers.NEMO, "the line the patch expects is gone\n")
    with pytest.raises(ValueError, match="occurs 0 times, not once: the patch is stale"):
        fetch_peers.fetch(peers.NEMO, tmp_path, force=True)


class _Launches:
    """A Triton kernel (``kernel[grid](...)``) that counts its launches."""

    def __init__(self, kernel):
        self.kernel, self.count = kernel, 0

    def __getitem__(self, grid):
        self.count += 1
        return self.kernel[grid]


def _needs(peer: peers.Peer) -> None:
    why = peer.missing()
    if why is not None:
        pytest.skip(why)


def test_nemo_runs_its_triton_kernels_forward_and_backward(monkeypatch):
    _needs(peers.NEMO)
    lora, why = peer_nemo.load()
    assert lora is not None, why  # fetched but not loadable: a failure, not a skip
    launches = {}
    for name in ("lora_forward_kernel", "lora_da_dx_kernel", "lora_db_kernel"):
        launches[name] = _Launches(getattr(lora.kernels, name))
        monkeypatch.setattr(lora.kernels, name, launches[name])
    g, device = torch.Generator().manual_seed(0), runtime.default_device()  # CPU: the interpreter
    M, K, N, r = 24, 32, 48, 8
    shapes = ((M, K), (N, K), (r, K), (N, r), (M, N))
    x, w, a, b, dy = (torch.randn(*s, generator=g).to(device) for s in shapes)
    layer = peer_nemo.layer(lora, w, a, b, bench_lora.ALPHA)
    xg = x.clone().requires_grad_()
    y = layer(xg)
    got = torch.autograd.grad(y, (xg, layer.lora_A.weight, layer.lora_B.weight), dy)
    assert {name: n.count for name, n in launches.items()} == dict.fromkeys(launches, 1)
    assert not any(m.split(".")[0] == "nemo_automodel" for m in sys.modules)  # nothing half-imported left
    x64, a64, b64 = (t.double().requires_grad_() for t in (x, a, b))
    want_y = reference.lora_linear(x64, w.double(), a64, b64, bench_lora.ALPHA / r)
    want = torch.autograd.grad(want_y, (x64, a64, b64), dy.double())
    tolerance = 1e-5 if device.type == "cpu" else 5e-3  # fp32 tl.dot: exact in the interpreter, TF32 on a GPU
    for name, g_, w_ in zip(("y", "dX", "dA", "dB"), (y, *got), (want_y, *want), strict=True):
        err = ((g_.double() - w_).norm() / w_.norm()).item()
        assert err < tolerance, f"{name}: relative error {err:.3g}"


def test_vllm_runs_its_shrink_and_expand_on_two_slices():
    _needs(peers.VLLM)
    ops, why = peer_vllm.load()
    assert ops is not None, why
    assert ops.lora_shrink is torch.ops.vllm.lora_shrink  # vLLM's op, registered as vLLM registers it
    g, device = torch.Generator().manual_seed(0), runtime.default_device()  # CPU: the interpreter
    T, L, r, K, widths = 9, 3, 16, 32, (32, 16)  # fp16: the interpreter's bf16 tl.dot is wrong (triton 3.9)
    x = torch.randn(T, K, generator=g).half().to(device)
    a = [(torch.randn(L, r, K, generator=g) / K**0.5).half().to(device) for _ in widths]
    b = [(torch.randn(L, n, r, generator=g) / r**0.5).half().to(device) for n in widths]
    y0 = torch.randn(T, sum(widths), generator=g).half().to(device)
    ids = torch.tensor([0, -1, 2, 2, 1, 0, -1, 1, 2], device=device)
    shrink, expand = _Launches(ops.shrink._lora_shrink_kernel), _Launches(ops.expand._lora_expand_kernel)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ops.shrink, "_lora_shrink_kernel", shrink)
        mp.setattr(ops.expand, "_lora_expand_kernel", expand)
        y = peer_vllm.add_lora(ops, x, a, b, ids, 2.0)(y0.clone())
    assert (shrink.count, expand.count) == (1, 1)
    assert not any(m.split(".")[0] == "vllm" for m in sys.modules)
    want = reference.multi_lora(
        y0.double(), x.double(), [t.double() for t in a], [t.double() for t in b], ids, 2.0
    )
    err = ((y.double() - want).norm() / (want - y0.double()).norm()).item()
    assert err < 5e-3, f"relative error {err:.3g}"
    assert torch.equal(y[ids == -1], y0[ids == -1])  # tokens without an adapter: untouched


@pytest.mark.gpu
def test_both_peers_have_eager_and_graph_rows_on_the_gpu():
    _needs(peers.NEMO)
    _needs(peers.VLLM)
    cuda = torch.device("cuda")
    rows, skipped = bench_lora.run_shape(64, 64, 64, 16, torch.bfloat16, cuda, False, graphs=True)
    got = {(r["pass"], r["provider"]) for r in rows}
    for pass_ in ("fwd", "fwd+bwd"):
        assert {(pass_, bench_lora.NEMO), (pass_, bench_lora.NEMO + bench_lora.GRAPH)} <= got, skipped
    rows, skipped = bench_multi_lora.run_shape(16, 4, 16, (64, 32), 64, torch.bfloat16, cuda, {})
    assert {"vllm", "vllm (graph)"} <= {r["provider"] for r in rows}, skipped
