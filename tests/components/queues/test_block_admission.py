"""waitForPodsReady.blockAdmission (queues.blockAdmission, components/queues/kueue.py): written out in
the manager's Configuration as rendered by the pinned chart, off unless a stack turns it on. Kueue
0.19.2 blocks cluster-wide: its scheduler asks the cache whether every admitted workload, of every
ClusterQueue, has PodsReady (pkg/scheduler waitForPodsReadyIfNeeded,
PodsReadyForAllAdmittedWorkloads), so with it on one team's slow-starting job holds every team's
admissions; docs/queues.md ("Why it waits") says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components import versions
from components.queues import kueue
from render import program
from render.cluster.objects import chart_dir, parse_documents, render_chart
from tests.conftest import stack_config_with


def _rendered_config(upstream_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
    """The manager's Configuration as the pinned chart renders the Release's values."""
    path = chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION)
    rendered, _ = render_chart(path, values, kueue.RELEASE_NAME, kueue.NAMESPACE, "1.34.2")
    (cm,) = [d for text in rendered.values() for d in parse_documents(text)
             if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("manager-config")]
    return dict(yaml.safe_load(cm["data"]["controller_manager_config.yaml"]))


def _release_values(plan: program.Plan) -> dict[str, Any]:
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == kueue.RELEASE_NAME]
    return dict(release.inputs["values"])


@pytest.mark.parametrize(("setting", "expected"), [(None, False), (True, True), (False, False)])
def test_the_plans_manager_config_sets_block_admission_explicitly(upstream_dir: Path, setting: bool | None,
                                                                  expected: bool) -> None:
    queues = {} if setting is None else {"blockAdmission": setting}
    plan = program.run("lab-ha", config=stack_config_with("lab-ha", queues=queues))
    ready = _rendered_config(upstream_dir, _release_values(plan))["waitForPodsReady"]
    assert "blockAdmission" in ready and ready["blockAdmission"] is expected  # never left to Kueue's default
    assert ready["timeout"] == "10m"  # all-or-nothing stays on either way
