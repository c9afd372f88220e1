# The two fresh-machine commands are `make quickstart` and `make test` (see README). Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup quickstart test bench clean

setup:
	bash scripts/setup.sh

quickstart: setup
	$(PY) scripts/run_notebook.py examples/quickstart.ipynb

test: setup
	$(PY) -m pytest tests

bench: setup
	$(PY) bench/overhead.py

clean:
	rm -rf build dist jupyter_dl/labextension labextension/lib labextension/node_modules
