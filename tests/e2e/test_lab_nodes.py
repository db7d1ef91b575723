"""The lab stack's nodes, as the whole-cluster check models them, registered as KWOK nodes: they
are Ready with the model's labels, taints and GPUs, and the real scheduler, controller manager and
KWOK run GPU pods and an Indexed Job on them as a lab cluster would."""

from __future__ import annotations

import json
from typing import Any

from config.scheduling_contract import GPU_MODEL_LABEL, RACK_LABEL
from e2e import lab_stack
from render import program
from tests.conftest import SEED_002_ROCE, stack_config_with
from tests.e2e.conftest import gpu_toleration

POD_TIMEOUT = 90
JOB_TIMEOUT = 120
GPU = "nvidia.com/gpu"


def _gpu_nodes(control_plane):
    return [n for n in control_plane.lab.nodes if n.is_gpu]


def test_the_stacks_nodes_are_ready_with_the_modelled_labels_taints_and_gpus(control_plane, client):
    nodes = {n["metadata"]["name"]: n for n in client.get("/api/v1/nodes")["items"]}
    assert set(nodes) == {n.name for n in control_plane.lab.nodes}
    assert _gpu_nodes(control_plane), "the lab stack has GPU hosts"
    for modelled in control_plane.lab.nodes:
        node = nodes[modelled.name]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", modelled.name
        assert modelled.labels.items() <= node["metadata"]["labels"].items()
        taints = [{k: t.get(k, "") for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])]
        assert taints == modelled.taints
        allocatable = node["status"]["allocatable"]
        assert int(allocatable.get(GPU, "0")) == modelled.extended.get(GPU, 0) == modelled.gpus


def _pod(name: str, tolerations, gpus: int = 1) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "tolerations": tolerations,
                     "containers": [{"name": "main", "image": "registry.example.com/trainer:0",
                                     "resources": {"limits": {GPU: str(gpus)}}}]}}


def _condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_a_gpu_pod_is_bound_to_a_gpu_node_by_the_scheduler_and_runs(control_plane, client, namespace):
    gpu_node = _gpu_nodes(control_plane)[0]
    path = f"/api/v1/namespaces/{namespace}/pods"
    client.create(path, _pod("gpu", gpu_toleration(gpu_node.taints)))
    pod = client.wait_for("the GPU pod Running and Ready", f"{path}/gpu",
                          lambda p: p["status"].get("phase") == "Running" and _condition(p, "Ready").get("status") == "True",
                          POD_TIMEOUT)
    assert pod["spec"]["nodeName"] in {n.name for n in _gpu_nodes(control_plane)}


def test_a_pod_that_does_not_tolerate_the_gpu_taint_is_not_scheduled(control_plane, client, namespace):
    """Every lab node is tainted (the control plane's role, the GPU nodes' nvidia.com/gpu): the real
    scheduler leaves a pod without tolerations Pending, naming the taints."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    client.create(path, _pod("untolerated", []))
    pod = client.wait_for("the scheduler's verdict", f"{path}/untolerated",
                          lambda p: _condition(p, "PodScheduled").get("reason") == "Unschedulable", POD_TIMEOUT)
    assert not pod["spec"].get("nodeName")
    assert "untolerated taint" in _condition(pod, "PodScheduled")["message"]


def test_an_indexed_job_of_two_gpu_pods_completes(control_plane, client, namespace):
    gpu_node = _gpu_nodes(control_plane)[0]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed"},
           "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                    "template": _pod("ignored", gpu_toleration(gpu_node.taints))}}
    del job["spec"]["template"]["metadata"]
    client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    done = client.wait_for("the Indexed Job Complete", f"/apis/batch/v1/namespaces/{namespace}/jobs/indexed",
                           lambda j: _condition(j, "Complete").get("status") == "True", JOB_TIMEOUT)
    assert done["status"]["succeeded"] == 2
    assert done["status"].get("completedIndexes") == "0,1"


def _variant() -> tuple[dict[str, str], list[str]]:
    """lab-ha with racks, RoCE (the RDMA shared device plugin) and MIG under the operator."""
    values, _ = program.stack_config("lab-ha")
    hosts: list[dict[str, Any]] = json.loads(values["gpu-cluster:hosts"])
    for h in hosts:
        if h.get("gpus"):
            h.update(rack="r1", gpuModel="NVIDIA-H100-80GB-HBM3")
    return stack_config_with("lab-ha", hosts=hosts, network={"rdma": True, "linkGbps": 25, "roce": SEED_002_ROCE},
                             gpu={"stack": "operator", "sharing": {"mode": "mig", "migStrategy": "mixed",
                                                                   "migProfile": "all-1g.10gb"}})


def test_rack_rdma_and_mig_nodes_of_a_lab_variant_are_nodes_the_api_server_accepts(client, upstream_dir):
    """The Node objects made from a richer lab config carry its racks, GPU model, RDMA devices and
    MIG slices, and the real API server accepts each as it is (server-side dry run: validation and
    admission, nothing stored, so the shared control plane keeps the lab stack's nodes only)."""
    variant = lab_stack.from_stack("lab-ha", upstream_dir, config=_variant())
    objects = variant.node_objects()
    assert variant.unadvertised == []
    gpu = [o for o in objects if o["metadata"]["labels"].get(RACK_LABEL)]
    assert len(gpu) == 2
    for node in gpu:
        assert node["metadata"]["labels"][GPU_MODEL_LABEL] == "NVIDIA-H100-80GB-HBM3"
        assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
        assert any(r.startswith("rdma/") for r in node["status"]["allocatable"])
    for node in objects:
        node["metadata"]["name"] = f"variant-{node['metadata']['name']}"  # the lab's own nodes hold the names
        response = client.request("POST", "/api/v1/nodes?dryRun=All", node)
        assert response.status == 201, response.body
        assert response.body["status"]["allocatable"] == node["status"]["allocatable"]
        assert node["metadata"]["labels"].items() <= response.body["metadata"]["labels"].items()
