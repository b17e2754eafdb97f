# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := lake,models,ibis,dev
# pyproject.toml is the one list of pins; torch's pin is read from it.
TORCH := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
export HF_HUB_OFFLINE := 1
export DS_ACCELERATOR := cpu

.PHONY: install demo test smoke bench clean

install: $(STAMP)

# torch first, on its own: the pinned CPU wheel on local disk (left to the resolver, a bare torch
# requirement would pull a multi-GB CUDA build). Then the project with its declared dependencies.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[$(EXTRAS)]'
	$(BIN)/pip check
	touch $(STAMP)

demo: install
	$(BIN)/autheval demo

test: install
	$(BIN)/python -m pytest

# build the wheel, install it into a fresh venv outside the checkout, run evaluate and demo from it
smoke: install
	$(BIN)/python -m pytest tests/test_packaging.py

bench: install
	$(BIN)/python benchmarks/estimators.py
	$(BIN)/python benchmarks/monitoring.py
	$(BIN)/python benchmarks/scale.py --spark

clean:
	rm -rf warehouse/lake .pytest_cache
