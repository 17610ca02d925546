# dra-gpu developer commands. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PACKAGES := dra_driver kubelet_plugin controller

.PHONY: test lint imports typecheck unit demo bench proto clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## test: install into .venv, then ruff, the import contracts (.importlinter), mypy --strict and pytest
test: $(STAMP) lint imports typecheck unit

lint: $(STAMP)
	$(VENV)/bin/ruff check $(PACKAGES) tests bench
	$(VENV)/bin/ruff format --check $(PACKAGES) tests bench

## imports: the boundaries between dra_driver, kubelet_plugin and controller
imports: $(STAMP)
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy $(PACKAGES) tests/fakes

unit: $(STAMP)
	$(VENV)/bin/pytest -q

## demo: the main job, on a simulated dgx-h100 node
demo: $(STAMP)
	$(VENV)/bin/dra-gpu demo

## bench: benchmarks; numbers go into the README
bench: $(STAMP)
	$(PY) -m bench

## proto: regenerate the gRPC stubs from proto/ (a test fails if they drift)
proto: $(STAMP)
	$(PY) -m kubelet_plugin.protogen

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
