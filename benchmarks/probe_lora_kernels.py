"""Where the time of the fused LoRA linear goes, kernel by kernel: each launch of v2 and v3
(``kernels.lora.gemm.lowrank_gemm``) beside the cuBLAS products it replaces or adds, each timed alone.

Per shape (the goals' 8192×4096×4096 at r 16 and 64 on a GPU, bf16; tiny fp32 sizes in the interpreter):

- forward: ``x Wᵀ`` (cuBLAS: the floor), ``x Aᵀ`` (cuBLAS: v2's shrink pass), the GEMM with the expand in
  its epilogue and s·t given (v2's launch), the GEMM whose producer programs also compute s·t (v3's launch);
- backward: ``dY W`` (cuBLAS: the floor), the dX GEMM with s·u given (v2's launch), the dX GEMM whose
  producers compute s·u (and dB where ``producers_take_d``: v3's launch), ``dA = (s·u)ᵀ x`` and
  ``dB = dYᵀ (s·t)`` (cuBLAS passes).

Each launch's output is checked against torch first (a wrong one is a row with its reason); ``vs floor`` is a
launch's time over its cuBLAS GEMM's − 1: what fusing the LoRA terms into the GEMM costs, term by term. What
``kernels/lora/linear.py``'s "where the rest goes" is to cite (``benchmarks/results/lora_kernels/``).

    python -m benchmarks.probe_lora_kernels            # GPU: bf16; CSV under benchmarks/results/
    python -m benchmarks.probe_lora_kernels --quick    # CPU: tiny sizes, the interpreter
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import bench_lora, sweeps
from kernels.lora.gemm import lowrank_gemm, producers_take_d
from kernels.lora.linear import backward_config, forward_config
from lecture_code import bench as bu

SHAPES = [(8192, 4096, 4096, 16), (8192, 4096, 4096, 64)]  # M, K, N, r
QUICK = [(64, 64, 48, 16)]
SCALE = 2.0


def launches(x, w, a, b, dy):
    """(pass, name, fn, floor name or None, want or None): what each row times, and the torch answer its
    launch is checked against."""
    ts = torch.mm(x, a.t()).mul_(SCALE)  # s·t as v2 makes it (rounded, then scaled)
    us = torch.mm(dy, b).mul_(SCALE)  # s·u likewise
    cf2 = forward_config("v2", x, w, b, False)
    cf3 = forward_config("v3", x, w, b, False)
    cb2 = backward_config(dy, w, b, mode="epilogue")
    cb3 = backward_config(dy, w, b, mode="fused")
    take_d = producers_take_d(b.shape[1])
    y_want = (x.float() @ w.float().t() + ts.float() @ b.float().t()).to(x.dtype)
    dx_want = (dy.float() @ w.float() + us.float() @ a.float()).to(x.dtype)
    base_f, base_b = "x Wᵀ (cuBLAS)", "dY W (cuBLAS)"
    return [
        ("fwd", base_f, lambda: F.linear(x, w), None, None),
        ("fwd", "x Aᵀ (cuBLAS, v2's shrink pass)", lambda: torch.mm(x, a.t()), None, None),
        ("fwd", "GEMM + expand, s·t given (v2)",
         lambda: lowrank_gemm(x, w, True, a.t(), b.t(), SCALE, cf2, t=ts)[0], base_f, y_want),
        ("fwd", "GEMM + expand, s·t by producers (v3)",
         lambda: lowrank_gemm(x, w, True, a.t(), b.t(), SCALE, cf3)[0], base_f, y_want),
        ("bwd", base_b, lambda: dy @ w, None, None),
        ("bwd", "dX GEMM + s·u A, s·u given (v2)",
         lambda: lowrank_gemm(dy, w, False, b, a, SCALE, cb2, t=us)[0], base_b, dx_want),
        ("bwd", "dX GEMM + s·u A, s·u" + (" and dB" if take_d else "") + " by producers (v3)",
         lambda: lowrank_gemm(dy, w, False, b, a, SCALE, cb3, **({"g": ts} if take_d else {}))[0],
         base_b, dx_want),
        ("bwd", "dA = (s·u)ᵀ x (cuBLAS)", lambda: us.t() @ x, None, None),
        ("bwd", "dB = dYᵀ (s·t) (cuBLAS)", lambda: dy.t() @ ts, None, None),
    ]  # fmt: skip


def run_shape(M, K, N, r, dtype, device, quick: bool) -> list[dict]:
    """One row per launch: device µs (median, L2 flushed), its time over its cuBLAS floor, or its reason."""
    x, w, a, b, dy = bench_lora.inputs(M, K, N, r, dtype, device)
    rows, times = [], {}
    for pass_, name, fn, floor, want in launches(x, w, a, b, dy):
        row = {"shape": f"{M}x{K}x{N} r{r}", "pass": pass_, "launch": name}
        try:
            if want is not None:
                err = ((fn().float() - want.float()).norm() / want.float().norm()).item()
                if not err < 2e-2:
                    raise AssertionError(f"relative error {err:.3g} against torch")
            times[name] = us = 1e3 * bu.median_ms(fn, device)
            vs = 100 * (us / times[floor] - 1) if floor in times else None
            rows.append({**row, "us": us, "vs floor %": vs, "why": ""})
        except Exception as e:  # noqa: BLE001 — a launch that cannot run here: its reason, the others timed
            rows.append({**row, "us": None, "vs floor %": None, "why": sweeps.reason(e)})
    return rows


def report(rows: list[dict], top: int) -> None:
    for shape in dict.fromkeys(r["shape"] for r in rows):
        print(f"{shape}: device µs per launch (median, L2 flushed)")
        bu.print_table([r for r in rows if r["shape"] == shape], ["pass", "launch", "us", "vs floor %"])


def main(argv=None) -> None:
    sweeps.main(
        __doc__, run_shape, SHAPES, QUICK, "lora_kernels", report, top=0, argv=argv, name="lora_kernels"
    )


if __name__ == "__main__":
    main()
