"""The lab stack's nodes, as the whole-cluster check models them, registered as KWOK nodes: they
are Ready with the model's labels, taints and GPUs, and the real scheduler, controller manager and
KWOK run GPU pods and an Indexed Job on them as a lab cluster would."""

from __future__ import annotations

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
