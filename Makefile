# Fresh machine → venv → deps → service/tests. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000

.PHONY: run test lint bench chaos stop clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.deps: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.deps
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

run: $(VENV)/.deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho start -f Procfile -p $(PORT)

test: $(VENV)/.dev
	$(BIN)/python -m pytest

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(VENV)/.dev
	$(BIN)/python -m bench

chaos: $(VENV)/.dev
	$(BIN)/python -m chaos

stop: $(VENV)/.deps
	$(BIN)/python -m memory.embedded stop

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
