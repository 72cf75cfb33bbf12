"""The case study of notebook 07: a trained DLRM adapted with LoRA to a day whose click signal moved."""

from __future__ import annotations

from lecture_code.results.section import Headline, Section, Table, num
from lecture_code.results.sources import ResultFile


def build(result: ResultFile) -> Section:
    report = result.rows[0]["report"]
    config = report["config"]
    table = Table(
        f"After {config['finetune_steps']} fine-tuning steps, per backend (holdout AUC; ms per step)",
        ["backend", "AUC on the shifted day", "AUC on day 0", "ms / step"],
        [
            [r["backend"], num(r["auc_shifted"]), num(r["auc_day0"]), num(r["step_ms"])]
            for r in report["runs"]
        ],
    )
    share = 100 * report["trainable"] / report["total"]
    before = num(report["auc_shifted_before"])
    after = ", ".join(f"{num(r['auc_shifted'])} ({r['backend']})" for r in report["runs"])
    return Section(
        workload="lora_adaptation",
        title="LoRA fine-tuning of a trained DLRM on a shifted day (notebook 07)",
        command=result.stamp.get("command", "python -m lecture_code.lora --save"),
        what=f"A `{config['preset']}` DLRM pretrained on day 0, then rank-{config['r']} adapters on "
        f"{', '.join(config['targets'])} trained on a later synthetic day whose click signal moved; "
        f"{report['trainable']:,} of {report['total']:,} parameters train ({num(share)}%). AUC on the "
        f"shifted day before fine-tuning: {before}; the day-0 model on day 0: "
        f"{num(report['auc_day0_pretrained'])}.",
        result=result,
        tables=[table],
        headlines=[
            Headline(
                "LoRA fine-tuning of a trained DLRM on a shifted synthetic day",
                f"shifted-day holdout AUC {before} → {after} after {config['finetune_steps']} steps, "
                f"{num(share)}% of the parameters trainable",
            )
        ],
    )
