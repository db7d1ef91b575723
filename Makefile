# Developer shortcuts; CI runs .ci/run, which installs these tools and calls `python -m pytest -q`.
PY ?= .venv/bin/python
STACK ?= lab

.PHONY: setup test lint render clean bench
setup:
	python3 -m venv .venv && $(PY) -m pip install -q -r requirements-dev.txt

test:
	$(PY) -m pytest -q

# CI (.ci/run) runs ruff and mypy too; pre-commit runs them the same way: .pre-commit-config.yaml.
lint:
	$(PY) -m ruff check .
	shellcheck .ci/run
	$(PY) -m mypy

render:
	$(PY) -m render $(STACK) --out out/$(STACK)

clean:
	rm -rf out .pytest_cache

# Benchmarks (bench/README.md): plan evaluation vs the SDK floor, and the critical path of `up`.
bench:
	$(PY) bench/plan_scale.py
	$(PY) bench/critical_path.py
