# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := lake,models,ibis,team,dev
# pyproject.toml is the one list of pins; torch's pin is read from it.
TORCH := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
export HF_HUB_OFFLINE := 1
export DS_ACCELERATOR := cpu

.PHONY: install demo lint test smoke bench clean

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

# the house's tools (pyproject.toml [tool.ruff], [tool.mypy]): lint, format and types, in seconds
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# lint first, then the suite on every core (pytest-xdist; a test file's tests share one worker, so its
# module fixtures are built once)
test: lint
	$(BIN)/python -m pytest -n auto --dist loadfile

# build the wheel, install it into a fresh venv outside the checkout, run evaluate and demo from it
smoke: install
	$(BIN)/python -m pytest tests/test_packaging.py

bench: install
	$(BIN)/python benchmarks/estimators.py
	$(BIN)/python benchmarks/monitoring.py
	$(BIN)/python benchmarks/scale.py --spark
	$(BIN)/python benchmarks/sites.py --sites 10 --records 1000000 --replicates 5000
	$(BIN)/python benchmarks/sites_coverage.py
	$(BIN)/python benchmarks/monitoring_family.py
	$(BIN)/python benchmarks/small_sample_coverage.py
	$(BIN)/python benchmarks/training_curves.py

clean:
	rm -rf warehouse/lake .pytest_cache
