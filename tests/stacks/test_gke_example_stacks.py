"""The realistic gke stack files of issue 35's "Done when" (docs/examples/gke/*.yaml, linked from
docs/getting-started/gke.md), each rendered by `python -m render` as a user runs it, with the
whole-cluster check: every one must come up (exit 0), and its plan.json must hold what Google's
documentation and Cluster Toolkit's blueprints set for that machine and option (each file's header
names its source).

Multi-node A3 High / Mega / Ultra and A4 plan with their GPUDirect networks (TCPX, TCPXO, RDMA over
gIB: the pools' additional node networks, gVNIC, multi-networking, a Network object each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import PROJECT_DIR
from tests.render_cli import render_text

EXAMPLES = PROJECT_DIR / "docs" / "examples" / "gke"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
NODE_POOL, CLUSTER = "gcp:container/nodePool:NodePool", "gcp:container/cluster:Cluster"
FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


class Rendered:
    def __init__(self, out: Path, stdout: str, stderr: str):
        self.plan = json.loads((out / "plan.json").read_text())
        self.summary = (out / "summary.md").read_text()
        self.stdout, self.stderr = stdout, stderr

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [r["inputs"] for r in self.plan["resources"] if r["type"] == type_]

    def pool(self, name: str) -> dict[str, Any]:
        (pool,) = [p for p in self.of_type(NODE_POOL) if p["name"] == name]
        return pool

    @property
    def cluster(self) -> dict[str, Any]:
        (cluster,) = self.of_type(CLUSTER)
        return cluster

    def releases(self) -> set[str]:
        return {r["name"] for r in self.plan["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release"}


@pytest.fixture(scope="module", params=NAMES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             upstream_dir: Path) -> tuple[str, Rendered]:
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    result = render_text(tmp, "gke", (EXAMPLES / f"{name}.yaml").read_bytes(), upstream_dir)
    assert result.returncode == 0, f"{name}: {result.stderr}"
    assert "would come up" in result.stdout, result.stdout
    return name, Rendered(tmp / "out", result.stdout, result.stderr)


def test_the_examples_are_the_issues_list():
    assert NAMES == ["a100-mig", "a3-high-reservation", "a3-mega", "a3-ultra", "a4", "flex-start-only",
                     "g2-l4-time-sharing", "private", "regional", "spot", "two-models-kueue"]


def _accelerator(pool: dict[str, Any]) -> tuple[str, int]:
    (acc,) = pool["nodeConfig"]["guestAccelerators"]
    return acc["type"], int(acc["count"])


def _reserved(pool: dict[str, Any], value: str) -> None:
    """Cluster Toolkit's blueprints: reservation_affinity SPECIFIC_RESERVATION on the named reservation."""
    assert pool["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY, "values": [value]}
    assert pool["autoscaling"]["locationPolicy"] == "ANY"


def _gpudirect(r: Rendered, pool: dict[str, Any], nics: int) -> None:
    """The blueprint's GPU networks: the pool's additional node networks (one per GPU NIC, plus the
    RDMA machines' second gVNIC), gVNIC, the cluster's multi-networking, a Network object each."""
    extra = pool["networkConfig"]["additionalNodeNetworkConfigs"]
    assert len(extra) == nics, extra
    assert pool["nodeConfig"]["gvnic"] == {"enabled": True} and r.cluster["enableMultiNetworking"] is True
    assert len(r.of_type("kubernetes:networking.gke.io/v1:Network")) >= nics


def check_a3_high_reservation(r: Rendered) -> None:
    pool = r.pool("h100")
    assert pool["nodeConfig"]["machineType"] == "a3-highgpu-8g" and _accelerator(pool) == ("nvidia-h100-80gb", 8)
    _reserved(pool, "a3-high-reservation")
    assert "consumes reservation a3-high-reservation" in r.stderr  # its size is not known offline
    _gpudirect(r, pool, 4)  # TCPX: four GPU VPCs (Cluster Toolkit's gke-a3-highgpu, multivpc network_count 4)
    assert {"nccl-tcpx-installer", "device-injector"} <= {
        d["metadata"]["name"] for d in r.of_type("kubernetes:apps/v1:DaemonSet")}


def check_a3_mega(r: Rendered) -> None:
    pool = r.pool("h100-mega")
    assert pool["nodeConfig"]["machineType"] == "a3-megagpu-8g" and _accelerator(pool) == ("nvidia-h100-mega-80gb", 8)
    _reserved(pool, "projects/capacity-host-proj/reservations/a3-mega-reservation")
    _gpudirect(r, pool, 8)  # TCPXO: eight GPU VPCs (Cluster Toolkit's gke-a3-megagpu)


def check_a3_ultra(r: Rendered) -> None:
    pool = r.pool("h200")
    nc = pool["nodeConfig"]
    assert nc["machineType"] == "a3-ultragpu-8g" and _accelerator(pool) == ("nvidia-h200-141gb", 8)
    assert (nc["diskType"], nc["diskSizeGb"]) == ("hyperdisk-balanced", 100)
    _reserved(pool, "a3-ultra-reservation")
    _gpudirect(r, pool, 9)  # RDMA over gIB: a second gVNIC and eight RoCE subnets (gke-a3-ultragpu)
    # the blueprint's enable_dcgm_monitoring: GKE's exporter, not the program's
    assert r.cluster["monitoringConfig"] == {"enableComponents": ["SYSTEM_COMPONENTS", "DCGM"],
                                             "managedPrometheus": {"enabled": True}}
    assert not any("dcgm-exporter" in name for name in r.releases())


def check_a4(r: Rendered) -> None:
    pool = r.pool("b200")
    nc = pool["nodeConfig"]
    assert nc["machineType"] == "a4-highgpu-8g" and _accelerator(pool) == ("nvidia-b200", 8)
    assert (nc["diskType"], nc["diskSizeGb"]) == ("hyperdisk-balanced", 100)
    _reserved(pool, "a4-reservation")
    _gpudirect(r, pool, 9)
    assert r.cluster["monitoringConfig"] == {"enableComponents": ["SYSTEM_COMPONENTS"]}  # the program's exporter


def check_g2_l4_time_sharing(r: Rendered) -> None:
    (acc,) = r.pool("l4-shared")["nodeConfig"]["guestAccelerators"]
    assert acc["type"] == "nvidia-l4"
    assert acc["gpuSharingConfig"] == {"gpuSharingStrategy": "TIME_SHARING", "maxSharedClientsPerGpu": 4}


def check_a100_mig(r: Rendered) -> None:
    (acc,) = r.pool("a100-mig")["nodeConfig"]["guestAccelerators"]
    assert (acc["type"], acc["gpuPartitionSize"]) == ("nvidia-tesla-a100", "1g.5gb")


def check_flex_start_only(r: Rendered) -> None:
    pool = r.pool("h100-flex")
    nc = pool["nodeConfig"]
    assert pool["queuedProvisioning"] == {"enabled": True} and nc["flexStart"] is True
    assert nc["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["autoscaling"]["minNodeCount"] == 0 and pool["autoscaling"]["locationPolicy"] == "ANY"
    assert pool["management"]["autoRepair"] is False
    _gpudirect(r, pool, 8)  # an A3 Mega pool: TCPXO
    # GKE taints, the pool labels (Cluster Toolkit's gke-node-pool), the flavor selects the label
    assert nc["labels"]["cloud.google.com/gke-queued"] == "true"
    (flavor,) = r.of_type(FLAVOR)
    assert flavor["spec"]["nodeLabels"]["cloud.google.com/gke-queued"] == "true"
    # the only GPU pool has no node at `up`: the job is admitted through its ProvisioningRequest
    assert "its nodes come from a ProvisioningRequest (queued-provisioning.gke.io" in r.summary


def check_spot(r: Rendered) -> None:
    pool = r.pool("l4-spot")
    assert pool["nodeConfig"]["spot"] is True and pool["autoscaling"]["locationPolicy"] == "ANY"
    assert pool["nodeLocations"] == ["us-central1-a", "us-central1-b"]


def check_regional(r: Rendered) -> None:
    assert r.cluster["location"] == "us-central1"
    assert r.pool("a100")["nodeLocations"] == ["us-central1-b", "us-central1-c"]
    (filestore,) = r.of_type("gcp:filestore/instance:Instance")
    assert filestore["location"] == "us-central1-b"


def check_private(r: Rendered) -> None:
    assert r.cluster["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": False,
                                                 "masterIpv4CidrBlock": "172.16.0.32/28"}
    (router,) = r.of_type("gcp:compute/router:Router")
    (nat,) = r.of_type("gcp:compute/routerNat:RouterNat")
    assert router["network"] == "gpu-vpc" and router["region"] == "us-central1"
    assert nat["subnetworks"] == [{"name": "gpu-nodes", "sourceIpRangesToNats": ["ALL_IP_RANGES"]}]


def check_two_models_kueue(r: Rendered) -> None:
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in r.of_type(FLAVOR)}
    assert flavors == {"nvidia-l4": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                       "nvidia-tesla-a100": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}}
    queues = {q["metadata"]["name"] for q in r.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")}
    assert {"vision", "language"} <= queues


def test_each_example_plans_what_googles_documentation_sets(rendered: tuple[str, Rendered]):
    name, r = rendered
    globals()[f"check_{name.replace('-', '_')}"](r)


def test_flex_start_only_under_the_gpu_operator_comes_up(tmp_path: Path, upstream_dir: Path):
    """The only GPU pool flex-start, the GPU Operator installing the stack: its NFD worker must run on
    the queued (tainted) nodes, or no operand ever lands there and the job stays Pending (exit 3)."""
    doc = yaml.safe_load((EXAMPLES / "flex-start-only.yaml").read_text())
    doc["config"]["gpu-cluster:gpu"] = {"stack": "operator"}
    doc["config"]["gpu-cluster:gke"]["gpuPools"][0]["driver"] = "installer-cos"
    result = render_text(tmp_path, "gke", yaml.safe_dump(doc).encode(), upstream_dir)
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    (worker,) = [line for line in summary.splitlines()
                 if line.startswith("- DaemonSet gpu-operator/gpu-operator-node-feature-discovery-worker ")]
    assert worker.endswith("on 3 nodes (system-node, h100-flex-1, h100-flex-2)"), worker
