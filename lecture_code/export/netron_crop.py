"""Which part of a Netron drawing to crop: from one operator's layout rank to the bottom of the graph.

A whole DLRM export drawn by Netron is thousands of pixels wide (26 embedding columns side by side), so a
picture of all of it, shown at notebook width, has labels no one can read. A crop at 1:1 can be read. What
to crop is said in graph terms, not pixels, so it survives a change of layout:

- ``op``: the operator type that anchors the crop (``"MatMul"``, the interaction's batched product);
- ``ranks_above``: how many layout ranks above the anchor's rank to start (Netron lays a graph out top to
  bottom in ranks; the nodes of one rank share a vertical centre), e.g. 2 to include the ``Concat`` and the
  ``Transpose`` that feed the product;
- the crop then holds every node from that rank down to the graph's outputs (the top MLP, the sigmoid, the
  output), with a margin, clipped to the drawing.

:func:`crop_box` does this on the node boxes read from the page (:class:`NodeBox`, page pixels), with no
browser; :func:`lecture_code.export.netron.screenshot_netron` reads the boxes and takes the picture.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

__all__ = ["CropBox", "NodeBox", "crop_box"]


@dataclass(frozen=True)
class NodeBox:
    """One drawn node: its first label (the operator type, or an input/output name) and its page box."""

    label: str
    x: float
    y: float
    width: float
    height: float

    @property
    def centre_y(self) -> float:
        return self.y + self.height / 2


@dataclass(frozen=True)
class CropBox:
    """A crop in page pixels (integers, inside the drawing) and the nodes it holds."""

    x: int
    y: int
    width: int
    height: int
    nodes: tuple[NodeBox, ...]

    @property
    def clip(self) -> dict[str, int]:
        """Playwright's ``clip`` argument."""
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    @property
    def labels(self) -> Counter:
        """How many nodes of each label (operator type) the crop holds."""
        return Counter(node.label for node in self.nodes)


def crop_box(
    nodes: list[NodeBox],
    op: str,
    ranks_above: int = 0,
    margin: tuple[int, int] = (80, 20),
    bounds: tuple[float, float] | None = None,
) -> CropBox:
    """The box from ``ranks_above`` ranks above the topmost ``op`` node down to the lowest node.

    Args:
        nodes: every drawn node (inputs and outputs included).
        op: the anchoring label; the topmost node carrying it is the anchor.
        ranks_above: ranks above the anchor's to include (0: start at the anchor's rank).
        margin: pixels added left and right, and above and below (edge labels stick out of the nodes
            sideways: "batch×27×16").
        bounds: ``(width, height)`` of the drawing; the box is clipped to it.

    Raises ValueError when no node carries ``op`` (the message lists the labels there are).
    """
    if ranks_above < 0:
        raise ValueError(f"ranks_above must be >= 0, got {ranks_above}")
    anchors = [node for node in nodes if node.label == op]
    if not anchors:
        raise ValueError(f"no {op!r} node in the drawing; its operators: {sorted({n.label for n in nodes})}")
    anchor = min(anchors, key=lambda node: node.centre_y)
    ranks = sorted({round(node.centre_y) for node in nodes})
    start = ranks[max(0, ranks.index(round(anchor.centre_y)) - ranks_above)]
    inside = tuple(node for node in nodes if round(node.centre_y) >= start)
    left = min(node.x for node in inside) - margin[0]
    top = min(node.y for node in inside) - margin[1]
    right = max(node.x + node.width for node in inside) + margin[0]
    bottom = max(node.y + node.height for node in inside) + margin[1]
    if bounds is not None:
        left, top = max(left, 0.0), max(top, 0.0)
        right, bottom = min(right, bounds[0]), min(bottom, bounds[1])
    x, y = math.floor(left), math.floor(top)
    return CropBox(x, y, math.ceil(right) - x, math.ceil(bottom) - y, inside)
