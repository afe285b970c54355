# One command sets up, one runs the tests (see README).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# CPU notebooks, run in order (02b restores what 02a saved). 05_gpu_max_autotune is not executed here: it needs a
# CUDA GPU; its committed outputs come from a GPU run (make_notebooks.py --gpu).
NOTEBOOKS := example_notebooks/01_quickstart.ipynb example_notebooks/02a_warm_and_save.ipynb \
	example_notebooks/02b_restore_after_restart.ipynb example_notebooks/03_shared_hub.ipynb \
	example_notebooks/04_panel.ipynb
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with example_notebooks/sanitize.cfg

.PHONY: setup test lint format bench notebooks demo

setup:
	bash .ci/setup

# Lint and type-check, then the tests and the notebooks under nbval (example_notebooks/conftest.py also fails a cell whose magic
# printed a UsageError, which nbval alone lets pass: nbval#147).
test:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	$(BIN)/pyright --pythonpath $(BIN)/python
	$(BIN)/python -m pytest --durations=12 $(NBVAL) tests $(NOTEBOOKS)

# The quick start, a kernel restart, and the time it saved (real kernels, a temp folder, about a minute).
demo:
	$(BIN)/python -m jupyter_compile_cache demo

notebooks:
	$(BIN)/python example_notebooks/make_notebooks.py --execute

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/pyright --pythonpath $(BIN)/python

format:
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench:
	$(BIN)/python benchmarks/bench.py --suite cpu
