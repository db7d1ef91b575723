"""kueue#9616 in the manager's Configuration, rendered through the pinned chart: waitForPodsReady's
recoveryTimeout written out (the timeout's minutes) and the topology-aware failed-node replacement
gates in the Configuration's featureGates, with the chart's --feature-gates flag left off (Kueue
0.19.2 refuses both at once: cmd/kueue/main.go, LoadAndValidateFeatureGates). The whole-cluster
check reads the same ConfigMap (render/cluster/kueue_node_replacement.recovery_of)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components import versions
from components.queues import kueue
from render.cluster import kueue_node_replacement as nr
from render.cluster.objects import Obj, chart_dir, parse_documents, render_chart


def _render(upstream_dir: Path, minutes: int) -> list[dict[str, Any]]:
    path = chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION)
    rendered, _ = render_chart(path, kueue.kueue_values(minutes, ["training"], False),
                               kueue.RELEASE_NAME, kueue.NAMESPACE, "1.34.2")
    return [d for text in rendered.values() for d in parse_documents(text)]


def test_the_rendered_manager_config_recovers_and_replaces_tainted_nodes(upstream_dir: Path) -> None:
    docs = _render(upstream_dir, 12)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("manager-config")]
    cfg = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    assert cfg["waitForPodsReady"]["recoveryTimeout"] == "12m" == cfg["waitForPodsReady"]["timeout"]
    assert all(cfg["featureGates"][g] is True for g in ("TASFailedNodeReplacement", "TASReplaceNodeOnNodeTaints",
                                                      "TASFailedNodeReplacementFailFast", "TopologyAwareScheduling"))
    recovery = nr.recovery_of([Obj(cm, "urn:kueue", "release kueue")])
    assert recovery is not None and recovery.fail_fast and recovery.recovery_timeout_s == 720.0, recovery


def test_feature_gates_are_not_also_passed_as_a_flag(upstream_dir: Path) -> None:
    (manager,) = [d for d in _render(upstream_dir, 10) if d["kind"] == "Deployment"]
    args = [a for c in manager["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
    assert args and not [a for a in args if a.startswith("--feature-gates")], args
