# From a fresh clone, one command each: `make run` serves the bundled model, `make test` runs the
# tests. Every target first makes the virtual environment .venv (once: the stamp file marks it done,
# and a change to pyproject.toml redoes it). Machines without nvidia-smi get the pinned CPU build of
# torch before the package, so installing it never pulls a multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
TORCH_CPU ?= torch==2.13.0
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint bench

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -q torch; \
	else $(BIN)/python -m pip install -q $(TORCH_CPU); fi
	$(BIN)/python -m pip install -q -e ".[test]"
	@$(BIN)/python -m pip uninstall -y -q triton 2>/dev/null || true  # triton makes fla/transformers pick GPU kernels on CPU
	@touch $@

run: setup
	$(BIN)/clover serve --host $(HOST) --port $(PORT)

test: setup  # quiet already (pyproject's addopts -q): a second -q would drop pytest's closing 'N passed' line
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/python -m ruff check clover tests benchmarks

bench: setup
	$(BIN)/clover bench decode
