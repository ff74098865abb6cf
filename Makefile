# On a fresh machine: `make demo` (the main job) and `make test` (the test suite; `make check`
# the whole of it, what CI runs);
# `make ui` then opens the Dagster UI over the demo's home (.trident) on http://127.0.0.1:3000.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test check soak demo ui lint bench

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
PYTEST := $(BIN)/pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# `make test`: lint, types and the suite without its `extended` and `slow` tests (the end-to-end
# runs of `dagster dev`, `dg` and the demo, the chaos soaks, the rest of the crash matrices).
test: setup lint
	$(BIN)/mypy
	$(PYTEST) -m "not slow and not extended"

# `make check` (what CI runs): lint, types and the whole suite but the long soaks.
check: setup lint
	$(BIN)/mypy
	$(PYTEST)

# What `make check` leaves out (marked slow): the long soaks (`make check` runs their short
# versions) and the rest of the crash matrices (`make check` runs a covering selection).
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
