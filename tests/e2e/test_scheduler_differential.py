"""The whole-cluster check's placements held to the real kube-scheduler (e2e/scheduler_differential.py),
for every committed stack and the variants below, one after another on one control plane of this
module's own (the session's carries the other e2e tests' pods: a deleted namespace's GPU pods still
hold their GPUs for a while), its KWOK nodes swapped for each scenario's.

Each variant is data: a change to a committed stack's config, built through the same config layer
`./plan` uses (tests.conftest.stack_config_with), so a variant the config refuses fails here first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import api, lab_stack, processes
from e2e import scheduler_differential as diff
from e2e.control_plane import ControlPlane
from render import program
from tests.conftest import stack_config_with
from tests.e2e.conftest import NEEDED
from tests.e2e.test_lab_nodes import SEED_002_ROCE
from tests.e2e.test_lab_nodes import _variant as mig_rdma_racks_variant
from tests.toolchain import toolchain_binary

Config = tuple[dict[str, str], list[str]]


def _hosts(stack: str) -> list[dict[str, Any]]:
    values, _ = program.stack_config(stack)
    return list(json.loads(values["gpu-cluster:hosts"]))


def _gpu_hosts(stack: str, **fields: Any) -> list[dict[str, Any]]:
    """`stack`'s hosts with `fields` set on every GPU host."""
    return [{**h, **fields} if h.get("gpus") else h for h in _hosts(stack)]


def small_gpu_node() -> Config:
    """gpu-1 with 2 GPUs, gpu-2 only 1; training one pod of 2 GPUs: gpu-2 is too small for it."""
    hosts = [{**h, "gpus": 2} if h["name"] == "gpu-1" else h for h in _hosts("lab")]
    return stack_config_with("lab", hosts=hosts, training={"gpusPerNode": 2, "nodes": 1}, acceptance={"nccl": False})


def gpu_operator() -> Config:
    """The GPU Operator instead of the device plugin chart: its operands' DaemonSets and node labels."""
    return stack_config_with("lab", gpu={"stack": "operator"})


def time_slicing() -> Config:
    """Each GPU shared by two pods (2 nvidia.com/gpu per GPU): a Job's pods may share a node."""
    return stack_config_with("lab", gpu={"sharing": {"mode": "time-slicing", "replicas": 2}})


def mig_single() -> Config:
    """MIG under the operator, single strategy: each 1g.5gb slice of an A100-40GB is an nvidia.com/gpu (7 a GPU)."""
    return stack_config_with("lab", hosts=_gpu_hosts("lab", gpuModel="NVIDIA-A100-SXM4-40GB"),
                             gpu={"stack": "operator", "sharing": {"mode": "mig", "migStrategy": "single",
                                                                   "migProfile": "all-1g.5gb"}})


def pytorchjob() -> Config:
    """Training as a Kubeflow PyTorchJob on lab-ha's queue: its Master and Worker pods together, as Kueue starts them."""
    return stack_config_with("lab-ha", training={"launcher": "pytorchjob"}, acceptance={"nccl": False})


def untainted_gpu_nodes() -> Config:
    """gpuTaint off: the GPU workers take any pod, so non-GPU Deployments may spread onto them."""
    return stack_config_with("lab", gpuTaint=False)


def cpu_worker() -> Config:
    """A worker without GPUs beside the tainted GPU workers: what tolerates no taint goes there only."""
    cpu = {k: v for k, v in _hosts("lab")[1].items() if k != "gpus"}
    return stack_config_with("lab", hosts=[*_hosts("lab"), {**cpu, "name": "cpu-1", "address": "192.0.2.13"}])


def racks() -> Config:
    """Each GPU host in a rack of its own (the rack label on the node, through the plan's NodePatch)."""
    hosts = [{**h, "rack": f"r{i}"} if h.get("gpus") else h for i, h in enumerate(_hosts("lab"))]
    return stack_config_with("lab", hosts=hosts)


def ha_rdma() -> Config:
    """lab-ha over RoCE: the RDMA shared device plugin's rdma/ devices, asked for by the NCCL and training pods."""
    return stack_config_with("lab-ha", network={"rdma": True, "linkGbps": 25, "roce": SEED_002_ROCE})


def dev_unequal_nodes() -> Config:
    """Two GPU nodes of 1 and 2 GPUs (gpuNodeGpus), training one pod of 2: only gpu-b holds it."""
    return stack_config_with("dev", gpuNodes=["minikube", "gpu-b"], gpuNodeGpus={"gpu-b": 2},
                             training={"gpusPerNode": 2, "nodes": 1})


def gke_training_too_big() -> Config:
    """Training asks 30 CPUs, more than any GPU node's allocatable: the check says unplaceable, and the
    scheduler must leave it Pending."""
    return stack_config_with("gke", training={"cpuRequest": "30", "cpuLimit": "30"})


def gke_a4_reservation() -> Config:
    """An A4 pool from a specific reservation: Google's topology labels on its nodes; training 2 x 8 GPUs."""
    values, _ = program.stack_config("gke")
    gke = json.loads(values["gpu-cluster:gke"])
    gke["gpuPools"] = [{"name": "a4", "machineType": "a4-highgpu-8g", "accelerator": {"type": "nvidia-b200", "count": 8},
                        "zones": ["us-central1-b"], "autoscaling": {"minNodes": 2, "maxNodes": 2},
                        "provisioning": "reservation", "reservation": "b200-block", "labels": {"workload": "training"}}]
    return stack_config_with("gke", gke=gke, training={"gpusPerNode": 8, "nodes": 2})


# scenario -> (stack, the change to its committed config; None: as committed)
SCENARIOS: dict[str, tuple[str, Callable[[], Config] | None]] = {
    "lab": ("lab", None),
    "lab-ha": ("lab-ha", None),  # with queues: the queued jobs' pods as Kueue's flavors start them
    "dev": ("dev", None),
    "gke": ("gke", None),
    "lab-gpu-operator": ("lab", gpu_operator),
    "lab-time-slicing": ("lab", time_slicing),
    "lab-mig-single": ("lab", mig_single),
    "lab-ha-mig-mixed-rdma-racks": ("lab-ha", mig_rdma_racks_variant),
    "lab-ha-rdma": ("lab-ha", ha_rdma),
    "lab-ha-pytorchjob": ("lab-ha", pytorchjob),
    "lab-untainted-gpu-nodes": ("lab", untainted_gpu_nodes),
    "lab-cpu-worker": ("lab", cpu_worker),
    "lab-racks": ("lab", racks),
    "lab-small-gpu-node": ("lab", small_gpu_node),
    "dev-unequal-nodes": ("dev", dev_unequal_nodes),
    "gke-training-too-big": ("gke", gke_training_too_big),
    "gke-a4-reservation": ("gke", gke_a4_reservation),
}
# What the check refuses in a scenario made to be refused, and the scheduler must refuse too.
REFUSED = {"gke-training-too-big": "Job training/train"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory, upstream_dir: Path) -> Iterator[ControlPlane]:
    """One control plane for every scenario (made from the committed lab; use_nodes swaps its nodes)."""
    for component, binary in NEEDED:
        toolchain_binary(component, binary)
    control_plane = ControlPlane(lab_stack.from_stack("lab", upstream_dir), tmp_path_factory.mktemp("scheduler-diff"))
    try:
        control_plane.start()
    except processes.StartFailed as err:
        pytest.fail(f"the control plane did not come up: {err}")
    yield control_plane
    control_plane.stop()


# The check runs here on each scenario's plan and its verdict is asserted below (REFUSED): not again by
# tests/whole_cluster.py's wrapper, which would fail the scenario made to be refused before the scheduler sees it.
@pytest.mark.would_not_come_up
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_checks_placements_are_the_real_schedulers(plane: ControlPlane, upstream_dir: Path, name: str) -> None:
    stack, change = SCENARIOS[name]
    scenario = diff.scenario_of(name, stack, change() if change else None, upstream_dir)
    assert scenario.placements, "the check placed nothing"
    refused = [p for p in scenario.problems if not p.startswith(REFUSED.get(name, "\0"))]
    assert not refused, f"the check refuses {name} for what the scenario is not about: {refused}"
    if name in REFUSED:
        unplaced = [p for p in scenario.placements if not p.ok and p.workload.ref == REFUSED[name]]
        assert unplaced, f"the check places {REFUSED[name]}, which the scenario makes too big for every node"
    client: api.Client | None = plane.client
    assert client is not None
    diff.use_nodes(client, scenario.nodes)
    found = diff.compare(client, scenario)
    assert not found, "the check and kube-scheduler differ:\n  " + "\n  ".join(found)
