"""Tables and sentences for notebook 02, built from measured rows and sidecars.

The notebook's prose must hold on a CPU run and on a GPU run, and must not cite a number no cell printed. So
where a conclusion depends on the numbers (is a difference larger than the run-to-run spread? is the GPU
busy most of the step?), a function here states it from the numbers, and the notebook prints it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lecture_code.paths import RESULTS_DIR

__all__ = [
    "all_features_sentences",
    "copy_reference_gbps",
    "csv_vs_sidecar",
    "fmt_ms",
    "hash_growth",
    "kaggle_sentences",
    "latest_result",
    "profiler_cost_sentence",
    "profiler_cost_table",
    "run_to_run",
    "spread_table",
    "stage_sentences",
    "versus",
]


def fmt_ms(x: float) -> str:
    return f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms" if x >= 0.1 else f"{1e3 * x:.1f} µs"


def _range(row: dict) -> str:
    return f"{fmt_ms(row['ms_min'])}–{fmt_ms(row['ms_max'])}"


def spread_table(rows: Sequence[dict], extra: Sequence[str] = ()) -> pd.DataFrame:
    """Median, min, max over the repeats and their spread (``(max - min) / median``), one row per label."""
    df = pd.DataFrame(list(rows)).set_index("label")
    df = df.rename(columns={"peak_step_mb": "peak_step_mib"})  # sidecars written before the rename
    out = df[["ms_per_step", "ms_min", "ms_max"]].rename(
        columns={"ms_per_step": "median ms", "ms_min": "min ms", "ms_max": "max ms"}
    )
    out["spread %"] = (100 * (out["max ms"] - out["min ms"]) / out["median ms"]).round(1)
    for column in extra:
        out[column] = df[column]
    return out


def versus(a: dict, b: dict) -> str:
    """How row ``a`` compares with row ``b``: medians, the difference, and whether it exceeds the spread."""
    diff = 100 * (a["ms_per_step"] / b["ms_per_step"] - 1)
    overlap = a["ms_min"] <= b["ms_max"] and b["ms_min"] <= a["ms_max"]
    verdict = (
        "their repeats overlap, so the difference is within the run-to-run spread"
        if overlap
        else "no repeat of one reaches the other: the difference is larger than the spread"
    )
    return (
        f"{a['label']}: {fmt_ms(a['ms_per_step'])} ({_range(a)}) vs {b['label']}: "
        f"{fmt_ms(b['ms_per_step'])} ({_range(b)}), {diff:+.0f}%; {verdict}."
    )


def run_to_run(live: dict, committed: dict, live_device: str, committed_device: str) -> str:
    """This notebook's measurement against the committed one of the same configuration."""
    if live_device != committed_device:
        return (
            f"This run ({live_device}) and the committed one ({committed_device}) ran on different machines: "
            f"not comparable."
        )
    same = (live["steps"], live["repeats"]) == (committed["steps"], committed["repeats"])
    how = "same settings" if same else "different steps/repeats"
    diff = 100 * (live["ms_per_step"] / committed["ms_per_step"] - 1)
    return (
        f"Same machine type, {how}, two processes: this run {fmt_ms(live['ms_per_step'])} ({_range(live)}), "
        f"the committed run {fmt_ms(committed['ms_per_step'])} ({_range(committed)}): {diff:+.0f}% apart. "
        f"Within one process the interleaved repeats spread by "
        f"{100 * (live['ms_max'] - live['ms_min']) / live['ms_per_step']:.0f}% and "
        f"{100 * (committed['ms_max'] - committed['ms_min']) / committed['ms_per_step']:.0f}%."
    )


def profiler_cost_table(unprofiled: dict, light: dict, heavy: dict) -> pd.DataFrame:
    """Step time, GPU busy time and GPU idle share without the profiler, with a light and a detailed one."""
    busy = light["gpu_busy_ms"]
    rows = [
        ("no profiler (timed loop)", unprofiled["ms_per_step"], busy, unprofiled["gpu_idle_estimate"]),
        ("light profile", light["step_ms"], busy, light["gpu_idle_fraction"]),
        (
            "detailed profile (shapes, memory, stacks)",
            heavy["step_ms"],
            heavy["gpu_busy_ms"],
            heavy["gpu_idle_fraction"],
        ),
    ]
    df = pd.DataFrame(rows, columns=["measured with", "step ms", "GPU busy ms", "GPU idle %"]).set_index(
        "measured with"
    )
    df["GPU idle %"] = (100 * df["GPU idle %"].astype(float)).round(0)
    return df.round(3)


def profiler_cost_sentence(unprofiled: dict, light: dict, heavy: dict) -> str:
    """What the profiler does to the step and to the GPU's idle share, from the numbers."""
    wall, lt, hv = unprofiled["ms_per_step"], light["step_ms"], heavy["step_ms"]
    stretch = (
        f"With the detailed profile a step takes {fmt_ms(hv)} ({hv / wall:.2f}x the unprofiled "
        f"{fmt_ms(wall)}), with the light one {fmt_ms(lt)} ({lt / wall:.2f}x)."
    )
    if light["gpu_busy_ms"] is None:
        return stretch + " No GPU here: nothing to say about GPU idle time (see the committed GPU run)."
    return (
        f"{stretch} The GPU's work hardly changes ({fmt_ms(light['gpu_busy_ms'])} per step in the light "
        f"profile, {fmt_ms(heavy['gpu_busy_ms'])} in the detailed one), so the idle share follows the host: "
        f"{100 * heavy['gpu_idle_fraction']:.0f}% under the detailed profile, "
        f"{100 * light['gpu_idle_fraction']:.0f}% under the light one, and an estimated "
        f"{100 * unprofiled['gpu_idle_estimate']:.0f}% without a profiler."
    )


def stage_sentences(rows: Sequence[dict]) -> list[str]:
    """Finding 3: each stage against the one before it, and the two modulus stages against the lookup."""
    out = [versus(b, a) for a, b in zip(rows, rows[1:], strict=False)]
    by = {r["label"]: r for r in rows}
    lookup = by.get("vocabulary lookup (searchsorted)")
    batched = by.get("modulus hash, all features at once")
    if lookup and batched:
        out.append(versus(batched, lookup))
    return out


# --- finding 2: hashes ------------------------------------------------------------------------------------


def latest_result(folder: str) -> Path | None:
    """The newest CSV under ``benchmarks/results/<folder>/`` by the date its name ends in, or ``None``."""
    found = sorted((RESULTS_DIR / folder).glob("*.csv"), key=lambda p: (p.stem[-10:], p.name))
    return found[-1] if found else None


def hash_growth(rows: Sequence[dict]) -> pd.DataFrame:
    """Per hash: time at the smallest and largest vocabulary, and the growth per 10x of V (geometric mean)."""
    out = []
    for name, g in pd.DataFrame(list(rows)).groupby("hash", sort=False):
        g = g.sort_values("vocabulary")
        v0, v1, t0, t1 = g["vocabulary"].iloc[0], g["vocabulary"].iloc[-1], g["ms"].iloc[0], g["ms"].iloc[-1]
        per_decade = (t1 / t0) ** (1 / math.log10(v1 / v0))
        out.append(
            {"hash": name, "V from": v0, "V to": v1, "ms from": t0, "ms to": t1, "x per 10x V": per_decade}
        )
    return pd.DataFrame(out).set_index("hash").round(4)


def csv_vs_sidecar(csv_path: Path, rows: Sequence[dict]) -> pd.DataFrame:
    """The sidecar's hash timings beside the benchmark CSV's, matched on (hash, vocabulary, batch)."""
    keys = ["hash", "vocabulary", "batch"]
    csv = pd.read_csv(csv_path)[[*keys, "ms"]].rename(columns={"ms": "CSV ms"})
    side = pd.DataFrame(list(rows))[[*keys, "ms"]].rename(columns={"ms": "sidecar ms"})
    both = side.merge(csv, on=keys)
    both["sidecar / CSV"] = (both["sidecar ms"] / both["CSV ms"]).round(2)
    return both.set_index(keys)


def all_features_sentences(rows: Sequence[dict]) -> list[str]:
    """One module per feature against one batched module, for each hash: ops, device time, host time."""
    by = {r["hash"]: r for r in rows}
    out = []
    for kind in ("modulus", "vocabulary"):
        each, batched = by[f"{kind}, one module per feature"], by[f"{kind}, all features at once"]
        text = (
            f"{kind}: one module per feature runs {each['aten_ops']} ATen ops per call, all features at once "
            f"{batched['aten_ops']} ({each['aten_ops'] / batched['aten_ops']:.0f}x fewer); "
            f"device time per call {fmt_ms(each['ms'])} → {fmt_ms(batched['ms'])}"
        )
        if each.get("launches") is not None and batched.get("launches") is not None:
            text += f"; kernel launches per call {each['launches']} → {batched['launches']}"
        if each.get("host_us") is not None and batched.get("host_us") is not None:
            text += f"; host time per call {each['host_us']:.0f} → {batched['host_us']:.0f} µs"
        out.append(text + ".")
    return out


# --- the Kaggle tables ------------------------------------------------------------------------------------


def copy_reference_gbps() -> tuple[float, str, Path] | None:
    """The largest fp32 ``y.copy_(x)`` rate in the newest pointwise benchmark CSV, its device, the CSV."""
    path = latest_result("pointwise")
    if path is None:
        return None
    df = pd.read_csv(path)
    fp32 = df[df["dtype"] == "fp32"]
    biggest = fp32.loc[(fp32["rows"] * fp32["cols"]).idxmax()]
    return float(biggest["copy GB/s"]), str(biggest["device"]), path


def kaggle_sentences(rows: Sequence[dict], copy_gbps: float | None, passes: int) -> list[str]:
    """The two table sizes compared: GPU busy share, top kernels, and the bytes Adam must move per step."""
    out = []
    for r in rows:
        busy, wall = r["gpu_busy_ms"], r["ms_per_step"]
        top = ", ".join(f"{k['name']} ({k['share_pct']:.0f}%)" for k in r["top"][:3])
        if busy is None:
            out.append(
                f"{r['label']}: {r['embedding_mb']:,.0f} MiB of embeddings, {fmt_ms(wall)} per step (no GPU)."
            )
            continue
        out.append(
            f"{r['label']}: {r['embedding_mb']:,.0f} MiB of embeddings; the GPU works {fmt_ms(busy)} of a "
            f"{fmt_ms(wall)} step ({100 * busy / wall:.0f}%). Top GPU events: {top}."
        )
    big = rows[-1]
    moved_gb = passes * big["embedding_mb"] * 2**20 / 1e9
    mb = big["embedding_mb"]
    line = f"Adam over dense gradients moves at least {passes} x {mb:,.0f} MiB = {moved_gb:.1f} GB"
    bound_ms = None
    if copy_gbps:
        bound_ms = moved_gb / copy_gbps * 1e3
        line += (
            f" per step: at least {fmt_ms(bound_ms)} at the measured copy bandwidth ({copy_gbps:,.0f} GB/s)"
        )
    out.append(line + ".")
    busy = big["gpu_busy_ms"]
    if busy is not None:
        share = busy / big["ms_per_step"]
        if share >= 0.6:
            verdict = (
                f"With the Kaggle tables the GPU is busy {100 * share:.0f}% of the step: not launch-bound."
            )
            if bound_ms:
                verdict += (
                    f" That minimum traffic alone is {100 * bound_ms / busy:.0f}% of the GPU's busy time."
                )
        else:
            verdict = f"Even with the Kaggle tables the GPU idles {100 * (1 - share):.0f}% of the step."
        out.append(verdict)
    return out
