"""The deck: code cut from the sources, numbers from the result files ("not measured yet" without one) in
tables narrow enough for a slide, and a build that renders in headless Chromium (slide count, every picture
loaded, nothing past a slide's edge, no text too small to read from the back of a room, a screenshot that is
not blank) and prints to a PDF of one page per slide.

Chromium comes from the system (``make setup-browser`` installs it; ``make test`` runs that first): the
``chromium`` fixture of ``tests/conftest.py``, shared with the Netron render tests; without one the browser
tests are skipped with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from result_csvs import dlrm_rows, write_csv

from lecture_code.paths import REPO_ROOT
from lecture_code.results.section import NOT_MEASURED, Table
from lecture_code.slides import check_deck, extract, print_pdf, render_deck, split_slides
from lecture_code.slides.browser import _ink
from lecture_code.slides.directives import MAX_COLUMNS, NOT_MEASURED_YET, slide_table

DECK = REPO_ROOT / "slides" / "deck.md"


def test_code_is_cut_from_the_file_not_retyped():
    source = (REPO_ROOT / "kernels" / "pointwise" / "bias_relu.py").read_text().splitlines()
    excerpt = extract("kernels/pointwise/bias_relu.py", "_bias_relu_fwd_kernel", REPO_ROOT)
    assert excerpt.code.splitlines() == source[excerpt.first - 1 : excerpt.last]
    assert source[excerpt.first - 1] == "@triton.jit" and "def _bias_relu_fwd_kernel(" in excerpt.code
    method = extract("lecture_code/model/interaction_arch.py", "DotInteraction.forward", REPO_ROOT)
    assert method.code.startswith("def forward(") and '"""' in method.code
    assert '"""' not in extract("kernels/reference.py", "lora_linear", REPO_ROOT, docstring=False).code
    with pytest.raises(LookupError, match="defines no 'no_such_kernel'"):
        extract("kernels/pointwise/bias_relu.py", "no_such_kernel", REPO_ROOT)


def test_every_code_reference_of_the_deck_exists():
    """A renamed function breaks the deck's build: the deck names only definitions that exist."""
    refs = re.findall(r"^::: code (\S+) (\S+)", DECK.read_text(), flags=re.MULTILINE)
    assert len(refs) >= 5
    for path, name in refs:
        assert extract(path, name, REPO_ROOT).code


def test_slides_split_on_separator_lines_only():
    assert split_slides("# a\n---\n## b\ntext --- inline\n---\n\n---\n## c") == [
        "# a",
        "## b\ntext --- inline",
        "## c",
    ]


def _tiny_deck(tmp_path: Path) -> Path:
    style = tmp_path / "style"
    style.mkdir()
    for name in ("deck.css", "deck.js"):
        (style / name).write_text((REPO_ROOT / "slides" / name).read_text())
    deck = style / "deck.md"
    deck.write_text(
        "# Tiny\n---\n## 05\n::: results dlrm_step table columns='implementation,uniform ids ms'\n"
        "---\n## 07\n::: results multi_lora goals\n"
    )
    return deck


def test_sections_without_a_result_say_not_measured_yet_and_fill_in_when_one_lands(tmp_path):
    root = tmp_path / "repo"
    (root / "benchmarks" / "results").mkdir(parents=True)
    deck = _tiny_deck(tmp_path)
    page = render_deck(deck, tmp_path / "out", root).html.read_text()
    assert page.count(NOT_MEASURED_YET) == 2
    assert "python -m benchmarks.bench_dlrm_step" in page and "python -m benchmarks.bench_multi_lora" in page
    rows = dlrm_rows({"eager, sparse grads": 4.61, "fused, CUDA graph": 0.314})
    write_csv(root / "benchmarks" / "results" / "dlrm_step" / "dlrm_step_nvidia_2026-11-24.csv", rows)
    page = render_deck(deck, tmp_path / "out", root).html.read_text()
    assert page.count(NOT_MEASURED_YET) == 1  # multi_lora still has none
    dlrm = page[page.index('id="slide-2"') : page.index('id="slide-3"')]
    assert "0.314" in dlrm and "4.61" in dlrm and "NVIDIA H100 80GB HBM3" in dlrm
    # a newer result from another GPU takes the slide over (the notebooks read the newest file too)
    newer = dlrm_rows({"eager, sparse grads": 4.2, "fused, CUDA graph": 0.301})
    for row in newer:
        row.update(device="NVIDIA H200", date="2026-11-29T06:00:00")
    write_csv(root / "benchmarks" / "results" / "dlrm_step" / "dlrm_step_nvidia-h200_2026-11-29.csv", newer)
    page = render_deck(deck, tmp_path / "out", root).html.read_text()
    dlrm = page[page.index('id="slide-2"') : page.index('id="slide-3"')]
    assert "0.301" in dlrm and "NVIDIA H200 · 2026-11-29" in dlrm and "0.314" not in dlrm


def test_a_slide_table_keeps_the_columns_and_rows_named_and_drops_unmeasured_ones():
    headers = ["shape (M×K×N, rank)", "pass", "ours: best", "v1", "v2", "eager", "torch.compile", "nemo"]
    rows = [[f"s{i}", "fwd", f"+{i}%", "1", "2", "3", "4", NOT_MEASURED] for i in range(5)]
    table = Table("caption", headers, rows)
    picked = slide_table(table, "shape,pass,ours,eager,torch.compile,NeMo", rows="2-3")
    assert picked.headers == ["shape (M×K×N, rank)", "pass", "ours: best", "eager", "torch.compile"]
    assert picked.rows == [["s1", "fwd", "+1%", "3", "4"], ["s2", "fwd", "+2%", "3", "4"]]
    assert picked.caption == "caption" and slide_table(table, "v1", rows="4-").rows == [["1"], ["1"]]
    with pytest.raises(ValueError, match=f"7 columns do not fit a slide \\({MAX_COLUMNS} at most\\)"):
        slide_table(table)  # the unmeasured column is dropped, seven are left
    with pytest.raises(LookupError, match="'v' begins 2 headers"):
        slide_table(table, "shape,v")
    with pytest.raises(ValueError, match="rows=4-9: the table has 5 rows"):
        slide_table(table, "shape", rows="4-9")


def test_ink_tells_a_blank_picture_from_a_drawn_one(tmp_path):
    from PIL import Image, ImageDraw

    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 100), "white").save(blank)
    drawn = tmp_path / "drawn.png"
    image = Image.new("RGB", (200, 100), "white")
    ImageDraw.Draw(image).rectangle((20, 20, 120, 80), fill="black")
    image.save(drawn)
    assert _ink(blank) == 0.0 and 0.25 < _ink(drawn) < 0.35


def test_the_deck_builds_renders_and_prints(tmp_path, chromium):
    deck = render_deck(DECK, tmp_path / "slides", REPO_ROOT)
    expected = len(split_slides(DECK.read_text()))
    assert deck.slides == expected and deck.images
    result = check_deck(deck.html, tmp_path / "shots", chromium)
    assert result.slides == expected
    assert result.problems == [], result.problems
    assert len(result.screenshots) == 2 and all(ink > 0.01 for ink in result.screenshots.values())
    pdf = print_pdf(deck.html, tmp_path / "deck.pdf", chromium).read_bytes()
    assert pdf.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", pdf)) == expected


def test_the_render_check_catches_a_missing_picture_and_an_overflowing_slide(tmp_path, chromium):
    deck = _tiny_deck(tmp_path)
    items = "\n".join(f"- item {i}" for i in range(40))
    long = tmp_path / "long.py"  # too long to fit at the smallest font: clipped inside its box
    long.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 200 + "    return x\n")
    code = "::: code long.py short\n\n::: code long.py long\n"
    tiny = '<p style="font-size: 12px">too small for the back of the room</p>'
    deck.write_text(
        f'# Broken\n---\n## a\n<img src="img/nowhere.png" alt="x">\n---\n## b\n{items}\n---\n## c\n{code}'
        f"\n---\n## d\n{tiny}\n"
    )
    built = render_deck(deck, tmp_path / "out", tmp_path)
    result = check_deck(built.html, tmp_path / "shots", chromium)
    assert result.missing_images == ["img/nowhere.png"]
    assert result.overflowing == [3, 4]
    assert result.small_text == [4, 5]  # the long code shrank under its floor; a 12 px paragraph
    # the slide whose only content is a broken picture is (nearly) blank: its screenshot says so too
    assert result.problems[3:] == ["slide-02.png is blank"]
