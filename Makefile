# On a fresh machine: `make demo` (the main job) and `make test` (the test suite);
# `make ui` then opens the Dagster UI over the demo's home (.trident) on http://127.0.0.1:3000.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test soak demo ui lint bench

# TRIDENT_WITH_BROWSER=1 (CI) also needs Debian's chromium: a stamp of its own, so a machine
# set up without it (e.g. by `make demo`) still gets it.
setup: $(VENV)/.installed $(if $(filter 1,$(TRIDENT_WITH_BROWSER)),$(VENV)/.browser)

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

$(VENV)/.browser: $(VENV)/.installed
	TRIDENT_WITH_BROWSER=1 bash scripts/setup.sh
	touch $@

# The suite in PYTEST_WORKERS pytest-xdist workers (0: one process), a whole file per worker
# (the tests of one file share its module fixtures).
PYTEST_WORKERS ?= 2

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# What `make test` leaves out (marked slow): the long soaks (`make test` runs their short
# versions) and the rest of the crash matrices (`make test` runs a covering selection).
soak: setup
	$(BIN)/pytest -m slow

demo: setup
	$(BIN)/trident demo

ui: setup
	$(BIN)/trident ui

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python -m bench.run_all
