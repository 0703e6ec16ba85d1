# Developer entry points. `make demo` and `make test` are the README's first two commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint unit clean-runs

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The main job on the embedded default: converge the local machine in check mode (the simulated
# cluster replaces this as soon as `provision sim` lands).
demo: setup
	$(BIN)/provision validate examples/local/inventory.ini
	$(BIN)/provision apply --check examples/local/inventory.ini

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --offline playbooks roles

unit: setup
	$(BIN)/pytest -m unit -q

# Everything: lint, then every test layer.
test: lint
	$(BIN)/pytest -q
