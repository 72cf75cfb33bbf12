"""Finding 2 of notebook 02: what each id → row hash costs as the vocabulary grows."""

from __future__ import annotations

from lecture_code.results.section import Headline, Section, Table, num
from lecture_code.results.sources import ResultFile


def build(result: ResultFile) -> Section:
    rows = result.rows
    vocabularies = sorted({int(r["vocabulary"]) for r in rows})
    hashes = list(dict.fromkeys(r["hash"] for r in rows))
    ms = {(r["hash"], int(r["vocabulary"])): float(r["ms"]) for r in rows}
    batch = rows[0]["batch"]
    table = Table(
        f"ms per call on a batch of {batch} ids, by vocabulary size",
        ["hash", *[f"{v:,}" for v in vocabularies]],
        [[h, *[num(ms.get((h, v))) for v in vocabularies]] for h in hashes],
    )
    lo, hi = vocabularies[0], vocabularies[-1]
    number = "; ".join(f"{h} {num(ms.get((h, lo)))} → {num(ms.get((h, hi)))} ms" for h in hashes)
    return Section(
        workload="hashing",
        title="Id → row hashing (notebook 02, finding 2)",
        command="python -m benchmarks.bench_hashing",
        what="One call of each hash on a batch of raw ids, median device time, as the vocabulary grows. "
        "The naive index hash compares every id with every vocabulary entry (O(B·V)); the others do not.",
        result=result,
        tables=[table],
        headlines=[Headline(f"id → row hash, B = {batch}, vocabulary {lo:,} → {hi:,}", number)],
    )
