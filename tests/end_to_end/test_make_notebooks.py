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


def test_the_stored_notebooks_show_no_path_of_the_machine_that_ran_them():
    import make_notebooks

    folder = os.path.dirname(make_notebooks.__file__)
    stored = sorted(name for name in os.listdir(folder) if name.endswith(".ipynb"))
    assert len(stored) >= 6, stored
    for name in stored:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = f.read()
        found = make_notebooks.MACHINE_PATH.search(text)
        assert found is None, f"{name}: {text[max(found.start() - 60, 0) : found.end() + 60]!r}"


def test_scrub_makes_the_checkout_relative_and_home_a_tilde():
    import make_notebooks

    root = os.path.dirname(make_notebooks.HERE)
    home = os.path.expanduser("~")
    nb = new_notebook(cells=[new_code_cell("print(1)")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", text=f"store: {root}/example_notebooks/.jcc-demo/01/store\n{home}/.cache\n")
    ]
    text = nbformat.writes(make_notebooks.scrub(nb))
    assert "store: example_notebooks/.jcc-demo/01/store" in text and "~/.cache" in text
    assert make_notebooks.MACHINE_PATH.search(text) is None
