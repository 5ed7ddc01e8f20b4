# Fresh machine → venv → deps → service/tests. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000

.PHONY: run test lint bench chaos mutants eval stop clean browser

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

# LOG_TERMINAL: honcho pipes every process's output, so tell them whether a person is reading (readable lines).
run: $(VENV)/.deps
	PATH="$(CURDIR)/$(BIN):$$PATH" LOG_TERMINAL=$$([ -t 1 ] && echo 1 || echo 0) \
	  $(BIN)/honcho start -f Procfile -p $(PORT)

# Most tests wait on their own processes (workers, sweeper, emulators), so four pytest workers share 2 cores
# well (pytest-xdist, one test file per worker: a file's rig is started once; the longest files first, see
# tests/conftest.py). The short fault suite (tests/test_chaos.py, its own stack) is one of those files: its tests
# assert no timing bound but generous drain deadlines, and it mostly waits on its stack.
test: $(VENV)/.dev browser
	$(BIN)/python -m pytest -n 4 --dist loadfile --durations=25

# The console's browser tests (tests/test_console_browser.py) drive Debian's chromium through its chromedriver, both
# from the distribution's packages (never a browser download). Installed here when missing and run as root.
APT_BROWSER := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver for the browser tests"; \
	  $(APT_BROWSER) >/dev/null 2>&1 || { apt-get update -q >/dev/null && $(APT_BROWSER) >/dev/null; }; \
	else \
	  echo "the browser tests need Debian's chromium and chromium-driver: sudo apt-get install chromium chromium-driver"; \
	fi

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(VENV)/.dev
	$(BIN)/python -m bench

chaos: $(VENV)/.dev
	$(BIN)/python -m chaos

# What a model makes of the requests (evals/): scenarios recorded through a fresh stack, their structure checked, each
# answered for its rubric — offline by the stand-in (must pass: tests/test_eval.py runs it in `make test`), with
# ANTHROPIC_API_KEY set by the configured model (a table: scenario, pass/fail, tokens, cache share). Run it before and
# after changing a prompt, a tool's description or what a request carries.
eval: $(VENV)/.dev
	$(BIN)/python -m evals

# Break each guard in tests/mutants.py once (in a copy of the tree) and run the tests that claim it.
mutants: $(VENV)/.dev
	$(BIN)/python -m tests.mutants

stop: $(VENV)/.deps
	$(BIN)/python -m state.embedded stop

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
