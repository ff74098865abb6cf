# Two commands for a fresh machine: `make demo` (the main job) and `make test` (the test suite).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test demo lint bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest

demo: setup
	$(BIN)/trident demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python -m bench.run_all
