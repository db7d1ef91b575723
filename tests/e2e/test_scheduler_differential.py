"""The whole-cluster check's placements held to the real kube-scheduler, stack by stack.

For each scenario the check's answer (render/cluster/scheduling.py: a Placement per workload) is
compared with what kube-scheduler does on KWOK nodes made from the same node model (labels, taints,
GPUs, MIG and RDMA capacity, racks): each workload's pods are created as bare Pods with the pod spec
the check judged (queued jobs as Kueue starts them), and each is bound or left Unschedulable.

- DaemonSets: one pod per node the check found eligible, pinned to it as the DaemonSet controller
  pins it (a required node affinity on metadata.name, its node-condition tolerations); it must be
  bound exactly where the check says it runs, and Pending where it says it does not.
- Long-running pods (Deployments, StatefulSets, operator-made pods) are created together with the
  DaemonSet pods, as they are up at once; each Job (CronJob job template, PyTorchJob) is then
  created on its own, compared, and removed, as the check runs them one after another.
- Several pods of one workload may compete for a node's GPUs, and which node wins is a matter of
  scoring and order, which the check does not claim: the bound count must equal the check's
  `placed`, every binding must be a node the check's filters allow, and where capacity forces the
  answer (no allowed node holds two of the pods) the nodes per count must be the check's exactly.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import api, lab_stack, processes
from e2e.control_plane import ControlPlane
from render import program
from render.cluster.scheduling import (
    DAEMONSET_TOLERATIONS,
    Capacity,
    Placement,
    pod_requests,
    selector_reasons,
    taint_reasons,
)
from tests.conftest import stack_config_with
from tests.e2e.conftest import NEEDED, SERVICE_ACCOUNT_TIMEOUT
from tests.e2e.test_lab_nodes import _variant as mig_rdma_racks_variant
from tests.toolchain import toolchain_binary

VERDICT_TIMEOUT = 60  # s for the scheduler to bind or refuse every pod of a phase
GONE_TIMEOUT = 60
UNSCHEDULABLE = "unschedulable"


def _small_gpu_node_variant() -> tuple[dict[str, str], list[str]]:
    """lab with gpu-1 holding 2 GPUs and gpu-2 only 1, training one pod of 2 GPUs: gpu-2 is too small."""
    values, _ = program.stack_config("lab")
    hosts: list[dict[str, Any]] = json.loads(values["gpu-cluster:hosts"])
    for h in hosts:
        if h["name"] == "gpu-1":
            h["gpus"] = 2
    return stack_config_with("lab", hosts=hosts, training={"gpusPerNode": 2, "nodes": 1},
                             acceptance={"nccl": False})


def _time_slicing_variant() -> tuple[dict[str, str], list[str]]:
    """lab with each GPU shared by two pods (2 nvidia.com/gpu per GPU): a Job's pods may share a node."""
    return stack_config_with("lab", gpu={"sharing": {"mode": "time-slicing", "replicas": 2}})


# Each on a control plane of its own, the committed lab too: the comparison needs an empty cluster,
# and the session's control plane carries the other e2e tests' pods (a deleted namespace's GPU pods
# still hold their GPUs for a while: in CI the gate's second pod found no free GPU there).
VARIANTS = {
    "lab": ("lab", None),
    "lab-ha": ("lab-ha", None),
    "lab-time-slicing": ("lab", _time_slicing_variant),
    "lab-small-gpu-node": ("lab", _small_gpu_node_variant),
    "lab-ha-mig-rdma-racks": ("lab-ha", mig_rdma_racks_variant),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  upstream_dir: Path) -> Iterator[ControlPlane]:
    """A control plane of the variant's own (its nodes differ from the session's), stopped after."""
    for component, binary in NEEDED:
        toolchain_binary(component, binary)
    stack, config = VARIANTS[request.param]
    lab = lab_stack.from_stack(stack, upstream_dir, config=config() if config else None)
    plane = ControlPlane(lab, tmp_path_factory.mktemp(f"plane-{request.param}"))
    try:
        plane.start()
    except processes.StartFailed as err:
        pytest.fail(f"the {request.param} control plane did not come up: {err}")
    yield plane
    plane.stop()


# --- the pods, as the check judged them ---

def _pod_name(index: int, p: Placement, suffix: str) -> str:
    raw = f"{index}-{suffix}-{p.workload.kind}-{p.workload.name}".lower()  # unique before the cut
    return re.sub(r"[^a-z0-9-]", "-", raw)[:63].strip("-")


def _whole_numbers(value: Any) -> Any:
    """The plan's numbers as the API server's int fields take them (Pulumi's mocks hand back 8080.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _container(c: dict[str, Any]) -> dict[str, Any]:
    out = {"name": c["name"], "image": c.get("image") or "registry.example.com/placeholder:0",
           "resources": c.get("resources") or {}}
    if c.get("ports"):
        out["ports"] = [{k: v for k, v in port.items() if k in ("containerPort", "hostPort", "protocol", "hostIP")}
                        for port in c["ports"]]
    return out


def pod_of(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """A bare Pod with what kube-scheduler reads of `spec`: nodeName, nodeSelector, affinity,
    tolerations, priorityClassName, hostNetwork and host ports, and each container's resources.
    Left out, as not scheduling but naming objects this cluster lacks or settings only the kubelet
    reads: volumes and mounts (ConfigMaps, Secrets, PVCs, host paths), serviceAccountName (the
    chart's ServiceAccounts), runtimeClassName and overhead (the RuntimeClass admission plugin
    needs the class; no lab workload sets one), commands, env, probes, securityContext."""
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                                "containers": [_container(c) for c in spec.get("containers") or []]}
    if spec.get("initContainers"):
        pod_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    for key in ("nodeName", "nodeSelector", "affinity", "tolerations", "priorityClassName", "hostNetwork"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": _whole_numbers(pod_spec)}


def pinned_pod(spec: dict[str, Any], node: str, name: str) -> dict[str, Any]:
    """`spec`'s pod held to `node` as the DaemonSet controller holds its pods (pkg/controller/daemon/
    util: the required node affinity replaced by one term on metadata.name)."""
    pod = pod_of(spec, name)
    affinity = dict(pod["spec"].get("affinity") or {})
    affinity["nodeAffinity"] = {**(affinity.get("nodeAffinity") or {}), "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    pod["spec"]["affinity"] = affinity
    return pod


def daemon_pod(spec: dict[str, Any], node: str, name: str) -> dict[str, Any]:
    """The DaemonSet controller's pod for `node`: pinned, its node-condition tolerations added."""
    pod = pinned_pod(spec, node, name)
    pod["spec"]["tolerations"] = list(pod["spec"].get("tolerations") or []) + DAEMONSET_TOLERATIONS
    return pod


# --- the cluster's answer ---

def _scheduled(pod: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})


def verdicts(client: api.Client, namespace: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """pod -> (its node or UNSCHEDULABLE, the scheduler's message), once each is decided."""
    deadline = time.monotonic() + VERDICT_TIMEOUT
    decided: dict[str, tuple[str, str]] = {}
    while time.monotonic() < deadline:
        for pod in client.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            name = pod["metadata"]["name"]
            if pod["spec"].get("nodeName"):
                decided[name] = (pod["spec"]["nodeName"], "")
            elif _scheduled(pod).get("reason") == "Unschedulable":
                decided[name] = (UNSCHEDULABLE, _scheduled(pod).get("message", ""))
        if set(names) <= set(decided):
            return decided
        time.sleep(0.5)
    raise TimeoutError(f"pods not bound nor refused within {VERDICT_TIMEOUT} s: {sorted(set(names) - set(decided))}")


def batch(client: api.Client, namespace: str, pods: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Create `pods`, take the scheduler's verdict on each, then remove them at once (no grace: the
    next batch finds the GPUs free); with no pods, empty the namespace."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    for body in pods.values():
        client.create(path, body)
    decided = verdicts(client, namespace, list(pods)) if pods else {}
    for name in pods:
        client.must("DELETE", f"{path}/{name}?gracePeriodSeconds=0")
    if not pods:
        client.must("DELETE", f"{path}?gracePeriodSeconds=0")
    client.wait_for("the pods gone", path, lambda body: not any(
        not pods or pod["metadata"]["name"] in pods for pod in body.get("items", [])), GONE_TIMEOUT)
    return decided


# --- the comparison ---

def allowed_nodes(plane: ControlPlane, p: Placement) -> set[str]:
    """Nodes the check's filters (selection, taints, capacity of an empty node) allow one pod on."""
    requests = pod_requests(p.workload.spec)
    return {n.name for n in plane.lab.nodes
            if not selector_reasons(p.workload.spec, n) and not taint_reasons(p.workload.spec, n, daemon=False)
            and not Capacity.of(n).fit_reasons(requests)}


def _forced(plane: ControlPlane, p: Placement, allowed: set[str]) -> bool:
    """No allowed node holds two of the workload's pods: capacity alone says where they go."""
    requests = {k: v for k, v in pod_requests(p.workload.spec).items() if "/" in k and v > 0}
    if not requests:
        return False
    nodes = {n.name: n for n in plane.lab.nodes}
    return all(any(nodes[name].extended.get(k, 0.0) < 2 * v for k, v in requests.items()) for name in allowed)


def differences(plane: ControlPlane, p: Placement, bound: list[tuple[str, str]]) -> list[str]:
    """What the real scheduler did with a non-DaemonSet workload's pods that the check did not say."""
    ref = p.workload.ref
    on = [node for node, _ in bound if node != UNSCHEDULABLE]
    out = []
    if len(on) != p.placed:
        why = "; ".join(sorted({m for node, m in bound if node == UNSCHEDULABLE}))
        out.append(f"{ref}: the check places {p.placed} of {p.workload.pods} pods ({p.nodes}), "
                   f"the scheduler bound {len(on)} ({on}){': ' + why if why else ''}")
    allowed = allowed_nodes(plane, p)
    if set(on) - allowed:
        out.append(f"{ref}: bound on {sorted(set(on) - allowed)}, which the check's filters rule out")
    if not out and _forced(plane, p, allowed) and Counter(on) != Counter(p.nodes):
        out.append(f"{ref}: capacity forces the nodes; the check says {sorted(p.nodes)}, the scheduler {sorted(on)}")
    return out


def compare(plane: ControlPlane, client: api.Client) -> list[str]:
    namespace = f"diff-{uuid.uuid4().hex[:8]}"
    client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    client.wait_for(f"ServiceAccount {namespace}/default", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    lambda body: any(sa["metadata"]["name"] == "default" for sa in body.get("items", [])),
                    SERVICE_ACCOUNT_TIMEOUT)
    for pc in plane.lab.priority_classes:
        body = {**pc, "value": int(pc["value"])}
        response = client.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
        assert response.ok or response.status == 409, response.body  # 409: made by an earlier scenario
    path = f"/api/v1/namespaces/{namespace}/pods"
    found: list[str] = []
    try:
        # Phase 1: DaemonSet pods and long-running pods, up together.
        expected: dict[str, str] = {}  # DaemonSet pod -> the check's node or UNSCHEDULABLE
        groups: dict[int, list[str]] = {}  # long-running placement -> its pods
        steady = [(i, p) for i, p in enumerate(plane.lab.placements)
                  if p.workload.runs_on_install and not p.workload.job]
        for i, p in steady:
            if p.workload.daemon:
                for node in p.eligible:
                    name = _pod_name(i, p, node)
                    client.create(path, daemon_pod(p.workload.spec, node, name))
                    expected[name] = node if node in p.nodes else UNSCHEDULABLE
            else:
                groups[i] = [_pod_name(i, p, str(k)) for k in range(p.workload.pods)]
                for name in groups[i]:
                    client.create(path, pod_of(p.workload.spec, name))
        decided = verdicts(client, namespace, [*expected, *(n for names in groups.values() for n in names)])
        for name, node in expected.items():
            if decided[name][0] != node:
                found.append(f"DaemonSet pod {name}: the check says {node}, the scheduler "
                             f"{decided[name][0]} {decided[name][1]}".rstrip())
        for i, names in groups.items():
            found += differences(plane, plane.lab.placements[i], [decided[n] for n in names])
        # Phase 2: each Job on what the long-running pods leave, one after another, its pods together.
        jobs: dict[int, list[int]] = {}
        for i, p in enumerate(plane.lab.placements):
            if p.workload.job:
                jobs.setdefault(id(p.workload.obj), []).append(i)
        for members in jobs.values():
            names_of = {i: [_pod_name(i, plane.lab.placements[i], f"j{k}")
                            for k in range(plane.lab.placements[i].workload.pods)] for i in members}
            decided = batch(client, namespace, {name: pod_of(plane.lab.placements[i].workload.spec, name)
                                                for i, names in names_of.items() for name in names})
            for i, names in names_of.items():
                found += differences(plane, plane.lab.placements[i], [decided[n] for n in names])
        # Phase 3: on the emptied cluster, each node the check chose for a workload, pinned there as a
        # DaemonSet's pod is: the scheduler's filters must pass it (what phases 1 and 2 cannot show
        # where several nodes are allowed: that the check's own node is one of them).
        batch(client, namespace, {})
        for i, p in enumerate(plane.lab.placements):
            if p.workload.daemon:
                continue
            pins = {_pod_name(i, p, f"pin-{node}"): node for node in sorted(set(p.nodes))}
            decided = batch(client, namespace, {name: pinned_pod(p.workload.spec, node, name)
                                                for name, node in pins.items()})
            found += [f"{p.workload.ref}: the check places it on {node}, the scheduler refuses it there: "
                      f"{decided[name][1]}" for name, node in pins.items() if decided[name][0] != node]
    finally:
        client.request("DELETE", f"/api/v1/namespaces/{namespace}")
    return found


def _assert_agree(plane: ControlPlane, client: api.Client) -> None:
    assert plane.lab.placements, "the check placed nothing"
    found = compare(plane, client)
    assert not found, "the check and kube-scheduler differ:\n  " + "\n  ".join(found)


def test_each_variants_placements_are_the_real_schedulers(variant_plane: ControlPlane) -> None:
    assert variant_plane.client is not None
    _assert_agree(variant_plane, variant_plane.client)
