"""Preprocessing (the data pipeline): raw Criteo TSV → parquet + vocabularies, end to end, on a CPU."""

from __future__ import annotations

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num
from lecture_code.results.sources import ResultFile

COLUMNS = {
    "rows": "rows",
    "rows_per_s": "rows/s (wall)",
    "rows_per_cpu_s": "rows per CPU-s",
    "peak_rss_mb": "peak RSS MB",
    "rss_after_imports_mb": "RSS after imports MB",
    "distinct_ids": "distinct ids",
    "load_average_1min": "load average (1 min)",
}


def build(result: ResultFile) -> Section:
    rows = sorted(result.rows, key=lambda r: int(r["rows"]))
    table = Table(
        "One run per file length (the fastest of the repeats), a fresh process each",
        list(COLUMNS.values()),
        [
            [num(r[c]) if c not in ("rows", "distinct_ids") else f"{int(r[c]):,}" for c in COLUMNS]
            for r in rows
        ],
    )
    by_rows = {int(r["rows"]): float(r["rows_per_s"]) for r in rows}
    goals = []
    for goal in goals_for("preprocess"):
        n = int(goal.key.split()[0])
        value = by_rows.get(n)
        goals.append(
            GoalCheck(goal, value, NOT_MEASURED if value is None else f"{num(value)} rows/s at {n:,} rows")
        )
    speeds = ", ".join(f"{int(r['rows']):,} rows {num(float(r['rows_per_s']))} rows/s" for r in rows)
    peaks = ", ".join(f"{num(float(r['peak_rss_mb']))} MB" for r in rows)
    return Section(
        workload="preprocess",
        title="Preprocessing: raw TSV → parquet + vocabularies (the data pipeline)",
        command="python -m benchmarks.bench_preprocess",
        what="Synthetic Criteo files of two lengths, preprocessed end to end (read → parse → vocabularies → "
        "parquet) in a fresh process; wall time, CPU time, peak resident memory.",
        result=result,
        tables=[table],
        goals=goals,
        headlines=[
            Headline(
                "preprocessing, raw TSV → parquet + vocabularies, end to end", f"{speeds}; peak RSS {peaks}"
            )
        ],
    )
