"""`./plan`'s environment (requirements-plan.txt) is all that `python -m render` needs: each committed
stack is rendered, with the whole-cluster check, the cluster picture and `--against`, by a Python
that cannot import any package outside that environment (tests/outside_the_plan/sitecustomize.py),
as on a fresh machine where ./plan installed only requirements-plan.txt. torch's CUDA build (several
GB), wandb, numpy and the test tools come only with `make` (requirements-dev.txt)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from render.cluster import memo
from tests.conftest import PROJECT_DIR
from tests.plan_environment import closure, files_outside, requirements
from tests.workloads.test_queues_docs_examples import _example

GUARD = PROJECT_DIR / "tests" / "outside_the_plan"
COMMITTED_STACKS = ("lab", "lab-ha", "dev", "gke")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON list of the files of every installed package that requirements-plan.txt does not bring in."""
    plan = closure(requirements(PROJECT_DIR / "requirements-plan.txt"))
    listing = tmp_path_factory.mktemp("outside-the-plan") / "files.json"
    listing.write_text(json.dumps(files_outside(plan)))
    return listing


def _guarded(tmp_path: Path, outside: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """`python ARGS` in the project, unable to import what is outside the plan; and what it was refused."""
    log = tmp_path / "refused.log"
    log.write_text("")
    result = subprocess.run([sys.executable, *args], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
                            check=False, env={**os.environ, **env, "PYTHONPATH": f"{GUARD}:{PROJECT_DIR}",
                                              "OUTSIDE_THE_PLAN": str(outside), "OUTSIDE_THE_PLAN_LOG": str(log)})
    return result, log.read_text()


def test_the_guard_refuses_packages_outside_the_plan_and_allows_those_inside(tmp_path: Path, outside: Path) -> None:
    """Without this the render test below could pass with a guard that refuses nothing."""
    for module in ("torch", "numpy", "wandb", "pytest"):
        result, refused = _guarded(tmp_path, outside, "-c", f"import {module}")
        assert result.returncode == 1 and "not in ./plan's environment" in result.stderr, (module, result.stderr)
        assert refused.startswith(f"{module} "), refused
    result, refused = _guarded(tmp_path, outside, "-c", "import pulumi_kubernetes, kubernetes_validate, helm_python, "
                               "jsonschema, referencing, cronsim, yaml, pydantic, google.protobuf, opentelemetry.sdk")
    assert result.returncode == 0 and refused == "", result.stderr + refused


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_render_imports_nothing_outside_the_plans_environment(stack: str, tmp_path: Path, outside: Path,
                                                              upstream_dir: Path) -> None:
    against = ["--against", str(PROJECT_DIR / f"Pulumi.{stack}.yaml")] if stack == "lab" else []
    if stack == "lab-ha":  # --job too: the admission policy's CEL (cel-python), the schemas, Kueue's model
        (job_file := tmp_path / "job.yaml").write_text(yaml.safe_dump(_example("Job")))
        against = ["--job", str(job_file)]
    # A memo of its own: a check answered from an earlier run's memo would import less than a first run.
    result, refused = _guarded(tmp_path, outside, "-m", "render", stack, "--out", str(tmp_path / "out"), *against,
                               GPU_CLUSTER_UPSTREAM=str(upstream_dir), **{memo.CACHE_ENV: str(tmp_path / "memo")})
    assert refused == "", f"render imported packages that ./plan does not install:\n{refused}"
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "summary.md").is_file()


def test_no_package_is_pinned_twice_and_each_is_pinned() -> None:
    """One home per package: the runtime, the plan's and the dev requirements each add their own."""
    named: Counter[str] = Counter()
    for path in sorted(PROJECT_DIR.glob("requirements*.txt")):
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                requirement = Requirement(line)
                assert str(requirement.specifier).startswith("=="), f"{path.name}: {line} is not pinned"
                named[canonicalize_name(requirement.name)] += 1
    assert [name for name, count in named.items() if count > 1] == []
