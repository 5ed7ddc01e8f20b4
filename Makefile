# Fresh machine → venv → deps → service/tests. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000

.PHONY: run test lint bench chaos mutants stop clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One resolver run for both files. Byte-compiling at install stays on: with PYTHONDONTWRITEBYTECODE set (as on
# CI) nothing compiled later is kept, and every process would compile lark-oapi's modules again.
PIP    := $(BIN)/pip install -q --disable-pip-version-check

$(VENV)/.deps: requirements.txt | $(BIN)/python
	$(PIP) -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt | $(BIN)/python
	$(PIP) -r requirements.txt -r requirements-dev.txt
	touch $@ $(VENV)/.deps

run: $(VENV)/.deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho start -f Procfile -p $(PORT)

# The short fault suite (tests/test_chaos.py) brings its own stack: it runs alongside the rest, which mostly
# waits on its own processes, so the whole suite fits the 10-minute budget on 2 cores.
test: $(VENV)/.dev
	@log=$$(mktemp); \
	$(BIN)/python -m pytest -q tests/test_chaos.py > $$log 2>&1 & chaos=$$!; \
	$(BIN)/python -m pytest --ignore=tests/test_chaos.py; rc=$$?; \
	wait $$chaos; crc=$$?; \
	echo "--- tests/test_chaos.py (the short fault suite, run alongside) ---"; cat $$log; rm -f $$log; \
	test $$rc -eq 0 && test $$crc -eq 0

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(VENV)/.dev
	$(BIN)/python -m bench

chaos: $(VENV)/.dev
	$(BIN)/python -m chaos

# Break each guard in tests/mutants.py once (in a copy of the tree) and run the tests that claim it.
mutants: $(VENV)/.dev
	$(BIN)/python -m tests.mutants

stop: $(VENV)/.deps
	$(BIN)/python -m memory.embedded stop

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
