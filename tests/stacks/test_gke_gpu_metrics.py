"""gke.gpuMetrics (config/gke_metrics.py): one DCGM exporter per GPU node, this program's or GKE's managed
one, evaluated by the real program under the recording mocks and rendered by `python -m render` with
the whole-cluster check:

  - by default the cluster's monitoring components are SYSTEM_COMPONENTS alone (GKE's DCGM package, on by
    default for new clusters, off) and the program's DCGM exporter chart runs;
  - gkeManaged turns GKE's DCGM package and managed Prometheus on and installs no exporter of its own,
    and the plan still comes up;
  - gkeManaged beside the GPU Operator, a pool with its own driver, or the in-cluster monitoring is
    refused naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import config
from config import ConfigError
from render import program
from tests.config.test_gke_config import A100, L4, gke_raw, pool
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

RELEASE = "kubernetes:helm.sh/v3:Release"


def _releases(plan: program.Plan) -> set[str]:
    return {r.name for r in plan.of_type(RELEASE)}


def test_by_default_gkes_dcgm_package_is_off_and_the_programs_exporter_runs():
    plan = program.run("gke")
    (cluster,) = plan.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["monitoringConfig"] == {"enableComponents": ["SYSTEM_COMPONENTS"]}
    assert "gpu-dcgm-exporter" in _releases(plan)


def _managed_gke() -> dict[str, object]:
    return {**json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"]), "gpuMetrics": "gkeManaged"}


def test_gke_managed_metrics_turn_gkes_exporter_on_and_the_programs_off(tmp_path: Path, upstream_dir: Path):
    plan = program.run("gke", config=stack_config_with("gke", gke={"gpuMetrics": "gkeManaged"},
                                                       monitoring={"enabled": False}))
    (cluster,) = plan.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["monitoringConfig"] == {"enableComponents": ["SYSTEM_COMPONENTS", "DCGM"],
                                                  "managedPrometheus": {"enabled": True}}
    assert "gpu-dcgm-exporter" not in _releases(plan) and "gpu-gfd" in _releases(plan)
    result = render_cli(tmp_path, "gke", {"gke": _managed_gke(), "monitoring": {"enabled": False}}, upstream=upstream_dir)
    assert result.returncode == 0, result.stderr
    assert "dcgm-exporter" not in (tmp_path / "out" / "summary.md").read_text()


def _problem(raw: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as err:
        config.parse(raw)
    return dict(err.value.problems)["gke.gpuMetrics"]


def test_gke_managed_beside_the_operator_is_refused():
    raw = gke_raw(pool(L4, driver="installer-ubuntu"), gpu={"stack": "operator"}, gpuMetrics="gkeManaged")
    raw["monitoring"] = {"enabled": False}
    assert "the GPU Operator runs its own DCGM exporter" in _problem(raw)


def test_gke_managed_with_a_pool_installing_its_own_driver_is_refused_naming_the_pool():
    raw = gke_raw(L4, pool(A100, driver="installer-cos"), gpuMetrics="gkeManaged")
    raw["monitoring"] = {"enabled": False}
    assert "gke.gpuPools[1] install theirs" in _problem(raw)


def test_gke_managed_with_the_in_cluster_monitoring_is_refused():
    assert "its GPU dashboards and alert rules would stay empty" in _problem(gke_raw(gpuMetrics="gkeManaged"))
