# Make a fresh machine ready and run the checks. CPU machines get the pinned CPU build of torch
# first, so installing the package never pulls a multi-GB CUDA build.
PY ?= python3
TORCH_CPU ?= torch==2.13.0

.PHONY: setup test lint bench
setup:
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch; else $(PY) -m pip install -q $(TORCH_CPU); fi
	$(PY) -m pip install -q -e ".[test]"
	@$(PY) -m pip uninstall -y -q triton 2>/dev/null || true  # triton makes fla/transformers pick GPU kernels on CPU

test:
	$(PY) -m pytest -q

lint:
	$(PY) -m ruff check clover tests benchmarks

bench:
	$(PY) -m clover bench decode
