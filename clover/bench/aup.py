"""AUP, accuracy under parallelism: one number for a policy's accuracy-TPF trade-off that no
device changes (tokens per forward pass, not per second).

The points of one policy's threshold sweep, ordered by TPF, draw a curve of accuracy against
parallelism; AUP is the area under it, where each accuracy is first weighted by
``W(y) = min(1, exp(-alpha * (1 - y / y_max)))`` (``y_max``: the best accuracy of every decoder
compared, so an accuracy below it counts for less than its face value), and points more than
``drop`` points below the sweep's lowest-TPF accuracy are left out. The first point contributes
its rectangle ``TPF * accuracy``; each later one the trapezoid to its left. Accuracy in percent.
"""

from __future__ import annotations

import math


def quality_weight(y: float, y_max: float, alpha: float = 3.0) -> float:
    """``W(y)``: 1 at or above ``y_max``, shrinking exponentially with the relative shortfall."""
    return min(1.0, math.exp(-alpha * (1 - y / y_max))) if y_max > 0 else 1.0


def aup(points: list[tuple[float, float]], y_max: float, alpha: float = 3.0, drop: float = 5.0) -> float:
    """``points``: (TPF, accuracy in percent) of one policy's sweep, in any order."""
    if not points or any(tpf <= 0 for tpf, _ in points):
        raise ValueError("aup needs at least one point, each with TPF > 0")
    pts = sorted(points)
    floor = pts[0][1] - drop
    pts = [(r, y) for r, y in pts if y >= floor]
    area = pts[0][0] * pts[0][1]  # the first point's rectangle: its accuracy, unweighted, up to its TPF
    for (r0, y0), (r1, y1) in zip(pts, pts[1:]):
        area += 0.5 * (r1 - r0) * (y0 * quality_weight(y0, y_max, alpha) + y1 * quality_weight(y1, y_max, alpha))
    return area
