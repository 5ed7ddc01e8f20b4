# Fresh machine → venv → deps → service/tests. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000

.PHONY: run test lint bench chaos stop clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# --no-compile: lark-oapi ships thousands of modules; Python compiles the few we import on first use.
PIP    := $(BIN)/pip install -q --no-compile --disable-pip-version-check

$(VENV)/.deps: requirements.txt | $(BIN)/python
	$(PIP) -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt | $(BIN)/python
	$(PIP) -r requirements.txt -r requirements-dev.txt
	touch $@ $(VENV)/.deps

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
