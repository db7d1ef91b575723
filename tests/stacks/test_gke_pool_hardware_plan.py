"""`python -m render gke` of a stack file with an A3 Ultra pool in one block of a reservation, compact,
and an exclusion for a training run: out/gke/plan.json holds what Google's A3 Ultra blueprint sets on
the pool (Cluster Toolkit examples/gke-a3-ultragpu: hyperdisk-balanced boot disk as the family
requires, the 32 bundled local SSDs as ephemeral storage, surge 0 / unavailable 1, the reservation
block, the no-minor-or-node-upgrades exclusion) and the control plane's minor; a pd-balanced A3 Ultra
pool exits 2 naming its diskType before anything is written."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from tests.conftest import PROJECT_DIR
from tests.render_cli import render_cli

A3_ULTRA = {
    "name": "h200", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
    "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 2}, "provisioning": "reservation",
    "reservation": "h200-res", "reservationBlock": "h200-res-block-0001", "compactPlacement": True,
}
RUN = {"name": "llm-run-7", "start": "2026-03-01T00:00:00Z", "end": "2026-03-25T00:00:00Z", "scope": "NO_UPGRADES"}


def _committed() -> dict:
    return yaml.safe_load((PROJECT_DIR / "Pulumi.gke.yaml").read_text())["config"]


def _gke(*pools: dict, **extra) -> dict:
    gke = copy.deepcopy(_committed()["gpu-cluster:gke"])
    gke["gpuPools"] = [*gke["gpuPools"], *pools]
    return {**gke, **extra}


def test_the_plan_holds_an_a3_ultra_pool_as_googles_blueprint_sets_it(tmp_path: Path):
    result = render_cli(tmp_path, "gke", {"gke": _gke(A3_ULTRA, maintenance={"exclusions": [
        RUN, {"name": "no-minor-or-node-upgrades-indefinite", "start": "2025-12-01T00:00:00Z",
              "untilEndOfSupport": True}]})})
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    resources = plan["resources"]
    (pool,) = [r["inputs"] for r in resources
               if r["type"] == "gcp:container/nodePool:NodePool" and r["inputs"]["name"] == "h200"]
    node = pool["nodeConfig"]
    assert (node["diskType"], node["ephemeralStorageLocalSsdConfig"]) == ("hyperdisk-balanced", {"localSsdCount": 32})
    assert node["reservationAffinity"]["values"] == ["h200-res/reservationBlocks/h200-res-block-0001"]
    assert pool["placementPolicy"] == {"type": "COMPACT"}
    assert pool["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}
    (cluster,) = [r["inputs"] for r in resources if r["type"] == "gcp:container/cluster:Cluster"]
    minor = ".".join(str(_committed()["gpu-cluster:kubernetesVersion"]).split(".")[:2])
    assert cluster["minMasterVersion"] == minor
    exclusions = cluster["maintenancePolicy"]["maintenanceExclusions"]
    assert [e["exclusionOptions"] for e in exclusions] == [
        {"scope": "NO_UPGRADES"}, {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}]
    # The plan says which minor GKE runs and what may upgrade when (the summary's outputs).
    upgrades = plan["outputs"]["upgrades"]
    assert upgrades["controlPlaneMinor"] == minor and upgrades["releaseChannel"].startswith("REGULAR")
    assert upgrades["gpuPools"]["h200"] == "surge (maxSurge 0, maxUnavailable 1)"
    assert upgrades["exclusions"][0] == "llm-run-7: NO_UPGRADES from 2026-03-01T00:00:00Z to 2026-03-25T00:00:00Z"
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f'"controlPlaneMinor": "{minor}"' in summary
    # The committed pools (g2, a2) keep GKE's pd-balanced and get no local SSD config.
    for other in (r["inputs"] for r in resources if r["type"] == "gcp:container/nodePool:NodePool"
                  and r["inputs"]["name"] in ("l4-spot", "a100")):
        assert other["nodeConfig"]["diskType"] == "pd-balanced"
        assert "ephemeralStorageLocalSsdConfig" not in other["nodeConfig"]


def test_a_persistent_disk_a3_ultra_pool_is_refused_before_anything_is_written(tmp_path: Path):
    result = render_cli(tmp_path, "gke", {"gke": _gke({**A3_ULTRA, "diskType": "pd-balanced"})})
    assert result.returncode == 2, result.stderr
    assert "gpu-cluster:gke.gpuPools[2].diskType" in result.stderr and "hyperdisk-balanced" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
