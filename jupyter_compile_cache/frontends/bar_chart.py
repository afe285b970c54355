"""The panel's chart: cold against restored seconds per cell, as inline SVG (no plotting library, nothing to
download)."""

from __future__ import annotations

import html
import math

from ..core.records import CellSaving

GREEN, RED, GREY = "#2e7d32", "#c62828", "#757575"


def _nice_step(top: float) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) that cuts 0..TOP into 3 to 6 parts."""
    raw = top / 5 if top > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def bar_chart_svg(cells: list[CellSaving], width: int = 560) -> str:
    """Cold vs restored seconds per cell, as inline SVG (no plotting library, nothing to download): a scale in
    seconds with grid lines, each bar with its value. Each cell's whole name stands on its own line above its bars,
    so no name is cut."""
    if not cells:
        return "<i>No restored %%compile_cache cell yet: run one twice (or after a restart) to compare.</i>"
    top = max(max(c.cold, c.restored) for c in cells) or 1.0
    step = _nice_step(top)
    axis_top = step * math.ceil(top / step)
    label, bar, gap, left = 14, 12, 10, 12  # left: room for the "0 s" under the axis
    row = label + 2 * (bar + 2) + gap
    plot = width - left - 70  # room for the longest value label after the longest bar
    scale = plot / axis_top
    height = 20 + row * len(cells) + 18
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect x="{left}" y="2" width="10" height="10" fill="{RED}"/><text x="{left + 14}" y="11">cold</text>'
        f'<rect x="{left + 56}" y="2" width="10" height="10" fill="{GREEN}"/>'
        f'<text x="{left + 70}" y="11">restored (its restore included)</text>',
    ]
    axis_y = 20 + row * len(cells)
    ticks = int(round(axis_top / step))
    for i in range(ticks + 1):
        x = left + i * step * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="18" x2="{x:.1f}" y2="{axis_y}" stroke="#e0e0e0"/>'
            f'<text x="{x:.1f}" y="{axis_y + 13}" text-anchor="middle" fill="{GREY}">{i * step:g} s</text>'
        )
    for i, c in enumerate(cells):
        y = 20 + i * row
        parts.append(f'<text x="{left}" y="{y + label - 3}">{html.escape(c.name)}</text>')
        for j, (key, color) in enumerate((("cold", RED), ("restored", GREEN))):
            value = getattr(c, key)
            w = max(1.0, value * scale)
            top_y = y + label + j * (bar + 2)
            parts.append(
                f'<rect x="{left}" y="{top_y}" width="{w:.1f}" height="{bar}" fill="{color}"/>'
                f'<text x="{left + w + 4:.1f}" y="{top_y + bar - 2}">{value:.2f} s</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
