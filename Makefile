# One-command tooling. Every target sets up its own virtual environment first.
#   make lecture   set up, then execute every notebook in order on the embedded default data
#   make test      set up, then run all tests (pytest + nbval over the notebooks); .ci/run calls this
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
EXECUTED := artifacts/notebooks

.PHONY: setup lecture test test-fast lint format bench screenshots lab clean

setup: $(STAMP)

# CPU machines: torch==2.13.0 first (a local CPU wheel); an unpinned torch would pull GB of CUDA packages.
# GPU machines keep the torch they have (requirements.txt holds a range).
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	if ! $(PY) -c "import torch" 2>/dev/null; then \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q "torch>=2.11,<2.14"; \
	  else $(PY) -m pip install -q torch==2.13.0; fi; fi
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

lecture: setup
	mkdir -p $(EXECUTED)
	set -e; for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  $(PY) -m jupyter nbconvert --to notebook --execute --output-dir $(EXECUTED) $$nb; \
	  $(PY) -m jupyter nbconvert --to html --output-dir $(EXECUTED) $(EXECUTED)/$$(basename $$nb); \
	done
	@echo "Executed notebooks and HTML are in $(EXECUTED)/"

test: setup
	$(PY) -m pytest tests notebooks --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider

test-fast: setup
	$(PY) -m pytest tests -q -m "not slow"

lint: setup
	$(PY) -m ruff check lecture_code kernels tests benchmarks
	$(PY) -m ruff format --check lecture_code kernels tests benchmarks

format: setup
	$(PY) -m ruff format lecture_code kernels tests benchmarks
	$(PY) -m ruff check --fix lecture_code kernels tests benchmarks

bench: setup
	$(PY) benchmarks/bench_preprocess.py

screenshots: setup
	$(PY) -m lecture_code.perf.screenshots

lab: setup
	$(PY) -m jupyter lab notebooks

clean:
	rm -rf artifacts runs .pytest_cache
