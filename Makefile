# depthtraj: `make demo` runs the embedded default end to end; `make test` runs the test suite.
# Both create .venv on first use. torch is pinned to 2.13.0 and installed first, alone, so pip
# takes the machine's local CPU wheel and never resolves the multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
TORCH  := torch==2.13.0

# The lower bounds of the `models` extra (transformers 4.54, tokenizers 0.21) in their own venv:
# the adapters and their conformance kit against the upstream code on the oldest supported stack.
LOWER     := .venv-lower
LOWER_PIN := transformers==4.54.0 tokenizers==0.21.*

.PHONY: demo test test-lower bench schema lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[models,test,distributed,remote,lmeval]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/depthtraj demo --out depthtraj-demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile

$(LOWER)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LOWER)
	$(LOWER)/bin/python -m pip install -q --upgrade pip
	$(LOWER)/bin/python -m pip install -q $(TORCH)
	$(LOWER)/bin/python -m pip install -q -e ".[models,test]" $(LOWER_PIN)
	touch $@

test-lower: $(LOWER)/.installed
	$(LOWER)/bin/python -m pytest -q -m models tests/test_adapter_kit.py tests/adapters/test_layers.py \
		-k "(shipped_family_passes_every_check and not layers) or every_depth"

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run.py

schema: $(VENV)/.installed
	$(BIN)/depthtraj schema export schemas

clean:
	rm -rf $(VENV) $(LOWER) depthtraj-demo .pytest_cache .hypothesis
