# One-command tooling. Every target sets up its own virtual environment first.
#   make lecture   set up, then execute every notebook in order, redraw the pictures cheap on this machine,
#                  build the slides, and print a summary (python -m lecture_code.lecture)
#   make slides    the deck: artifacts/slides/deck.html + deck.pdf from slides/deck.md, checked in headless Chromium
#   make test      set up, then run all tests (pytest + nbval over the notebooks, in parallel); .ci/run calls this
#   make setup-browser  a system Chromium + fonts for the Netron pictures and the slides (Debian, as root: apt-get;
#                  else it says what to install); test, slides, lecture and screenshots run it first
#   make lab       JupyterLab on your own working copy of the notebooks (lab/, git-ignored), on localhost
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))

.PHONY: setup setup-browser lecture slides test test-here test-fast lint format bench screenshots results lab lab-reset notebooks-normalize clean

setup: $(STAMP)

# CPU machines: torch==2.13.0 first, by pip (pip's configuration may point at a local CPU wheel); an unpinned
# torch would pull GB of CUDA packages. GPU machines keep the torch they have (requirements.txt holds a range,
# which the installed torch satisfies, so nothing below replaces it). The rest by uv, which downloads in
# parallel: 43 s here against pip's 140 s; where uv cannot (no network to PyPI, a private index it is not
# told about), pip does it.
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	if ! $(PY) -c "import torch" 2>/dev/null; then \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q "torch>=2.11,<2.14"; \
	  else $(PY) -m pip install -q torch==2.13.0; fi; fi
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -r requirements.txt || $(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# A system Chromium for Playwright (no browser download) and fonts for its pictures (wqy: Netron's shape brackets).
# Nothing to do where lecture_code.export.netron.find_chromium finds one ($CHROMIUM if set, else one on PATH).
# Else, on Debian as root (a fresh CI machine), apt-get installs it (about 20 s); anywhere else this says what to
# install and goes on: the Netron and slides rendering tests then skip, saying why. LECTURE_NO_APT=1: never install.
BROWSER_PACKAGES := chromium fonts-dejavu-core fonts-wqy-microhei
BROWSER_NAMES := chromium chromium-browser google-chrome google-chrome-stable
NO_BROWSER := the Netron and slides rendering steps will be skipped
setup-browser:
	@if [ -n "$$CHROMIUM" ]; then \
	  [ -f "$$CHROMIUM" ] || echo "setup-browser: \$$CHROMIUM ($$CHROMIUM) is not a file: $(NO_BROWSER)"; exit 0; fi; \
	for name in $(BROWSER_NAMES); do command -v $$name >/dev/null 2>&1 && exit 0; done; \
	if [ -z "$$LECTURE_NO_APT" ] && [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
	  echo "setup-browser: no Chromium: apt-get install $(BROWSER_PACKAGES)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  { timeout 600 apt-get update -q && timeout 600 apt-get install -y -q --no-install-recommends $(BROWSER_PACKAGES); } \
	    || echo "setup-browser: apt-get failed: $(NO_BROWSER)"; \
	else \
	  echo "setup-browser: no Chromium (set \$$CHROMIUM, or on Debian: sudo apt-get install $(BROWSER_PACKAGES)): $(NO_BROWSER)"; \
	fi

# Notebooks into artifacts/notebooks/, pictures (GPU: full sizes into perf_screenshots/; CPU: --tiny into runs/), slides,
# then a summary: what ran, where the outputs are, on which device, in how long. LECTURE_ARGS="--skip notebooks" …
lecture: setup setup-browser
	$(PY) -m lecture_code.lecture $(LECTURE_ARGS)

# The deck from slides/deck.md: code cut from the sources, numbers and plots from benchmarks/results/ and
# perf_screenshots/. Needs a Chromium for the PDF and the check (setup-browser).
slides: setup setup-browser
	$(PY) -m lecture_code.slides --check

# Every test: pytest + nbval over the notebooks, one worker per core (pytest-xdist). --dist loadfile keeps each
# file's tests on one worker, so a notebook's cells run in order in one kernel; the 15 slowest are listed (CI time).
PYTHON ?= python3
PYTEST_ALL := -m pytest tests notebooks --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
  -p no:cacheprovider -n auto --dist loadfile --durations=15
test: setup setup-browser
	$(PY) $(PYTEST_ALL)

# The same tests with the Python already installed (no setup): a GPU machine without a package registry
# (benchmarks/run_gpu_suite.sh). make test-here PYTHON=/path/to/python3
test-here:
	$(PYTHON) $(PYTEST_ALL)

test-fast: setup
	$(PY) -m pytest tests -q -m "not slow"

lint: setup
	$(PY) -m ruff check lecture_code kernels tests benchmarks
	$(PY) -m ruff format --check lecture_code kernels tests benchmarks

format: setup
	$(PY) -m ruff format lecture_code kernels tests benchmarks
	$(PY) -m ruff check --fix lecture_code kernels tests benchmarks

bench: setup
	$(PY) -m benchmarks.bench_preprocess

screenshots: setup setup-browser
	$(PY) -m lecture_code.perf.screenshots

# RESULTS.md and the README's "Measured so far" table, from benchmarks/results/ and perf_screenshots/ sidecars.
results: setup
	$(PY) -m lecture_code.results

# The committed notebooks are the reference outputs: JupyterLab opens copies in lab/ (git-ignored), so running
# cells and autosave never rewrite them. `make lab-reset` replaces the copies with fresh ones.
LAB := lab
lab: setup
	mkdir -p $(LAB)
	for nb in $(NOTEBOOKS); do [ -e $(LAB)/$$(basename $$nb) ] || cp $$nb $(LAB)/; done
	$(PY) -m jupyter lab $(LAB) --ip 127.0.0.1 --ServerApp.root_dir=$(LAB) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

lab-reset:
	rm -rf $(LAB)

# Committed notebooks carry normalised metadata (checked by tests/test_notebook_metadata.py).
notebooks-normalize: setup
	$(PY) notebooks/normalize_metadata.py

clean:
	rm -rf artifacts runs .pytest_cache
