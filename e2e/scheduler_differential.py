"""The whole-cluster check's placements held to the real kube-scheduler, one scenario at a time, on
one running control plane (tests/e2e/test_scheduler_differential.py).

A scenario is a stack's config (committed or changed through the config layer, any platform: lab,
dev and gke alike, since only the check's answer and its nodes are needed, not a kubeadm config)
evaluated and checked as `./plan` does: the nodes the check placed pods on (a gke pool as its nodes
up to its maximum, with the labels and devices the DaemonSets bring: report.scheduled), its
placements and the plan's PriorityClasses. `use_nodes` swaps the control plane's KWOK nodes for the
scenario's (same labels, taints, capacity: e2e/lab_stack.node_object); `compare` creates each
workload's pods as bare Pods with the pod spec the check judged (queued jobs as Kueue starts them)
and reads where kube-scheduler binds them:

- Phase 1, DaemonSet pods: one per node the check found eligible, pinned to it as the DaemonSet
  controller pins it (a required node affinity on metadata.name, its node-condition tolerations);
  each must be bound exactly where the check says it runs, and Unschedulable where it says not.
- Phase 2, long-running pods (Deployments, StatefulSets, operator-made pods), together on what the
  DaemonSet pods leave, as `up` brings them up after the DaemonSets (and as the check places them).
- Phase 3, each Job (CronJob job template, PyTorchJob) on its own on what those leave, its pods
  together, then removed: the check runs them one after another.
- In phases 2 and 3 several pods of one workload may compete for a node's GPUs, and which node wins
  is a matter of scoring and order, which the check does not claim: the bound count must equal the
  check's `placed` and every binding must be a node the check's filters allow.
- Phase 4, on the emptied cluster: each node the check chose for a workload, the workload's pod
  pinned there as a DaemonSet's pod is; the scheduler's filters must pass it (what the phases above
  cannot show where several nodes are allowed: that the check's own node is one of them). Pins of
  several workloads share a batch where the nodes hold them all and none reads its neighbours.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import api
from e2e.lab_stack import UNSIZED_CPU, UNSIZED_MEMORY, node_object
from render import cluster, program
from render.cluster.nodes import Node
from render.cluster.scheduling import (
    DAEMONSET_TOLERATIONS,
    Capacity,
    Placement,
    pod_requests,
    quantity,
    selector_reasons,
    taint_reasons,
)
from render.cluster.workloads import Workload

VERDICT_TIMEOUT = 60  # s for the scheduler to bind or refuse every pod of a phase
GONE_TIMEOUT = 60
NODES_TIMEOUT = 120  # s for the scenario's nodes to be Ready with exactly their own taints
SERVICE_ACCOUNT_TIMEOUT = 60
UNSCHEDULABLE = "unschedulable"
UNKNOWN_VALUE = "unknown-offline"  # a label's stand-in value where the model knows the label, not its value
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@dataclass
class Scenario:
    name: str
    nodes: list[Node]  # as the check placed pods on them
    placements: list[Placement]
    priority_classes: list[dict[str, Any]]
    problems: list[str]  # the check's own verdict on the plan (a scenario may be one it refuses)


def scenario_of(name: str, stack: str, config: tuple[dict[str, str], list[str]] | None, upstream: Path) -> Scenario:
    """`stack` (with `config` overriding its stack file, as program.run's does) evaluated under mocks
    and checked as `./plan` checks it."""
    plan = program.run(stack, config=config)
    report = cluster.check(plan, plan.config, upstream)
    return Scenario(name, list(report.scheduled), list(report.placements),
                    [dict(r.inputs) for r in plan.resources if r.type.endswith(":PriorityClass")],
                    list(report.problems))


# --- the scenario's nodes on the control plane ---

def _taints(taints: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(t["key"], str(t.get("value") or ""), t["effect"]) for t in taints}


def _settled(body: dict[str, Any], want: dict[str, dict[str, Any]]) -> bool:
    """Every node of `want` there, Ready, and carrying its own taints only: the node lifecycle
    controller's node.kubernetes.io/not-ready taint of a new node is gone."""
    seen = {n["metadata"]["name"]: n for n in body.get("items", [])}
    if set(seen) != set(want):
        return False
    for name, node in seen.items():
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if not ready or _taints(node["spec"].get("taints") or []) != _taints(want[name]["spec"]["taints"]):
            return False
    return True


def use_nodes(client: api.Client, nodes: list[Node]) -> None:
    """Replace every node of the control plane by `nodes` (KWOK's), Ready and untainted by the
    controllers. Their Leases go too: a node made again under an earlier name must not inherit a
    Lease the garbage collector is about to remove with the old node."""
    unadvertised: list[str] = []
    objects = {n.name: node_object(n, unadvertised) for n in nodes}
    for n in nodes:  # Google's topology labels: there, with a value only Google's placement knows
        objects[n.name]["metadata"]["labels"].update({label: UNKNOWN_VALUE for label in n.unvalued})
    if unadvertised:
        raise ValueError(f"the check's nodes hold what no Node can advertise: {unadvertised}")
    client.must("DELETE", "/api/v1/nodes")
    client.wait_for("the earlier nodes gone", "/api/v1/nodes", lambda body: not body.get("items"), GONE_TIMEOUT)
    client.must("DELETE", LEASES)
    client.wait_for("their Leases gone", LEASES, lambda body: not body.get("items"), GONE_TIMEOUT)
    for body in objects.values():
        client.create("/api/v1/nodes", body)
    client.wait_for("the scenario's nodes Ready with their own taints", "/api/v1/nodes",
                    lambda body: _settled(body, objects), NODES_TIMEOUT)


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


def pod_of(w: Workload, name: str) -> dict[str, Any]:
    """A bare Pod with what kube-scheduler reads of `w`'s pod template: its labels (which its own
    and other pods' pod anti-affinity select on), nodeName, nodeSelector, affinity, tolerations,
    priorityClassName, hostNetwork and host ports, and each container's resources.
    Left out, as not scheduling but naming objects this cluster lacks or settings only the kubelet
    reads: volumes and mounts (ConfigMaps, Secrets, PVCs, host paths), serviceAccountName (the
    chart's ServiceAccounts), runtimeClassName and overhead (the RuntimeClass admission plugin
    needs the class; no workload of these stacks sets one), commands, env, probes, securityContext."""
    spec = w.spec
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                                "containers": [_container(c) for c in spec.get("containers") or []]}
    if spec.get("initContainers"):
        pod_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    for key in ("nodeName", "nodeSelector", "affinity", "tolerations", "priorityClassName", "hostNetwork"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    labels = dict((w.metadata or {}).get("labels") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": _whole_numbers(pod_spec)}


def pinned_pod(w: Workload, node: str, name: str) -> dict[str, Any]:
    """`w`'s pod held to `node` as the DaemonSet controller holds its pods (pkg/controller/daemon/
    util: the required node affinity replaced by one term on metadata.name)."""
    pod = pod_of(w, name)
    affinity = dict(pod["spec"].get("affinity") or {})
    affinity["nodeAffinity"] = {**(affinity.get("nodeAffinity") or {}), "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    pod["spec"]["affinity"] = affinity
    return pod


def daemon_pod(w: Workload, node: str, name: str) -> dict[str, Any]:
    """The DaemonSet controller's pod for `node`: pinned, its node-condition tolerations added."""
    pod = pinned_pod(w, node, name)
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
            elif (pod.get("status") or {}).get("nominatedNodeName"):  # it runs there once lower priorities go
                decided[name] = (pod["status"]["nominatedNodeName"], "by preempting lower-priority pods")
            elif _scheduled(pod).get("reason") == "Unschedulable":
                decided[name] = (UNSCHEDULABLE, _scheduled(pod).get("message", ""))
        if set(names) <= set(decided):
            return decided
        time.sleep(0.1)
    raise TimeoutError(f"pods not bound nor refused within {VERDICT_TIMEOUT} s: {sorted(set(names) - set(decided))}")


def create_and_judge(client: api.Client, namespace: str, pods: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    for body in pods.values():
        client.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return verdicts(client, namespace, list(pods)) if pods else {}


def remove(client: api.Client, namespace: str, names: list[str] | None = None) -> None:
    """Remove pods `names` (None: every pod of the namespace) at once, no grace: the next phase
    finds their GPUs free."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    if names is None:
        client.must("DELETE", f"{path}?gracePeriodSeconds=0")
    else:
        for name in names:
            client.must("DELETE", f"{path}/{name}?gracePeriodSeconds=0")
    client.wait_for("the pods gone", path, lambda body: not any(
        names is None or pod["metadata"]["name"] in names for pod in body.get("items", [])), GONE_TIMEOUT)


def batch(client: api.Client, namespace: str, pods: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Create `pods`, take the scheduler's verdict on each, then remove them."""
    decided = create_and_judge(client, namespace, pods)
    remove(client, namespace, list(pods))
    return decided


# --- the comparison ---

def allowed_nodes(nodes: list[Node], p: Placement) -> set[str]:
    """Nodes the check's filters (selection, taints, capacity of an empty node) allow one pod on."""
    requests = pod_requests(p.workload.spec)
    return {n.name for n in nodes
            if not selector_reasons(p.workload.spec, n) and not taint_reasons(p.workload.spec, n, daemon=False)
            and not Capacity.of(n).fit_reasons(requests)}


def differences(nodes: list[Node], p: Placement, bound: list[tuple[str, str]]) -> list[str]:
    """What the real scheduler did with a non-DaemonSet workload's pods that the check did not say."""
    ref = p.workload.ref
    on = [node for node, _ in bound if node != UNSCHEDULABLE]
    out = []
    if len(on) != p.placed:
        why = "; ".join(sorted({m for node, m in bound if node == UNSCHEDULABLE}))
        shown = [f"{node} {m}".rstrip() for node, m in bound if node != UNSCHEDULABLE]
        out.append(f"{ref}: the check places {p.placed} of {p.workload.pods} pods ({p.nodes}), "
                   f"the scheduler bound {len(on)} ({shown}){': ' + why if why else ''}")
    outside = set(on) - allowed_nodes(nodes, p)
    if outside:
        out.append(f"{ref}: bound on {sorted(outside)}, which the check's filters rule out")
    return out


def _namespace(client: api.Client) -> str:
    namespace = f"diff-{uuid.uuid4().hex[:8]}"
    client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    client.wait_for(f"ServiceAccount {namespace}/default", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    lambda body: any(sa["metadata"]["name"] == "default" for sa in body.get("items", [])),
                    SERVICE_ACCOUNT_TIMEOUT)
    return namespace


def _daemon_sets(client: api.Client, namespace: str, s: Scenario) -> list[str]:
    expected: dict[str, str] = {}  # DaemonSet pod -> the check's node or UNSCHEDULABLE
    pods = {}
    for i, p in enumerate(s.placements):
        if p.workload.daemon and p.workload.runs_on_install:
            for node in p.eligible:
                name = _pod_name(i, p, node)
                pods[name] = daemon_pod(p.workload, node, name)
                expected[name] = node if node in p.nodes else UNSCHEDULABLE
    decided = create_and_judge(client, namespace, pods)
    return [f"DaemonSet pod {name}: the check says {node}, the scheduler {decided[name][0]} {decided[name][1]}".rstrip()
            for name, node in expected.items() if decided[name][0] != node]


def _long_running(client: api.Client, namespace: str, s: Scenario) -> list[str]:
    groups = {i: [_pod_name(i, p, str(k)) for k in range(p.workload.pods)] for i, p in enumerate(s.placements)
              if p.workload.runs_on_install and not p.workload.job and not p.workload.daemon}
    decided = create_and_judge(client, namespace, {name: pod_of(s.placements[i].workload, name)
                                                   for i, names in groups.items() for name in names})
    return [d for i, names in groups.items() for d in differences(s.nodes, s.placements[i], [decided[n] for n in names])]


def _jobs(client: api.Client, namespace: str, s: Scenario) -> list[str]:
    found: list[str] = []
    jobs: dict[int, list[int]] = {}  # a PyTorchJob's Master and Worker pods run together
    for i, p in enumerate(s.placements):
        if p.workload.job:
            jobs.setdefault(id(p.workload.obj), []).append(i)
    for members in jobs.values():
        names_of = {i: [_pod_name(i, s.placements[i], f"j{k}") for k in range(s.placements[i].workload.pods)]
                    for i in members}
        decided = batch(client, namespace, {name: pod_of(s.placements[i].workload, name)
                                            for i, names in names_of.items() for name in names})
        for i, names in names_of.items():
            found += differences(s.nodes, s.placements[i], [decided[n] for n in names])
    return found


def _alone(spec: dict[str, Any]) -> bool:
    """A pod whose filters read the other pods on its node (pod affinity, anti-affinity, host ports):
    pinned on its own, so that another workload's pin cannot decide its verdict."""
    affinity = spec.get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity") or spec.get("hostNetwork")
                or any(port.get("hostPort") for c in spec.get("containers") or [] for port in c.get("ports") or []))


def _pin_rounds(s: Scenario) -> list[dict[str, tuple[int, str]]]:
    """Phase 4's pins (pod -> (placement, node)) in few batches: pins share a batch only where the
    model's capacity of each node (a node of unknown size as KWOK sizes it) holds them all, so each
    is judged as on an emptied cluster."""
    unsized = {"cpu": quantity(UNSIZED_CPU), "memory": quantity(UNSIZED_MEMORY)}
    nodes = {n.name: n for n in s.nodes}
    shared: list[tuple[dict[str, Capacity], dict[str, tuple[int, str]]]] = []
    rounds: list[dict[str, tuple[int, str]]] = []
    for i, p in enumerate(s.placements):
        pins = {_pod_name(i, p, f"pin-{node}"): (i, node) for node in sorted(set(p.nodes))}
        if p.workload.daemon or not pins:
            continue
        if _alone(p.workload.spec):
            rounds.append(pins)
            continue
        requests = pod_requests(p.workload.spec)
        room = next((r for r in shared if all(not r[0][node].fit_reasons(requests) for _, node in pins.values())), None)
        if room is None:
            caps = {name: Capacity.of(n) for name, n in nodes.items()}
            for cap in caps.values():
                cap.free.update({k: v for k, v in unsized.items() if math.isinf(cap.free[k])})
            room = (caps, {})
            shared.append(room)
        for _, node in pins.values():
            room[0][node].take(requests)
        room[1].update(pins)
    return rounds + [pins for _, pins in shared]


def _pinned(client: api.Client, namespace: str, s: Scenario) -> list[str]:
    found: list[str] = []
    for pins in _pin_rounds(s):
        decided = batch(client, namespace, {name: pinned_pod(s.placements[i].workload, node, name)
                                            for name, (i, node) in pins.items()})
        found += [f"{s.placements[i].workload.ref}: the check places it on {node}, the scheduler refuses it there: "
                  f"{decided[name][1]}" for name, (i, node) in pins.items() if decided[name][0] != node]
    return found


def compare(client: api.Client, s: Scenario) -> list[str]:
    """Every difference between the check's placements and kube-scheduler's, on the scenario's
    nodes (use_nodes first); leaves no pod, namespace or PriorityClass of its own behind."""
    namespace = _namespace(client)
    made = []
    for pc in s.priority_classes:
        response = client.request("POST", PRIORITY_CLASSES, {**pc, "value": int(pc["value"])})
        assert response.ok, response.body
        made.append(pc["metadata"]["name"])
    try:
        found = _daemon_sets(client, namespace, s) + _long_running(client, namespace, s)
        found += _jobs(client, namespace, s)
        remove(client, namespace)
        return found + _pinned(client, namespace, s)
    finally:
        client.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
        client.request("DELETE", f"/api/v1/namespaces/{namespace}")
        for name in made:
            client.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
