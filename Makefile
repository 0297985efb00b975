# The README's commands. Each target builds what it needs: a fresh machine
# only has python3.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.minidl-installed

.PHONY: setup test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,mpi,plot]" torch==2.13.0
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/bench_mlp.py

clean:
	rm -rf $(VENV) build *.egg-info
