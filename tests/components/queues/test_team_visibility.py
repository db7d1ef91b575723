"""Kueue's visibility API for the teams (components/queues/kueue.py, objects.py): the pinned chart,
rendered with the program's values, serves visibility.kueue.x-k8s.io/v1beta1 (its APIService points
at a Service of the release that selects the manager's pods, whose container serves the port; the
manager's Configuration keeps VisibilityOnDemand on), and a team's Role grants its group what the
chart's own pending-workloads-lq-viewer ClusterRole grants, no more: its LocalQueues' pending
workloads, not the ClusterQueues' (every team's). tests/e2e/test_team_rbac.py asks the real API
server's RBAC authorizer the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components import versions
from components.queues import kueue, objects
from render.cluster.objects import chart_dir, parse_documents, render_chart


@pytest.fixture(scope="module")
def chart(upstream_dir: Path) -> list[dict[str, Any]]:
    path = chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION)
    rendered, _ = render_chart(path, kueue.kueue_values(10, ["team-vision"], False),
                               kueue.RELEASE_NAME, kueue.NAMESPACE, "1.34.2")
    return [d for text in rendered.values() for d in parse_documents(text)]


def _one(docs: list[dict[str, Any]], kind: str, name_ends: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_ends)]
    return found


def test_the_chart_serves_the_visibility_api_from_the_manager(chart: list[dict[str, Any]]) -> None:
    group, version = kueue.VISIBILITY_API.split("/")
    api = _one(chart, "APIService", f"{version}.{group}")
    assert api["spec"]["group"] == group and api["spec"]["version"] == version
    service = _one(chart, "Service", api["spec"]["service"]["name"])
    assert service["metadata"]["namespace"] == api["spec"]["service"]["namespace"] == kueue.NAMESPACE
    (manager,) = [d for d in chart if d["kind"] == "Deployment"]
    pod_labels = manager["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["containerPort"] for c in manager["spec"]["template"]["spec"]["containers"] for p in c.get("ports") or []}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    (cm,) = [d for d in chart if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("manager-config")]
    assert yaml.safe_load(cm["data"]["controller_manager_config.yaml"])["featureGates"][kueue.VISIBILITY_GATE] is True


def test_a_team_reads_its_own_queues_pending_workloads_as_the_charts_viewer_role(chart: list[dict[str, Any]]) -> None:
    viewer = _one(chart, "ClusterRole", "pending-workloads-lq-viewer-role")
    (granted,) = viewer["rules"]
    team = [r for r in objects.team_role("team-vision")["rules"] if objects.VISIBILITY_GROUP in r["apiGroups"]]
    assert team == [{"apiGroups": granted["apiGroups"], "resources": granted["resources"],
                     "verbs": granted["verbs"]}]
    every_team = _one(chart, "ClusterRole", "pending-workloads-cq-viewer-role")
    assert not set(every_team["rules"][0]["resources"]) & set(team[0]["resources"])  # not the ClusterQueues'
