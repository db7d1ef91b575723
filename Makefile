# The two commands on a fresh machine (README): `./plan` and `make test`. Each creates the
# virtual environment first when it is missing or older than the requirements: ./plan with
# requirements-plan.txt only (no torch: it sets up .venv itself), make with requirements-dev.txt
# (torch, the test and doc tools) on top of it. CI (.ci/run) installs the system tools and calls
# `./plan` and `make test` too.
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= lab

.PHONY: plan test lint render clean bench bench-smoke docs toolchain e2e
$(VENV)/.installed: requirements.txt requirements-plan.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

# The offline plan of a stack (default lab), with the whole-cluster check: out/<stack>/summary.md.
# A shortcut for `./plan $(STACK)`: make exits 2 for any failed recipe, so render's 1, 3 and 4 all
# read 2 here; ./plan exits with render's own status. No venv prerequisite: ./plan sets up its own
# (requirements-plan.txt), so `make plan` downloads no torch either.
plan:
	./plan $(STACK)

render: plan

# Both cores (pytest-xdist; TEST_WORKERS=1 for one process): whole files per worker (--dist loadfile),
# so a file's module fixtures are built once and its tests run in order, as in one process. Tests
# share no fixed port, file or namespace name (each uses free ports, tmp_path, unique names).
TEST_WORKERS ?= auto
# The e2e tier (tests/e2e, the real control plane) is left out here: `make e2e` runs it.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not e2e"

# The e2e tier against a real control plane on loopback (docs/verification.md), made from the
# toolchain (built first where missing: a built one is reused) and the lab stack's plan; writes
# out/e2e/report.json. One process: the tests share one control plane. E2E_ARGS go to pytest
# (e.g. E2E_ARGS=-x).
E2E_ARGS ?=
e2e: $(VENV)/.installed toolchain
	$(PY) -m e2e $(E2E_ARGS)

# CI (.ci/run) runs ruff and mypy too; pre-commit runs them the same way: .pre-commit-config.yaml.
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	shellcheck .ci/run plan tools/toolchain/build.sh
	$(PY) -m mypy

clean:
	rm -rf out .pytest_cache

# Benchmarks (bench/README.md): plan evaluation vs the SDK floor, the whole-cluster check's cost,
# and the critical path of `up` (the trainer's own overhead: bench/trainer_overhead.py).
bench: $(VENV)/.installed
	$(PY) bench/plan_scale.py
	$(PY) bench/check_scale.py
	$(PY) bench/critical_path.py
	$(PY) bench/engine_scale.py

# Every benchmark at its smallest size (~1 min), so none can break unnoticed: CI (.ci/run) runs it.
# Any script's failure (an error, a plan that would not come up, a step with no cost) fails it.
# engine_scale.py needs the toolchain (make toolchain): .ci/run builds it first.
bench-smoke: $(VENV)/.installed
	$(PY) bench/plan_scale.py --smallest
	$(PY) bench/check_scale.py --smallest
	$(PY) bench/critical_path.py --smallest
	$(PY) bench/trainer_overhead.py --smallest
	$(PY) bench/engine_scale.py --smallest

# The documentation site from docs/ (mkdocs.yml): --strict fails on a broken link or anchor and on a
# page left out of the nav. Written to tmp/site (ignored by git); CI (.ci/run) runs it.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The real components the tests run (kubeadm, kube-apiserver, etcd, KWOK...), built from their
# pinned Go modules into ~/.cache/gpu-cluster/toolchain (GPU_CLUSTER_TOOLCHAIN); a second run builds
# nothing. TOOLCHAIN=kubernetes builds only those named (docs/toolchain.md). Needs Go 1.26.
TOOLCHAIN ?=
toolchain:
	tools/toolchain/build.sh $(TOOLCHAIN)
