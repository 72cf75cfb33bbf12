"""``python -m lecture_code.lora``: the DLRM adaptation case study; prints the report, optionally saves it.

    python -m lecture_code.lora                          # this machine's preset (tiny on a CPU)
    python -m lecture_code.lora --save                   # also benchmarks/results/lora_adaptation/*.json
    python -m lecture_code.lora --finetune-steps 400 --out run.json

The JSON sidecar holds the report and a stamp (device, torch, triton, date, command); notebook 07 reads
the GPU one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from lecture_code import bench
from lecture_code.environment import device as default_device
from lecture_code.lora.dlrm_adaptation import AdaptationConfig, run_adaptation
from lecture_code.paths import RESULTS_DIR

RESULTS_FOLDER = RESULTS_DIR / "lora_adaptation"


def sidecar_path(stamp: dict[str, str], folder: Path = RESULTS_FOLDER) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", stamp["device"]).strip("-").lower()
    return folder / f"dlrm_adaptation_{slug}_{stamp['date'][:10]}.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lecture_code.lora", description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrain-steps", type=int, help="override the preset's pretraining steps")
    p.add_argument("--finetune-steps", type=int, help="override the preset's fine-tuning steps")
    p.add_argument("--save", action="store_true", help=f"write the JSON sidecar under {RESULTS_FOLDER.name}/")
    p.add_argument("--out", type=Path, help="write the JSON sidecar to this path")
    args = p.parse_args(argv)
    device = default_device()
    if device.type != "cuda":
        bench.setup(device)  # one thread: on a busy 2-core machine, OpenMP contention dominates
    overrides = {
        k: v
        for k, v in (("pretrain_steps", args.pretrain_steps), ("finetune_steps", args.finetune_steps))
        if v is not None
    }
    report = run_adaptation(AdaptationConfig.for_device(device, **overrides), device)
    print(report.summary())
    for row in report.paths:
        print(f"  {row['module']:<20} {row['K']:>4} -> {row['N']:<4} {row['kernel']}  {row['why'] or ''}")
    stamp = {**bench.stamp(device), "command": " ".join(["python -m lecture_code.lora", *sys.argv[1:]])}
    for path in filter(None, [args.out, sidecar_path(stamp) if args.save else None]):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stamp": stamp, "report": report.to_dict()}, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
