"""Every plan a test renders must come up: the whole-cluster check runs on each `program.run`.

Registered from conftest.py as a pytest plugin. The autouse fixture wraps `render.program.run` so
that each plan a test evaluates (committed stacks and every config variant the tests build) also
goes through render.cluster.check and fails the test, naming the workload, node and reason, if it
would not come up. A test that breaks a plan on purpose to show the check finds it marks itself
`@pytest.mark.would_not_come_up`, or calls render.cluster.check itself on a plan it changes after
evaluation (as tests/render/test_cluster_check.py does).

Without the upstream charts the check cannot run: in CI that fails the test (CI must not pass by
skipping), elsewhere the plans go unchecked and tests/render/test_cluster_check.py skips with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from render import cluster, program

PROJECT_DIR = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "would_not_come_up: this test renders a plan that would not come up, on purpose")


def _upstream() -> Path | None:
    path = Path(os.environ.get("GPU_CLUSTER_UPSTREAM", PROJECT_DIR.parent / "shared" / "upstream"))
    return path if (path / "charts").is_dir() else None


@pytest.fixture(autouse=True)
def every_plan_comes_up(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("would_not_come_up"):
        yield
        return
    upstream = _upstream()
    if upstream is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the upstream charts are missing (CI=true; set GPU_CLUSTER_UPSTREAM): plans cannot be checked")
        yield
        return
    real = program.run

    def run_and_check(stack: str, *args: Any, **kwargs: Any) -> program.Plan:
        plan = real(stack, *args, **kwargs)
        project_dir = kwargs.get("project_dir", args[0] if args else program.PROJECT_DIR)
        if plan.config is not None and Path(project_dir) == program.PROJECT_DIR:
            report = cluster.check(plan, plan.config, upstream)
            if not report.ok:
                pytest.fail(f"the {stack} plan this test rendered would not come up:\n  " + "\n  ".join(report.problems))
        return plan

    monkeypatch.setattr(program, "run", run_and_check)
    yield
