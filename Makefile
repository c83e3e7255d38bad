# From a fresh clone, one command each: `make run` serves the bundled model, `make test` runs the
# tests. Every target first makes the virtual environment .venv (once: the stamp file marks it done,
# and a change to pyproject.toml redoes it). torch comes first, so the package's own install finds it
# there: with nvidia-smi, the package index's build; without it on Linux (where the index's torch is
# the multi-GB CUDA build) the CPU build, as pip finds it when that is one (a local wheel or mirror),
# else from PyTorch's CPU index (about 200 MB); elsewhere (macOS, Windows) the index's, which has no CUDA.
PY ?= python3
VENV ?= .venv
TORCH_CPU ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
LLAMACPP_JOBS ?= 2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the playground's 3-D map library (clover/server/three.pin), fetched with npm into the package
VENDOR := clover/server/static/vendor/.pin

.PHONY: setup run test lint bench docs-tables results llama-cpp llama-cpp-stock sglang test-sglang

setup: $(STAMP) $(VENDOR)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -q torch; \
	elif [ "$$(uname -s)" != Linux ] || $(BIN)/python -m pip install -q --dry-run --no-deps --ignore-installed \
		--report - $(TORCH_CPU) 2>/dev/null | grep -q '+cpu"'; then $(BIN)/python -m pip install -q $(TORCH_CPU); \
	else echo "torch: the CPU build from $(TORCH_CPU_INDEX)"; \
		$(BIN)/python -m pip install -q $(TORCH_CPU) --index-url $(TORCH_CPU_INDEX); fi
	$(BIN)/python -m pip install -q -e ".[test]"
	@$(BIN)/python -m pip uninstall -y -q triton 2>/dev/null || true  # triton makes fla/transformers pick GPU kernels on CPU
	@touch $@

# the pinned three.js build the playground's 3-D map loads (clover/server/vendor.py: npm pack, the
# pin's sha512 checked, the module build and its licence kept); without npm it says so and goes on:
# the page then draws its 2-D map, and the 3-D map's browser test fails under CLOVER_REQUIRE_BROWSER=1
$(VENDOR): clover/server/three.pin clover/server/vendor.py
	@if command -v npm >/dev/null 2>&1; then $(PY) clover/server/vendor.py; \
	else echo "vendor: npm not found: the playground draws its 2-D map (apt-get install npm, then make setup)"; fi

run: setup
	$(BIN)/clover serve --host $(HOST) --port $(PORT)

# the tests in TEST_JOBS processes (pytest-xdist; one per core, one torch thread each: tests/conftest.py),
# then those marked `alone` (they time things or need both cores) with the machine to themselves;
# exit status 5 of the second run means none was selected. -rs: every skip's reason in the summary;
# quiet already (pyproject's addopts -q): a second -q would drop pytest's closing 'N passed' line
test: setup
	$(BIN)/python -m pytest -rs -n $(TEST_JOBS) -m "not alone" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -rs -m alone $(PYTEST_ARGS) || test $$? -eq 5

lint: setup
	$(BIN)/python -m ruff check clover tests benchmarks integrations
	$(BIN)/python -m ruff format --check clover tests benchmarks integrations

bench: setup
	$(BIN)/clover bench decode

# the tables in README.md and docs/*.md marked <!-- results: FILE … -->, regenerated from the result
# files in benchmarks/results (docs/benchmarks.md#results-and-tables); --check only says which are stale
docs-tables: setup
	$(BIN)/python benchmarks/docs_tables.py

# re-measure what the docs quote (benchmarks/remeasure.txt: the cpu set, about 2.5 hours at one thread),
# one command after another, then regenerate the tables; RESULTS="decode accuracy" (names or a group) for a subset
RESULTS ?=
results: setup
	PYTHON=$(BIN)/python benchmarks/remeasure.sh $(RESULTS)

# Clover's llama.cpp back end (docs/llama-cpp.md): the pinned llama.cpp source from PyPI, ggml for the
# CPU and libclover, built into a cache directory once (again only when the pin or native/llamacpp changes)
llama-cpp:
	@CLOVER_LLAMACPP_JOBS=$(LLAMACPP_JOBS) PYTHON="$$(test -x $(BIN)/python && echo $(BIN)/python || echo $(PY))" \
		native/llamacpp/build.sh

# stock llama.cpp (libllama and a small timing program from the same pinned tree) for `clover bench llama.cpp`,
# which builds it on first use too; not part of `make llama-cpp` (CI does not need it)
llama-cpp-stock:
	@CLOVER_LLAMACPP_JOBS=$(LLAMACPP_JOBS) PYTHON="$$(test -x $(BIN)/python && echo $(BIN)/python || echo $(PY))" \
		native/llamacpp/build.sh stock

# SGLang serving Clover (docs/sglang.md): its own environment .venv-sglang, since SGLang pins another torch
# than the project. With nvidia-smi, SGLang from the package index with every dependency; without it, the
# CPU path: the torch and torchvision builds SGLang pins (their CUDA wheels run on a CPU), SGLang with
# --no-deps, the dependencies its imports need (integrations/sglang/requirements-cpu.txt) and the
# sgl_kernel stand-in (integrations/sglang/cpu/sgl_kernel.py). Then clover (no deps) and the plugin.
SGLANG_VENV ?= .venv-sglang
SGLANG_VERSION ?= 0.5.23
SGLANG_TORCH ?= torch==2.14.1 torchvision==0.29.1
SGLANG_DIR := integrations/sglang
SGLANG_BIN := $(SGLANG_VENV)/bin
SGLANG_STAMP := $(SGLANG_VENV)/.installed

sglang: $(SGLANG_STAMP)

$(SGLANG_STAMP): pyproject.toml $(SGLANG_DIR)/pyproject.toml $(SGLANG_DIR)/requirements-cpu.txt $(SGLANG_DIR)/cpu/sgl_kernel.py
	@test -x $(SGLANG_BIN)/python || $(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_BIN)/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then $(SGLANG_BIN)/python -m pip install -q sglang==$(SGLANG_VERSION) pytest pytest-timeout; \
	else $(SGLANG_BIN)/python -m pip install -q $(SGLANG_TORCH) \
		&& $(SGLANG_BIN)/python -m pip install -q --no-deps sglang==$(SGLANG_VERSION) \
		&& $(SGLANG_BIN)/python -m pip install -q -r $(SGLANG_DIR)/requirements-cpu.txt \
		&& cp $(SGLANG_DIR)/cpu/sgl_kernel.py "$$($(SGLANG_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"/; fi
	$(SGLANG_BIN)/python -m pip install -q --no-deps -e . -e $(SGLANG_DIR)
	@touch $@

test-sglang: sglang
	$(SGLANG_BIN)/python -m pytest -p no:cacheprovider $(SGLANG_DIR)/tests $(PYTEST_ARGS)
