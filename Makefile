# Sagan: `make run` (the embedded default) and `make test` (the whole suite) — see README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
# The interpreter that creates the venv: the first of these that is Python 3.11 or newer.
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo $$p; break; }; done)
PIP_FLAGS := --disable-pip-version-check --progress-bar off -q
PYTEST_ARGS ?=

.PHONY: help run demo test bench lint

help:
	@echo "make run        start Sagan on this machine (SQLite + embedded Redis); DEMO=1 loads demo data, PORT=N"
	@echo "make demo       make run with demo data and scripted agents: watch one experiment travel the board"
	@echo "make test       run the test suite (starts PostgreSQL/Redis if installed; PYTEST_ARGS=... to narrow)"
	@echo "make bench      run the benchmarks in bench/ (figures: docs/performance.md)"
	@echo "make lint       ruff, if installed"

$(PY):
	@if [ -z "$(PYTHON)" ]; then echo "Sagan needs Python 3.11 or newer (python3 --version)."; exit 1; fi
	$(PYTHON) -m venv $(VENV)

# Reinstall when requirements.txt changes; pip only fetches what is missing.
$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install $(PIP_FLAGS) -r requirements.txt
	@touch $@

# The analysis environment run_analysis imports from (numpy, pandas, scipy, matplotlib); a
# stamp makes it instant when already built. Without it Sagan runs and run_analysis says so.
ANALYSIS_ENV := $(PY) scripts/analysis_env.py || echo "warning: no analysis environment; run_analysis is unavailable"

demo: $(STAMP)
	@$(ANALYSIS_ENV)
	$(PY) scripts/run_embedded.py --demo --demo-agents $(if $(PORT),--port $(PORT))

run: $(STAMP)
	@$(ANALYSIS_ENV)
	$(PY) scripts/run_embedded.py $(if $(filter 1 true yes on,$(DEMO)),--demo) $(if $(PORT),--port $(PORT))

test: $(STAMP)
	$(PY) scripts/test_services.py
	@$(ANALYSIS_ENV)
	$(PY) -m pytest $(PYTEST_ARGS)

# Each bench prints one JSON document and a short table; docs/performance.md has the figures.
# They need PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL) and wrk.
bench: $(STAMP)
	@shopt -s nullglob; files=(bench/bench_*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "No benchmarks yet (bench/bench_*.py)."; exit 0; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(PY) "$$f" || exit 1; done

lint:
	@if [ -x $(VENV)/bin/ruff ]; then $(VENV)/bin/ruff check .; \
	elif command -v ruff >/dev/null; then ruff check .; \
	else echo "ruff is not installed (pip install ruff); nothing to lint with."; fi
