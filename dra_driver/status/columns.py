"""Rows in aligned columns under a header, kubectl style: the views that grow with the cluster.

A bordered rich Table measures, wraps and renders every cell on its own, some
milliseconds a row: at a thousand nodes (8,000 GPUs) that is longer than
reading the cluster. Padding styled Text cells to the widest of each column
costs microseconds a row and keeps the bars' colours.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.text import Span, Text

COLUMN_GAP = 2


def aligned(
    title: str, header: Sequence[str], rows: Iterable[Sequence[Text | str]], note: str = ""
) -> Text:
    """The title, the header and the rows, each column as wide as its widest cell; a
    `note` (where the details are, what was left out) goes under the last row, dimmed."""
    rows = [[Text(column, style="bold") for column in header], *rows]
    widths = [max(_width(row[column]) for row in rows) for column in range(len(header))]
    lines = [Text(title, style="bold")]
    for row in rows:
        parts: list[str] = []
        spans: list[Span] = []
        offset = 0
        for column, cell in enumerate(row):
            plain = cell if isinstance(cell, str) else cell.plain
            if isinstance(cell, Text):
                if cell.style:
                    spans.append(Span(offset, offset + len(plain), cell.style))
                spans.extend(Span(offset + s.start, offset + s.end, s.style) for s in cell.spans)
            parts.append(plain)
            offset += len(plain)
            if column < len(row) - 1:
                padding = " " * (widths[column] - _width(cell) + COLUMN_GAP)
                parts.append(padding)
                offset += len(padding)
        # Built from the plain text and its spans: Text.append per cell costs more than
        # everything else here on a thousand nodes.
        lines.append(Text("".join(parts).rstrip(), spans=spans))
    if note:
        lines.append(Text(note, style="dim"))
    return Text("\n").join(lines)


def _width(cell: Text | str) -> int:
    return cell_len(cell) if isinstance(cell, str) else cell.cell_len
