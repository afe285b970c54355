# One command sets up, one runs the tests (see README).
PY ?= python3
# Python's bytecode cache on, whatever the machine sets (some CI images set PYTHONDONTWRITEBYTECODE): uv installs
# without compiling it, and without it each process the tests start compiled torch's modules again (an `import torch`
# took 9.6 s against 4.3 s on a 2-core machine).
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
BIN := $(VENV)/bin

# CPU notebooks, run in order (02b restores what 02a saved). 05_gpu_max_autotune is not executed here: it needs a
# CUDA GPU; its committed outputs come from a GPU run (make_notebooks.py --gpu).
NOTEBOOKS := example_notebooks/01_quickstart.ipynb example_notebooks/02a_warm_and_save.ipynb \
	example_notebooks/02b_restore_after_restart.ipynb example_notebooks/03_shared_hub.ipynb \
	example_notebooks/04_panel.ipynb
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with example_notebooks/sanitize.cfg

# The oldest torch the README names, and the tests that show it restores (CI's second, lean lane: the zoo there is one
# decoder and one convolutional model).
OLDEST_TORCH ?= 2.9.1
RESTORE_TESTS := tests/end_to_end/test_kernel_restore.py tests/torch_adapter/test_precompile_semantics.py \
	tests/end_to_end/test_model_zoo.py

# pytest's worker processes for `make test` (pytest-xdist): two keep 2 cores busy while a test waits on a kernel, a
# server or the clock (three, with forked kernels: 459 s against 458 s on 2 cores). The warm-kernel tests and the notebooks run after them, alone: a template warms up only on an
# idle CPU, and 02b restores what 02a saved.
TEST_WORKERS ?= 2
# The kernels of that first lane: forked from a warm template of each worker (tests/helpers/kernels.py), so that no
# test waits for an `import torch`, and every suite checks that a forked kernel answers as a fresh one; `plain`
# starts them as plain ipykernels. The warm kernel's own tests (tests/kernels) and the oldest torch's lane start
# plain kernels.
TEST_KERNELS ?= warm
ALONE := tests/kernels
# Of those, the ones whose templates wait for a quiet machine before they warm up (up to a minute) or that time that
# wait: in CI nothing runs beside them.
QUIET := tests/kernels/test_launcher.py tests/kernels/test_server_extension.py tests/kernels/test_idle_cpu.py \
	tests/kernels/test_warm_kernel.py

# The transformers zoo in `make test`: one model of each kind (a decoder, an encoder-decoder, a vision transformer, a
# convolutional net). Llama is the decoder: since transformers 5.25 its attention holds functions the `kernels` package
# wraps (as Qwen2's and Mistral's), a path GPT-2 does not take. `make test-zoo` runs the whole zoo, timm's too where
# timm is installed (the GPU host: JCC_TEST_DEVICE=cuda make test-zoo).
ZOO ?= llama,t5,vit,resnet

# `make help` lists the targets and what each does (the `## ` text on each target's line)
.PHONY: help setup setup-dev test test-zoo lint format bench notebooks demo setup-oldest test-oldest docs screenshots

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/:.*## /\t/' | expand -t 16

setup:  ## the package, torch and Jupyter's kernel into .venv: what the product and its demo need
	VENV=$(VENV) bash .ci/setup

setup-dev:  ## what the tests need besides (pytest, the test servers, a browser, the models); make test runs it once
	VENV=$(VENV) DEV=1 bash .ci/setup

$(VENV)/.dev-ready: pyproject.toml .ci/setup
	$(MAKE) setup-dev

# A second venv with the oldest torch the README names, and the restore tests on it.
setup-oldest:  ## a second venv with the oldest torch the README names
	VENV=.venv-torch$(OLDEST_TORCH) TORCH_VERSION=$(OLDEST_TORCH) DEV=1 AZURITE=0 BROWSER=0 bash .ci/setup

# One restore test of each kind there (a restart, an edit, a training step, damaged bundles, a decoder and a
# convolutional model), in kernels forked from that torch's own templates as in the first lane; `make test-oldest
# OLDEST_K=` runs every restore test, and .ci/torch-matrix runs them on the releases between the two lanes' torches.
OLDEST_K ?= restart_on_empty_cache_dir or (stale_compiled_code and forward) or training_step or damaged or zoo
OLDEST_WORKERS ?= $(TEST_WORKERS)
test-oldest:  ## the restore tests on the oldest torch
	JCC_TEST_KERNELS=$(TEST_KERNELS) JCC_TEST_ZOO=gpt2,resnet .venv-torch$(OLDEST_TORCH)/bin/python -m pytest -n $(OLDEST_WORKERS) --durations=5 \
		$(RESTORE_TESTS) \
		$(if $(OLDEST_K),-k "$(OLDEST_K)")

# The whole model zoo (every HF model from its tiny config, and timm's where timm is installed), cold then restored.
test-zoo: $(VENV)/.dev-ready  ## the whole model zoo, cold then restored
	$(BIN)/python -m pytest tests/end_to_end/test_model_zoo.py

# Lint and type-check, then the tests and the notebooks under nbval (example_notebooks/conftest.py also fails a cell whose magic
# printed a UsageError, which nbval alone lets pass: nbval#147). BESIDE_ALONE: a command run while the tests that run
# alone do (one pytest process, which leaves a core idle); `make test` fails if it fails. CI runs the oldest torch's
# lane there, beside all but the QUIET tests, which go first, once BEFORE_QUIET (a command) has returned: CI waits
# there for the oldest torch's setup, which could otherwise still be unpacking beside them.
test: $(VENV)/.dev-ready  ## ruff, pyright, the tests and the example notebooks (the README's test command)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	$(BIN)/pyright --pythonpath $(BIN)/python
	JCC_TEST_KERNELS=$(TEST_KERNELS) JCC_TEST_ZOO=$(ZOO) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal \
		--durations=20 tests --ignore=$(ALONE)
	$(if $(BESIDE_ALONE),$(if $(BEFORE_QUIET),{ $(BEFORE_QUIET); } &&) $(BIN)/python -m pytest --durations=5 $(QUIET))
	$(if $(BESIDE_ALONE),{ $(BESIDE_ALONE); } & beside=$$!;) \
	$(BIN)/python -m pytest --durations=5 $(NBVAL) $(ALONE) $(if $(BESIDE_ALONE),$(QUIET:%=--ignore=%)) \
		$(NOTEBOOKS); status=$$?; \
	$(if $(BESIDE_ALONE),wait $$beside || status=1;) exit $$status

# The quick start, a kernel restart, and the time it saved (real kernels, a temp folder, about 40 s on 2 cores).
demo:  ## a restart and its restore, on a store of its own
	$(BIN)/python -m jupyter_compile_cache demo

notebooks:  ## run the example notebooks again and keep their outputs
	$(BIN)/python example_notebooks/make_notebooks.py --execute

lint: $(VENV)/.dev-ready  ## ruff and pyright
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/pyright --pythonpath $(BIN)/python

format:  ## ruff format
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench:  ## the CPU benchmarks
	$(BIN)/python -m benchmarks bench --suite cpu

# Re-run the quick start and the CPU notebooks here, then render every figure of README.md and docs/results.md from
# its result file (docs/figures.py; `--check` is part of the tests).
docs: $(VENV)/.dev-ready  ## the notebooks, the figures of README.md and docs/results.md, the screenshots
	$(BIN)/python example_notebooks/make_notebooks.py --execute
	$(BIN)/python docs/figures.py
	$(MAKE) screenshots

# The panel screenshots of docs/reference.md, from the browser test: the CPU one from a live kernel (its store and caches under
# ~/.jcc-panel-demo, removed after), the GPU one from 05_gpu_max_autotune.ipynb's saved widget state.
screenshots: $(VENV)/.dev-ready  ## the panel's screenshots for the docs
	rm -rf ~/.jcc-panel-demo
	PANEL_DEMO_DIR=~/.jcc-panel-demo PANEL_SCREENSHOT=docs/panel.png PANEL_GPU_SCREENSHOT=docs/panel_gpu.png \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/frontends/test_panel_browser.py
	rm -rf ~/.jcc-panel-demo
