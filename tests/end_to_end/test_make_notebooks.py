"""example_notebooks/make_notebooks.py's runner: it restarts the kernel where a cell is tagged, as a user would
(used for the GPU notebook), and keeps the widget state."""

from __future__ import annotations

import os
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "example_notebooks"))


def test_notebook_runner_restarts_the_kernel_where_tagged_and_keeps_widget_state(tmp_path):
    import make_notebooks

    nb = new_notebook(
        cells=[
            new_code_cell("before = 41"),
            new_code_cell("print('alive', 'before' in dir())", metadata={"tags": ["restart-kernel"]}),
            new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=7)"),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    make_notebooks.execute(nb, timeout=120)
    assert nb.cells[1].outputs[0]["text"] == "alive False\n"  # the variable is gone: the kernel restarted
    assert [c.execution_count for c in nb.cells] == [1, 1, 2]  # counted from 1 again, as in Jupyter
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert any(m["model_name"] == "IntSliderModel" and m["state"]["value"] == 7 for m in state.values())
    nbformat.validate(nb)
