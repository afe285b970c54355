# One command sets up, one runs the tests (see README).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup test lint format bench

setup:
	bash .ci/setup

test:
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/python -m pytest

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format:
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench:
	$(BIN)/python benchmarks/restore_bench.py
