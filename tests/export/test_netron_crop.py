"""Which part of a Netron drawing the crop keeps: from an operator's layout rank down to the outputs."""

from __future__ import annotations

import pytest

from lecture_code.export.netron_crop import NodeBox, crop_box

# A drawing in the shape of DLRM's: two input columns on top, a wide rank of gathers, then one chain from the
# interaction down to the output. Boxes are (label, x, y, width, height); rank centres are 20, 100, ... 540.
DRAWING = [
    NodeBox("dense", 100, 10, 50, 20),
    NodeBox("sparse", 900, 10, 50, 20),
    NodeBox("Gemm", 100, 80, 60, 40),  # the bottom MLP: a Gemm far to the left, above the crop
    *(NodeBox("Gather", 200 + 100 * i, 85, 60, 30) for i in range(8)),
    NodeBox("Concat", 500, 190, 50, 20),
    NodeBox("Transpose", 450, 270, 60, 20),
    NodeBox("MatMul", 500, 350, 50, 20),
    NodeBox("Gemm", 495, 420, 60, 40),
    NodeBox("Sigmoid", 505, 510, 40, 20),
    NodeBox("probability", 495, 530, 60, 20),  # centre 540: its own rank
]


def test_crop_from_the_anchor_rank_down_to_the_outputs():
    box = crop_box(DRAWING, "MatMul", margin=(0, 0))
    assert [n.label for n in box.nodes] == ["MatMul", "Gemm", "Sigmoid", "probability"]
    assert (box.x, box.y, box.width, box.height) == (495, 350, 60, 200)
    assert box.clip == {"x": 495, "y": 350, "width": 60, "height": 200}
    assert box.labels["Gemm"] == 1  # the bottom MLP's Gemm is above the anchor: left out


def test_ranks_above_reach_back_rank_by_rank():
    box = crop_box(DRAWING, "MatMul", ranks_above=2, margin=(0, 0))
    assert [n.label for n in box.nodes][:3] == ["Concat", "Transpose", "MatMul"]
    assert (box.x, box.y, box.width, box.height) == (450, 190, 105, 360)
    everything = crop_box(DRAWING, "MatMul", ranks_above=99, margin=(0, 0))
    assert len(everything.nodes) == len(DRAWING)  # more ranks than there are: the whole drawing


def test_margin_is_added_and_clipped_to_the_drawing():
    box = crop_box(DRAWING, "MatMul", margin=(80, 20), bounds=(600, 560))
    assert (box.x, box.y) == (495 - 80, 350 - 20)
    assert box.x + box.width == 600 and box.y + box.height == 560  # right and bottom edges clipped


def test_the_topmost_node_of_the_op_is_the_anchor():
    drawing = [*DRAWING, NodeBox("MatMul", 500, 190, 50, 20)]  # a second MatMul, higher up
    assert crop_box(drawing, "MatMul", margin=(0, 0)).y == 190


def test_a_missing_operator_names_the_ones_there_are():
    with pytest.raises(ValueError, match=r"no 'Conv' node.*'Gather'"):
        crop_box(DRAWING, "Conv")
    with pytest.raises(ValueError, match="ranks_above"):
        crop_box(DRAWING, "MatMul", ranks_above=-1)
