# The two fresh-machine commands are `make quickstart` and `make test` (see README). Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup quickstart test test-fast lint bench clean

setup:
	bash scripts/setup.sh

quickstart: setup
	$(PY) scripts/run_notebook.py examples/quickstart.ipynb

# Lints (ruff, mypy, prettier, eslint, tsc) and the TypeScript unit tests first (a minute), then the whole suite on
# real components.
test: setup lint
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" jlpm test
	$(PY) -m pytest tests

# The quick tier while editing: tests that need no engines, server or browser (marker `fast`, under a minute).
test-fast:
	$(PY) -m pytest -m fast tests

lint:
	$(VENV)/bin/ruff check jupyter_dl tests bench scripts
	$(VENV)/bin/ruff format --check jupyter_dl tests bench scripts
	$(VENV)/bin/mypy
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" jlpm lint:check

bench: setup
	$(PY) bench/overhead.py

clean:
	rm -rf build dist jupyter_dl/labextension labextension/lib labextension/node_modules
