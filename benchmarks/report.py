"""The one table writer of the benchmarks: every script prints its results people compare as a markdown table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """HEADERS over ROWS (each cell as `str` shows it). ALIGN: one letter per column, 'l' or 'r' (left where
    missing)."""
    rule = ["--:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
    lines = [_row(headers), _row(rule)]
    lines += [_row(row) for row in rows]
    return "\n".join(lines)


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
