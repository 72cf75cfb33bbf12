"""The deck's ``:::`` lines: what a slide takes from the repository instead of typing it.

A line of ``slides/deck.md`` that starts with ``:::`` is replaced by HTML made from the repository:

- ``::: code PATH NAME [nodoc]``: the definition ``NAME`` cut from ``PATH`` (:mod:`.extract`), highlighted,
  with its file and lines under it; ``nodoc`` leaves the docstring out.
- ``::: figure PATH [optional]``: a committed picture (``PATH`` may be a glob: the last match), captioned with
  the device, date and command its JSON sidecar records. ``optional``: a missing picture is a "not measured
  yet" note instead of an error.
- ``::: results WORKLOAD table[=N] | goals | plot``: a table, the goal checks or the plot of RESULTS.md's
  section for ``WORKLOAD`` (:mod:`lecture_code.results`: the same numbers, read from the same CSV). With no
  result file yet: "not measured yet" and the command that measures it. A table read from the back of a room
  has at most :data:`MAX_COLUMNS` columns: ``columns="shape,pass,ours"`` picks some (by header, or a header's
  unique beginning), ``rows=1-6`` / ``rows=7-`` spreads the rows over slides (of the goals too); a column
  that says "not measured" in every row is left out.
- ``::: sidecar NAME``: the measured rows of ``perf_screenshots/NAME.json``, as the README states them.

Every picture a slide shows is listed in :attr:`Context.images` (repository path → name in the build), so the
builder copies exactly those.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from lecture_code.results.page import sections
from lecture_code.results.screenshots import EXPERIMENTS, screenshot_headlines
from lecture_code.results.section import NOT_MEASURED, Section, Table
from lecture_code.slides.extract import extract

__all__ = ["MAX_COLUMNS", "NOT_MEASURED_YET", "Context", "expand", "fill", "slide_table"]

NOT_MEASURED_YET = "not measured yet"
MAX_COLUMNS = 6  # more do not fit 1152 px at the deck's table size
_CODE_AREA_PX = 500  # the height a code block may take on a 720 px slide, under a title
_CODE_WIDTH_PX = 1120  # its width (monospace: about 0.6 em per character)
# the room a picture has under a title (width, height): with its caption under it, or beside it (deck.css)
_PICTURE_AREA_PX = ((1168, 506), (864, 573))


@dataclass
class Context:
    """What the directives read from: the repository root, and what they collect while expanding."""

    root: Path
    images: dict[str, str] = field(default_factory=dict)  # repository path → file name in the build
    blocks_made: list[str] = field(default_factory=list)
    _sections: list[Section] | None = None

    def sections(self, workload: str) -> list[Section]:
        if self._sections is None:
            self._sections = sections(self.root / "benchmarks" / "results", self.root)
        return [s for s in self._sections if s.workload == workload]

    def image(self, path: str) -> str:
        name = self.images.setdefault(path, path.replace("/", "__"))
        return f"img/{name}"


def _inline(text: str) -> str:
    """Escaped text with `code` spans (the results tables write file and column names that way)."""
    parts = re.split(r"`([^`]+)`", text)
    return "".join(
        html.escape(p) if i % 2 == 0 else f"<code>{html.escape(p)}</code>" for i, p in enumerate(parts)
    )


def _column(headers: list[str], name: str) -> int:
    """The index of the header ``name`` names: the header itself, or the one header that begins with it."""
    wanted = name.strip().casefold()
    exact = [i for i, h in enumerate(headers) if h.casefold() == wanted]
    begins = [i for i, h in enumerate(headers) if h.casefold().startswith(wanted)]
    if exact or len(begins) == 1:
        return (exact or begins)[0]
    which = "matches no header" if not begins else f"begins {len(begins)} headers"
    raise LookupError(f"column {name!r} {which} of {headers}")


def _rows(spec: str, count: int) -> slice:
    """``"3"``, ``"1-6"`` or ``"7-"`` (1-based, inclusive) as a slice of ``count`` rows."""
    first, dash, last = spec.partition("-")
    start = int(first) - 1
    stop = (int(last) if last else count) if dash else start + 1
    if not 0 <= start < stop <= count:
        raise ValueError(f"rows={spec}: the table has {count} rows")
    return slice(start, stop)


def slide_table(table: Table, columns: str | None = None, rows: str | None = None) -> Table:
    """``table`` cut to fit a slide: the ``columns`` named (comma-separated), the ``rows`` range, and no
    column that is "not measured" in every row kept.
    """
    keep = (
        [_column(table.headers, c) for c in columns.split(",")]
        if columns
        else list(range(len(table.headers)))
    )
    body = table.rows[_rows(rows, len(table.rows))] if rows else table.rows
    keep = [i for i in keep if not body or any(r[i] != NOT_MEASURED for r in body)]
    if len(keep) > MAX_COLUMNS:
        raise ValueError(
            f"{len(keep)} columns do not fit a slide ({MAX_COLUMNS} at most): choose with columns=… "
            f"among {table.headers}"
        )
    return Table(table.caption, [table.headers[i] for i in keep], [[r[i] for i in keep] for r in body])


def _table(table: Table, verdict_column: int | None = None) -> str:
    head = "".join(f"<th>{_inline(h)}</th>" for h in table.headers)
    body = []
    for row in table.rows:
        cells = []
        for i, cell in enumerate(row):
            if i == verdict_column:
                cls = f' class="verdict {cell.replace(" ", "-")}"'
            else:  # a number (with its range or unit) stays on one line
                cls = ' class="num"' if len(cell) <= 24 and re.match(r"[-+−]?\d", cell) else ""
            cells.append(f"<td{cls}>{_inline(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = f"<caption>{_inline(table.caption)}</caption>" if table.caption else ""
    rows = "".join(body)
    return f'<table class="numbers">{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _pending(what: str) -> str:
    return f'<p class="pending"><strong>{NOT_MEASURED_YET}</strong>: {what}</p>'


def _code(ctx: Context, args: list[str]) -> str:
    path, name, *flags = args
    excerpt = extract(path, name, ctx.root, docstring="nodoc" not in flags)
    lines = excerpt.code.splitlines()
    # px: a first guess that fits the whole definition (deck.js shrinks it further where it must)
    size = min(20.0, _CODE_AREA_PX / (1.3 * len(lines)), _CODE_WIDTH_PX / (0.6 * max(map(len, lines))))
    body = highlight(excerpt.code, PythonLexer(), HtmlFormatter(cssclass="code", nowrap=False))
    return (
        f'<figure class="excerpt" style="font-size:{max(size, 8.0):.1f}px">{body}'
        f"<figcaption><code>{html.escape(excerpt.name)}</code> from <code>{html.escape(excerpt.where)}</code>"
        "</figcaption></figure>"
    )


def _stamp_caption(stamp: dict) -> str:
    """The device and the date that made a picture or a result: what a reader in the room needs. The file
    and the command behind it are the HTML's hover text (``title``) and the "Reproduce it" slide's."""
    parts = [stamp.get("device"), str(stamp.get("date", ""))[:10] or None]
    return " · ".join(html.escape(str(p)) for p in parts if p)


def _provenance(path: str, command: str | None = None) -> str:
    """A ``title`` attribute naming the file (and the command that made it): shown on hover, not printed."""
    text = path + (f" ({command})" if command else "")
    return f' title="{html.escape(text)}"'


def _picture(ctx: Context, path: str, caption: str, title: str = "") -> str:
    """The picture as large as the slide allows: its caption under a wide one, beside a tall one."""
    from PIL import Image

    with Image.open(ctx.root / path) as image:
        aspect = image.width / image.height
    (under_w, under_h), (beside_w, beside_h) = _PICTURE_AREA_PX
    beside = min(beside_w / aspect, beside_h) > min(under_w / aspect, under_h)
    img = f'<img src="{ctx.image(path)}" alt="{html.escape(path)}">'
    kind = "picture beside" if beside else "picture"
    return f'<figure class="{kind}"{title}>{img}<figcaption>{caption}</figcaption></figure>'


def _figure(ctx: Context, args: list[str]) -> str:
    pattern, *flags = args
    matches = sorted(p.relative_to(ctx.root).as_posix() for p in ctx.root.glob(pattern))
    if not matches:
        if "optional" in flags:
            return _pending(f"no <code>{html.escape(pattern)}</code> in this checkout yet")
        raise FileNotFoundError(f"a slide shows {pattern}, which does not exist under {ctx.root}")
    path = matches[-1]
    sidecar = (ctx.root / path).with_suffix(".json")
    if not sidecar.exists():  # no stamp to show: the file's name is the only provenance there is
        return _picture(ctx, path, f"<code>{html.escape(path)}</code>")
    meta = json.loads(sidecar.read_text(encoding="utf-8"))
    return _picture(ctx, path, _stamp_caption(meta), _provenance(path, meta.get("command")))


def _results(ctx: Context, args: list[str]) -> str:
    workload, part, *options = args
    known = {"columns", "rows"} if part.startswith("table") else {"rows"} if part == "goals" else set()
    opts = dict(o.partition("=")[::2] for o in options)
    if set(opts) - known:
        raise ValueError(
            f"::: results {workload} {part}: options {sorted(opts)} (a table takes columns and rows, the "
            "goals rows)"
        )
    found = ctx.sections(workload)
    measured = [s for s in found if s.result is not None]
    if not measured:
        command = found[0].command if found else "its benchmark"
        return _pending(
            f"no result under <code>benchmarks/results/{html.escape(workload)}/</code> yet. Run "
            f"<code>{html.escape(command)}</code> on a GPU, then <code>make results slides</code>."
        )
    # one device per slide: the newest GPU result when there is one (the lecture is about GPU speed, and
    # the notebooks read the newest result file too)
    on_gpu = [s for s in measured if not s.result.device.startswith("CPU")]
    section = max(on_gpu, key=lambda s: s.result.stamp.get("date", "")) if on_gpu else measured[0]
    title = _provenance(section.result.path.as_posix())
    source = f'<p class="source"{title}>{_stamp_caption(section.result.stamp)}</p>'
    if part.startswith("table"):
        index = int(part.partition("=")[2] or 0)
        table = slide_table(section.tables[index], opts.get("columns"), opts.get("rows"))
        return _table(table) + source
    if part == "goals":
        rows = [[g.goal.text, g.reached, g.verdict] for g in section.goals]
        rows = rows[_rows(opts["rows"], len(rows))] if "rows" in opts else rows
        return _table(Table("", ["goal", "reached", "verdict"], rows), verdict_column=2) + source
    if part == "plot":
        if section.result.plot is None:
            return _pending(
                f"no plot was saved with <code>{html.escape(section.result.path.as_posix())}</code>"
            )
        path = section.result.plot.as_posix()
        return _picture(ctx, path, _stamp_caption(section.result.stamp), _provenance(path))
    raise ValueError(
        f"::: results {workload} {part}: the part is table[=N] [columns=…] [rows=…], goals or plot"
    )


def _sidecar(ctx: Context, args: list[str]) -> str:
    (name,) = args
    if name not in EXPERIMENTS:
        raise LookupError(f"perf_screenshots sidecar {name!r} is not one of {sorted(EXPERIMENTS)}")
    for headline, sidecar, _ in screenshot_headlines(ctx.root / "perf_screenshots"):
        if headline.what == EXPERIMENTS[name]:
            items = "".join(f"<li>{_inline(part)}</li>" for part in headline.number.split("; "))
            title = _provenance(f"perf_screenshots/{name}.json", sidecar.get("command"))
            return f'<ul class="measured">{items}</ul><p class="source"{title}>{_stamp_caption(sidecar)}</p>'
    return _pending(f"no <code>perf_screenshots/{html.escape(name)}.json</code> yet")


_KINDS = {"code": _code, "figure": _figure, "results": _results, "sidecar": _sidecar}


def expand(markdown: str, ctx: Context) -> tuple[str, dict[str, str]]:
    """``markdown`` with every ``:::`` line replaced by a placeholder paragraph, and placeholder → HTML.

    The HTML goes in after Markdown has run (:func:`fill`), so code and tables pass through untouched.
    """
    out, blocks = [], {}
    for line in markdown.splitlines():
        if not line.startswith(":::"):
            out.append(line)
            continue
        kind, *args = shlex.split(line[3:])
        if kind not in _KINDS:
            raise ValueError(f"unknown slide directive {line!r} (known: {', '.join(_KINDS)})")
        token = f"SLIDEBLOCK{len(ctx.blocks_made) + len(blocks)}X"
        blocks[token] = _KINDS[kind](ctx, args)
        out += ["", token, ""]
    ctx.blocks_made += list(blocks)
    return "\n".join(out), blocks


def fill(rendered: str, blocks: dict[str, str]) -> str:
    """Markdown's HTML with each placeholder paragraph replaced by its block."""
    for token, block in blocks.items():
        if f"<p>{token}</p>" not in rendered:
            raise ValueError(f"a ::: line was not a paragraph of its own ({token})")
        rendered = rendered.replace(f"<p>{token}</p>", block)
    return rendered
