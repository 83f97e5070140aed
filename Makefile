# One task runner for people and CI.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: install run test test-min-deps properties lint typecheck bench clean browser screenshots

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/memstrata serve

# Lint first: a style or type error fails CI like a failing test. The suite runs on
# TEST_WORKERS pytest workers (each starts its own PostgreSQL and embedding server), then the
# tests marked `serial` (the fault and load tests, which time memstrata against work they
# start themselves) alone. The slowest tests are listed, to keep the whole suite within
# CI's budget as it grows.
TEST_WORKERS ?= 2
test: lint browser
	$(BIN)/python -m pytest -m "not slow and not serial" -n $(TEST_WORKERS) --durations=25 tests benchmarks
	$(BIN)/python -m pytest -m "serial and not slow" --durations=10 tests benchmarks

# The declared lower bounds, tested: a fresh venv in a scratch directory gets every direct
# dependency, the dev extra's too, at the oldest release pyproject.toml allows (uv's
# lowest-direct resolution; what they pull in comes at its newest), then runs the tests that
# caught a false bound before. `make install` only ever gets the newest releases, so without
# this a bound is a guess. Not part of `make test`: it needs the package index and takes
# about 5 minutes. uv is installed into that venv only, as pip installs the other tools.
MIN_VENV ?= $(or $(TMPDIR),/tmp)/memstrata-min-deps
MIN_DEPS_TESTS ?= tests/db tests/api tests/cli/test_help_flags.py tests/cli/test_header_timeout.py \
  tests/mcp/test_stdio.py tests/agent/test_quote_html_blocks.py tests/agent/test_setext.py \
  tests/retrieval/test_binary_insert.py tests/retrieval/test_tokenize_unspaced.py \
  tests/retrieval/test_tokenize.py
test-min-deps:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install -q uv
	$(MIN_VENV)/bin/uv pip install -q --python $(MIN_VENV)/bin/python --resolution lowest-direct -e '.[dev]'
	PATH="$(MIN_VENV)/bin:$$PATH" $(MIN_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  -m "not slow and not serial" -n $(TEST_WORKERS) $(MIN_DEPS_TESTS)

# The property tests (Hypothesis) on a fresh random seed. `make test` under CI=true replays
# the same examples every run (Hypothesis derandomizes there), so new shapes are only drawn
# here; HYPOTHESIS_SEED=N replays a run, and a failure's example is kept in .hypothesis/ for the next.
ifndef HYPOTHESIS_SEED
HYPOTHESIS_SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
properties: $(STAMP)
	@echo "Hypothesis seed $(HYPOTHESIS_SEED): HYPOTHESIS_SEED=$(HYPOTHESIS_SEED) make properties replays this run"
	env -u CI $(BIN)/python -m pytest -q -m "property and not slow" -n $(TEST_WORKERS) --hypothesis-seed=$(HYPOTHESIS_SEED) tests

# The browser tests (tests/web) drive Debian's Chromium; Playwright's own browser download
# is never used. As root (these machines, CI) a missing one is installed; elsewhere the
# tests are skipped with a message saying how to install it (and fail under CI=true).
browser:
	@if [ -z "$$CHROMIUM_PATH" ] && ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "note: no chromium found; the browser tests will be skipped (apt-get install chromium)"; \
	  fi; \
	fi

# Screenshots of the page's three views for the docs (docs/img/*.png).
screenshots: $(STAMP) browser
	$(BIN)/python -m tests.web.screenshots docs/img

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

typecheck: $(STAMP)
	$(BIN)/mypy src

bench: $(STAMP)
	$(BIN)/python -m pytest -m slow tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
