"""Plain-text tables as kubectl prints them: left-aligned columns two spaces apart.

Every command that prints a table (`inventory`, `simulate`, `status`) shows
the essential columns in at most `WIDTH` characters, so it reads in a
terminal and in a pull-request comment, and everything with `-o wide`.
`render` pads the columns; when a row would be wider than `width`, the
cells of the `wrap` columns are wrapped at spaces, and then those of the
`shrink` columns cut with an ellipsis, widest first, never below their
header. A cell may also hold several lines of its own (the extra lines
continue in the same column).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Sequence
from typing import Final

WIDTH: Final = 100
GAP: Final = "  "
ELLIPSIS: Final = "…"
_MIN_WRAP: Final = 20


def render(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = WIDTH,
    shrink: Collection[int] = (),
    wrap: Collection[int] = (),
) -> list[str]:
    """The lines of the table (no trailing newline); `width` None: no limit."""
    table = [list(header), *(list(row) for row in rows)]
    count = len(header)
    widths = [max(_longest(row[i]) for row in table) for i in range(count)]
    if width is not None:
        minimums = [len(h) for h in header]
        widths = _fit(widths, [max(m, _MIN_WRAP) for m in minimums], width, wrap)
        for row in table[1:]:
            for i in wrap:
                row[i] = "\n".join(textwrap.wrap(row[i], widths[i], break_on_hyphens=False) or [""])
        widths = _fit(widths, minimums, width, shrink)
    lines: list[str] = []
    for row in table:
        cells = [row[i].split("\n") for i in range(count)]
        height = max(len(c) for c in cells)
        for n in range(height):
            parts = [
                _cut(cells[i][n] if n < len(cells[i]) else "", widths[i]).ljust(widths[i])
                for i in range(count)
            ]
            lines.append(GAP.join(parts).rstrip())
    return lines


def _longest(cell: str) -> int:
    return max((len(line) for line in cell.split("\n")), default=0)


def _fit(widths: list[int], minimums: list[int], width: int, shrink: Collection[int]) -> list[int]:
    widths = list(widths)
    total = sum(widths) + len(GAP) * (len(widths) - 1)
    while total > width:
        candidates = [i for i in shrink if widths[i] > max(minimums[i], 8)]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
        total -= 1
    return widths


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS
