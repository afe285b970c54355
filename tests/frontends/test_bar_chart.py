"""bar_chart.py: the panel's cold-against-restored chart, as SVG with each value and each whole name."""

from __future__ import annotations

from jupyter_compile_cache.core.records import CellSaving
from jupyter_compile_cache.frontends.bar_chart import bar_chart_svg


def test_chart_compares_cold_and_restored():
    svg = bar_chart_svg([CellSaving("net", cold=10.0, restored=0.2, saved=9.8)])
    assert svg.startswith("<svg") and "10.00 s" in svg and "0.20 s" in svg
    assert "No restored" in bar_chart_svg([])
    long_name = "transformer-max-autotune-infer"
    assert f">{long_name}</text>" in bar_chart_svg([CellSaving(long_name, cold=1.0, restored=0.1, saved=0.9)])
