# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export DS_ACCELERATOR := cpu

.PHONY: install demo test bench clean

install: $(STAMP)

# torch first: the pinned CPU wheel on local disk (a bare torch requirement would pull a CUDA build).
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: install
	$(BIN)/autheval demo

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/estimators.py

clean:
	rm -rf warehouse/lake .pytest_cache
