# depthtraj: `make demo` runs the embedded default end to end; `make test` runs the test suite.
# Both create .venv on first use. torch is pinned to 2.13.0 and installed first, alone, so pip
# takes the machine's local CPU wheel and never resolves the multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
TORCH  := torch==2.13.0

.PHONY: demo test bench schema lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[models,test,distributed,remote]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/depthtraj demo --out depthtraj-demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run.py

schema: $(VENV)/.installed
	$(BIN)/depthtraj schema export schemas

clean:
	rm -rf $(VENV) depthtraj-demo .pytest_cache .hypothesis
