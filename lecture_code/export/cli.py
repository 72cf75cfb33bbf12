"""Command line for :mod:`lecture_code.export`: build the DLRM, export it, validate it, show it.

    python -m lecture_code.export --out data/dlrm.onnx [--checkpoint ckpt.pt] [--open] [--screenshot x.png]

``--screenshot x.png`` also writes ``x_crop.png``: the interaction and the top MLP at 1:1, where the labels
can be read (the whole graph is thousands of pixels wide), outlined in red on ``x.png``; each PNG gets a
sidecar ``.json`` with the command that remakes it. ``--crop-op`` / ``--crop-ranks-above`` choose the crop,
``--no-crop`` skips it.

Without a checkpoint the model is the default data's
DLRM with fresh weights; with one, its weights and the preset/interaction/hashing/data it was trained with.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lecture_code.export.onnx_export import export_onnx, summarize_onnx, validate_onnx

__all__ = ["build_dlrm_for_export", "main"]


def _random_inputs(meta, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense log1p-like ``[B, N]``; raw ids ``[B, F]``: 70 % in the vocabulary, 20 % unseen, 10 % missing."""
    num_dense = len(getattr(meta, "dense", ())) or 13
    dense = torch.log1p(torch.rand(batch, num_dense, generator=generator) * 1000)
    columns = []
    for vocab in meta.vocabularies:
        vocab = torch.as_tensor(np.asarray(vocab), dtype=torch.int64)
        unseen = torch.randint(0, 1 << 32, (batch,), generator=generator)
        picked = (
            vocab[torch.randint(0, vocab.numel(), (batch,), generator=generator)] if vocab.numel() else unseen
        )
        kind = torch.rand(batch, generator=generator)
        columns.append(
            torch.where(kind < 0.7, picked, torch.where(kind < 0.9, unseen, torch.full_like(unseen, -1)))
        )
    return dense, torch.stack(columns, dim=1)


def build_dlrm_for_export(
    data_dir: str | None = None,
    checkpoint: str | None = None,
    preset: str | None = None,
    interaction: str | None = None,
    hashing: str | None = None,
):
    """The DLRM the CLI exports, built from a data folder's metadata; returns ``(model, metadata)``.

    ``checkpoint``: a ``lecture_code.training`` checkpoint (a ``torch.save`` dict whose ``"model"`` holds the
    state dict and whose ``"config"`` records preset, interaction, hashing and data folder). Its config
    fills in every argument left ``None``; without a checkpoint the defaults are the default data, preset
    ``small``, interaction ``dot``, hashing ``vocabulary``, and the weights are freshly initialized.
    """
    from lecture_code.data.default_data import ensure_default_data
    from lecture_code.data.metadata import load_metadata
    from lecture_code.model import DLRM

    state = torch.load(checkpoint, map_location="cpu", weights_only=True) if checkpoint else {}
    trained = state.get("config") or {}
    data_dir = data_dir or trained.get("data_dir")
    meta = load_metadata(Path(data_dir) if data_dir else ensure_default_data())
    model = DLRM.from_metadata(
        meta,
        preset=preset or trained.get("preset", "small"),
        interaction=interaction or trained.get("interaction", "dot"),
        hashing=hashing or trained.get("hashing", "vocabulary"),
    )
    if checkpoint:
        model.load_state_dict(state["model"] if "model" in state else state)
    return model.eval(), meta


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lecture_code.export",
        description="Export the DLRM to ONNX, validate it against PyTorch, and optionally view it in Netron.",
    )
    parser.add_argument("--out", default="data/dlrm.onnx", help="ONNX file to write (default: %(default)s)")
    parser.add_argument(
        "--data", default=None, help="preprocessed data directory (default: the generated sample)"
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="lecture_code.training checkpoint: the weights, and the preset/interaction/hashing/data it used",
    )
    parser.add_argument("--preset", default=None, choices=("small", "kaggle"), help="default: small")
    parser.add_argument("--interaction", default=None, choices=("dot", "outer"), help="default: dot")
    parser.add_argument(
        "--hashing", default=None, choices=("vocabulary", "index", "modulus"), help="default: vocabulary"
    )
    parser.add_argument("--output", default="probability", choices=("probability", "logits"))
    parser.add_argument("--exporter", default="auto", choices=("auto", "dynamo", "torchscript"))
    parser.add_argument(
        "--open", action="store_true", help="serve the file with Netron and wait (Ctrl+C stops)"
    )
    parser.add_argument(
        "--screenshot", default=None, help="also render the graph to this PNG (headless Chromium)"
    )
    parser.add_argument(
        "--crop-op",
        default="MatMul",
        help="with --screenshot: crop from the topmost node of this operator type down to the outputs "
        "(default: %(default)s, the interaction's batched product)",
    )
    parser.add_argument(
        "--crop-ranks-above",
        type=int,
        default=2,
        help="layout ranks above the --crop-op node to include (default: %(default)s: the Concat and "
        "Transpose that feed the interaction)",
    )
    parser.add_argument("--no-crop", action="store_true", help="with --screenshot: no crop")
    args = parser.parse_args(argv)

    model, meta = build_dlrm_for_export(
        args.data, args.checkpoint, args.preset, args.interaction, args.hashing
    )
    generator = torch.Generator().manual_seed(0)
    dynamo = {"auto": None, "dynamo": True, "torchscript": False}[args.exporter]
    path = export_onnx(model, _random_inputs(meta, 8, generator), args.out, output=args.output, dynamo=dynamo)
    report = validate_onnx(path, model, lambda b: _random_inputs(meta, b, generator))
    print(summarize_onnx(path))
    print(
        f"onnxruntime vs torch: max abs error {report['max_abs_err']:.2e} over batches "
        f"{[t['batch_size'] for t in report['trials']]}"
    )
    if args.screenshot:
        from lecture_code.export.netron import screenshot_netron, write_sidecar

        crop_op = None if args.no_crop else args.crop_op
        shot = screenshot_netron(
            path, args.screenshot, crop_op=crop_op, crop_ranks_above=args.crop_ranks_above
        )
        command = " ".join(["python -m lecture_code.export", *(argv if argv is not None else sys.argv[1:])])
        cfg = model.config
        extra = {
            "onnx_file": Path(path).name,
            "model": f"DLRM bottom {cfg.dense_arch_layer_sizes}, top {cfg.over_arch_layer_sizes}, "
            f"D {cfg.embedding_dim}, {cfg.interaction} interaction, {cfg.hashing} hash, {args.output} output",
            "weights": Path(args.checkpoint).name if args.checkpoint else "untrained (random init)",
            "exporter": report["exporter"],
            "onnx_nodes": summarize_onnx(path).nodes,
            "netron_nodes_drawn": shot["nodes"],
            "graph_px": list(shot["graph_px"]),
            "chromium": shot["chromium"],
        }
        crop = shot.get("crop")
        if crop:
            extra["crop"] = {
                "png": crop["png"].name,
                "op": crop_op,
                "ranks_above": args.crop_ranks_above,
                "box_px": crop["box"],
                "nodes": crop["nodes"],
            }
        sidecar = write_sidecar(shot["png"], command, extra)
        print(f"wrote {shot['png']} ({shot['nodes']} nodes drawn) and {sidecar}")
        if crop:
            crop_extra = {**extra, "crop_of": Path(shot["png"]).name, "ops_in_crop": crop["ops"]}
            crop_extra.pop("crop")
            crop_sidecar = write_sidecar(crop["png"], command, crop_extra)
            print(f"wrote {crop['png']} ({crop['nodes']} nodes: {crop_op} and below) and {crop_sidecar}")
    if args.open:
        import time

        from lecture_code.export.netron import open_in_netron

        _, stop = open_in_netron(path)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            stop()
