"""Issue 33's scenarios: the check's Kueue model (kueue_preemption.admit_in_order over
kueue_admission) against the real Kueue manager v0.19.2 (e2e/kueue.py), one scenario at a time.

Each scenario is data: its teams (a ClusterQueue, LocalQueue and namespace each, built by the
program's own components/queues/objects.py, in a cohort of the scenario's own), its
ResourceFlavors (the program's resource_flavor, a node taint or a Topology added where the
scenario is about one) and its Jobs in submission order. The model judges the whole scenario
(expected outcomes are the model's, never typed in); real Kueue gets the Jobs one by one, each
awaited until it is admitted or settled pending, and at the end every Job's state (admitted on
which flavor / waiting / never / preempted, and why preempted) must be the model's.

The manager runs with the lab-ha plan's Configuration less waitForPodsReady: with blockAdmission
it holds every admission until the previous workload's pods run, and a scenario's Jobs ask for
more GPUs (or MIG units) than the two one-GPU KWOK nodes have, which the model, judging quota,
does not model (kueue_admission.py: "not modelled: the timing of waitForPodsReady").
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from components.queues import objects as queue_objects
from components.toolchain_versions import KUEUE
from config.queue_flavors import Flavor
from e2e import api, dry_run, kueue
from e2e.control_plane import ControlPlane
from render import cluster, program
from render.cluster import kueue_admission, kueue_objects, kueue_preemption
from render.cluster import objects as cluster_objects
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity
from tests.toolchain import toolchain_binary

STACK = "lab-ha"  # its Kueue chart and manager Configuration
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
GPU_NODES = {"nvidia.com/gpu.present": "true"}  # the lab KWOK nodes gpu-1 and gpu-2, one GPU each
HOSTNAME = "kubernetes.io/hostname"
SHARED_LEVEL = "feature.node.kubernetes.io/pci-10de.present"  # one value on both GPU nodes: a rack of two
TRAINING, BATCH = "gpu-cluster-training", "gpu-cluster-batch"  # the program's WorkloadPriorityClasses
VERDICT_TIMEOUT = 45  # s for Kueue to admit a Job or settle it pending
STILL_PENDING = 3  # s a settled pending Job is watched to stay pending
NO_WORKLOAD = 8  # s without a Workload: Kueue made none
# flavorassigner.go / tas_flavor_snapshot.go: what a pending Workload's QuotaReserved message says
NEVER_SAYS = ("> maximum capacity", "untolerated taint", "unavailable in ClusterQueue", "doesn't allow to fit",
              "allows to fit only")
WAITS_SAYS = ("insufficient unused quota",)
RUNS_ON = {"pod-complete.stage.kwok.x-k8s.io/delay": "10m", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "10m"}
PLURALS = {"WorkloadPriorityClass": "workloadpriorityclasses", "Topology": "topologies"}
ORDER = ("Namespace", "WorkloadPriorityClass", "Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue")


@dataclass(frozen=True)
class Team:
    name: str
    gpus: dict[str, int]  # flavor -> nominal quota (GPUs, or MIG units)
    borrowing_limit: int | None = None


@dataclass(frozen=True)
class FlavorSpec:
    name: str
    taint: str | None = None  # a NoSchedule nodeTaint key the Jobs do not tolerate
    topology: tuple[str, ...] | None = None  # Topology levels, top first


@dataclass(frozen=True)
class Submit:
    name: str
    team: str
    units: int = 1  # per pod, of the scenario's resource
    pods: int = 1
    priority: str | None = None  # kueue.x-k8s.io/priority-class
    required_level: str | None = None  # podset-required-topology
    extra: dict[str, str] = field(default_factory=dict)  # more requests


@dataclass(frozen=True)
class Scenario:
    id: str  # a DNS label: prefix of every name it makes
    teams: tuple[Team, ...]
    jobs: tuple[Submit, ...]
    flavors: tuple[FlavorSpec, ...] = (FlavorSpec("gpu"),)
    resource: str = GPU
    managed: bool = True  # its namespaces in the manager's managedJobsNamespaceSelector

    @property
    def topology_aware(self) -> bool:
        return any(f.topology for f in self.flavors)


TWO = (Team("vision", {"gpu": 1}), Team("language", {"gpu": 1}))
SCENARIOS = [  # the TAS ones first, while no other scenario's pods are on the nodes (gone: removed() waits)
    Scenario("tas-rack", (Team("vision", {"tas": 2}),), (
        Submit("two-pods-one-rack", "vision", pods=2, required_level=SHARED_LEVEL),),
        flavors=(FlavorSpec("tas", topology=(SHARED_LEVEL, HOSTNAME)),)),
    Scenario("tas-host", (Team("vision", {"tas": 2}),), (
        Submit("two-pods-one-host", "vision", pods=2, required_level=HOSTNAME),
        Submit("one-pod-one-host", "vision", required_level=HOSTNAME)),
        flavors=(FlavorSpec("tas", topology=(SHARED_LEVEL, HOSTNAME)),)),
    Scenario("two-teams", TWO, (Submit("v1", "vision"), Submit("l1", "language"), Submit("v2", "vision"))),
    Scenario("borrow", (Team("vision", {"gpu": 1}), Team("language", {"gpu": 2})), (
        Submit("v3", "vision", units=3), Submit("l1", "language"))),
    Scenario("borrow-limit", (Team("vision", {"gpu": 1}, 1), Team("language", {"gpu": 3})), (
        Submit("v3", "vision", units=3), Submit("v2", "vision", units=2), Submit("v1", "vision"))),
    Scenario("three-teams", (Team("a", {"gpu": 1}), Team("b", {"gpu": 1}), Team("c", {"gpu": 1})), (
        Submit("a2", "a", units=2), Submit("b1", "b"), Submit("c1", "c"))),
    Scenario("reclaim", TWO, (Submit("v2", "vision", units=2), Submit("l1", "language"))),
    Scenario("in-queue", (Team("vision", {"gpu": 1}),), (
        Submit("batch", "vision", priority=BATCH), Submit("training", "vision", priority=TRAINING))),
    Scenario("same-prio", (Team("vision", {"gpu": 1}),), (
        Submit("first", "vision", priority=BATCH), Submit("second", "vision", priority=BATCH))),
    Scenario("mig", (Team("vision", {"gpu": 7}), Team("language", {"gpu": 7})), (
        Submit("v4", "vision", units=4), Submit("v6", "vision", units=6), Submit("v5", "vision", units=5),
        Submit("l3", "language", units=3)), resource=MIG),
    Scenario("too-big", TWO, (Submit("v4", "vision", units=4), Submit("v1", "vision"))),
    Scenario("no-class", (Team("vision", {"gpu": 1}),), (
        Submit("urgent", "vision", priority="gpu-cluster-urgent"), Submit("plain", "vision"))),
    Scenario("taint", (Team("vision", {"held": 1}),), (Submit("v1", "vision"),),
             flavors=(FlavorSpec("held", taint="example.com/reserved"),)),
    Scenario("taint-next", (Team("vision", {"held": 1, "gpu": 1}),), (Submit("v1", "vision"),),
             flavors=(FlavorSpec("held", taint="example.com/reserved"), FlavorSpec("gpu"))),
    Scenario("next-flavor", (Team("vision", {"small": 1, "big": 2}),), (
        Submit("v1", "vision"), Submit("v2", "vision", units=2), Submit("v1b", "vision")),
        flavors=(FlavorSpec("small"), FlavorSpec("big"))),
    Scenario("unmanaged", (Team("vision", {"gpu": 1}),), (Submit("v1", "vision"),), managed=False),
    Scenario("uncovered", (Team("vision", {"gpu": 1}),), (
        Submit("scratch", "vision", extra={"ephemeral-storage": "1Gi"}), Submit("plain", "vision"))),
]


def _objects(s: Scenario) -> list[dict[str, Any]]:
    """The scenario's Namespaces, Topologies, ResourceFlavors, ClusterQueues and LocalQueues."""
    out: list[dict[str, Any]] = []
    flavors = []
    for f in s.flavors:
        topology = (f"{s.id}-{f.name}", f.topology) if f.topology else None
        flavor = Flavor(f"{s.id}-{f.name}", dict(GPU_NODES), None, f"scenario {s.id}", topology=topology)
        flavors.append(flavor)
        body = queue_objects.resource_flavor(flavor)
        if f.taint:
            body["spec"]["nodeTaints"] = [{"key": f.taint, "value": "true", "effect": "NoSchedule"}]
        out.append(body)
        if topology:
            out.append(queue_objects.topology(*topology))
    for t in s.teams:
        namespace = name = f"{s.id}-{t.name}"
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace,
                                                                          "labels": {queue_objects.NAME_LABEL: namespace}}})
        out.append(queue_objects.cluster_queue(
            name, namespace, s.id, s.resource, tuple(flavors),
            lambda f, t=t: t.gpus.get(f.name.removeprefix(f"{s.id}-"), 0), "64", "256Gi", t.borrowing_limit))
        out.append(queue_objects.local_queue(name, namespace))
    return sorted(out, key=lambda b: ORDER.index(b["kind"]))


def _capacity(s: Scenario, plane: ControlPlane) -> list[Capacity]:
    """The KWOK nodes as the model sees them. Without a Topology Kueue admits on quota alone: the
    model's own node check beyond Kueue (pods no node can hold, kueue_admission.py) is not Kueue's
    decision, so there the GPU nodes count as holding whatever the scenario asks."""
    capacity = [Capacity.of(n) for n in plane.lab.nodes]
    if not s.topology_aware:
        for c in capacity:
            if c.node.labels.get("nvidia.com/gpu.present") == "true":
                c.free[s.resource] = float("inf")
    return capacity


def _job(s: Scenario, j: Submit) -> dict[str, Any]:
    namespace = f"{s.id}-{j.team}"
    labels = {kueue_objects.QUEUE_LABEL: namespace}
    if j.priority:
        labels[kueue_preemption.PRIORITY_LABEL] = j.priority
    annotations = dict(RUNS_ON)
    if j.required_level:
        annotations[kueue_objects.REQUIRED_TOPOLOGY] = j.required_level
    requests = {"cpu": "1", "memory": "1Gi", s.resource: str(j.units), **j.extra}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": j.name, "namespace": namespace, "labels": labels},
            "spec": {"suspend": True, "parallelism": j.pods, "completions": j.pods, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.example.com/trainer:1",
                    "resources": {"requests": requests, "limits": {s.resource: str(j.units)}}}]}}}}


def _url(body: dict[str, Any]) -> str:
    if body["kind"] == "Namespace":
        return "/api/v1/namespaces"
    plural = PLURALS.get(body["kind"], body["kind"].lower() + "s")
    namespace = body["metadata"].get("namespace")
    base = f"/apis/{body['apiVersion']}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


@pytest.fixture(scope="module")
def scenario_objects() -> list[Obj]:
    """The lab-ha plan's objects, its manager Configuration less waitForPodsReady (docstring) and
    with its managedJobsNamespaceSelector opened to the scenarios' namespaces (not the unmanaged ones)."""
    plan = program.run(STACK)
    out = []
    for o in cluster_objects.collect(plan, cluster.upstream_dir(), plan.config.kubernetes_version).objects:
        if o.kind == "ConfigMap" and o.name == kueue.MANAGER_CONFIG:
            body = copy.deepcopy(o.body)
            config = yaml.safe_load(body["data"][kueue.CONFIG_KEY])
            config.pop("waitForPodsReady", None)
            config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] += [
                f"{s.id}-{t.name}" for s in SCENARIOS if s.managed for t in s.teams]
            body["data"][kueue.CONFIG_KEY] = yaml.safe_dump(config)
            o = Obj(body, o.source, o.origin)
        out.append(o)
    return out


@pytest.fixture(scope="module")
def removed(real_kueue: kueue.RealKueue, client: api.Client) -> Iterator[list[dry_run.Made]]:
    """What each scenario made, deleted as it ends (its Jobs first) and waited for (bounded) once,
    after the last: namespace deletion takes seconds each. A topology-aware scenario's are waited
    for at once: the next one needs the nodes its pods took."""
    made: list[dry_run.Made] = []
    yield made
    left = [url for m in made for url in m.remove(client)]
    assert not left, f"still there after the scenarios: {left}"


@pytest.fixture(scope="module")
def real_kueue(control_plane: ControlPlane, client: api.Client, scenario_objects: list[Obj],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[kueue.RealKueue]:
    """One manager for every scenario, configured as scenario_objects says."""
    toolchain_binary(KUEUE, "kueue")
    assert control_plane.certs is not None
    folder = tmp_path_factory.mktemp("kueue-scenarios")
    manager = kueue.RealKueue(client, control_plane.certs.kubeconfig("admin", control_plane.server, folder), folder)
    try:
        manager.start(scenario_objects)
    except Exception as err:
        manager.stop()
        pytest.fail(f"the Kueue manager did not come up: {err}\n{manager.log.read_text(errors='replace')[-6000:]}")
    classes = dry_run.Made()
    for body in queue_objects.priority_classes():
        assert dry_run.create_or_replace(client, _url(body), body, classes).ok
    yield manager
    assert not classes.remove(client)
    left = manager.stop()
    assert not left, f"still there after Kueue's teardown: {left}"


def _condition(wl: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _workload(client: api.Client, namespace: str, job: str) -> dict[str, Any] | None:
    items = client.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads").get("items", [])
    return next((w for w in items if any(r.get("name") == job for r in w["metadata"].get("ownerReferences") or [])),
                None)


def _state(wl: dict[str, Any] | None, resource: str) -> tuple[str, str, str]:
    """(state, flavor or preemption reason, message) of a Workload now; state '' while undecided."""
    if wl is None:
        return "", "", "no Workload"
    if _condition(wl, "Admitted").get("status") == "True":
        return kueue_admission.ADMITTED, str(wl["status"]["admission"]["podSetAssignments"][0]["flavors"].get(resource, "")), ""
    preempted = _condition(wl, "Preempted")
    if preempted.get("status") == "True":
        return kueue_preemption.PREEMPTED, str(preempted.get("reason", "")), str(preempted.get("message", ""))
    message = str(_condition(wl, "QuotaReserved").get("message", ""))
    if "preemption" in message:  # Kueue is evicting for it: not settled
        return "", "", message
    if any(s in message for s in NEVER_SAYS):
        return kueue_admission.NEVER, "", message
    if any(s in message for s in WAITS_SAYS):
        return kueue_admission.WAITING, "", message
    return "", "", message


def _settle(client: api.Client, namespace: str, job: str, resource: str) -> tuple[str, str, str]:
    """Real Kueue's decision for a Job just created: admitted, or pending (for STILL_PENDING s),
    or no Workload at all (for NO_WORKLOAD s: never)."""
    began = time.monotonic()
    pending_since: float | None = None
    last: tuple[str, str, str] = ("", "", "")
    while time.monotonic() - began < VERDICT_TIMEOUT:
        wl = _workload(client, namespace, job)
        last = _state(wl, resource)
        if wl is None and time.monotonic() - began > NO_WORKLOAD:
            return kueue_admission.NEVER, "", "Kueue made no Workload"
        if last[0] == kueue_admission.ADMITTED:
            return last
        if last[0] in (kueue_admission.NEVER, kueue_admission.WAITING):
            pending_since = pending_since or time.monotonic()
            if time.monotonic() - pending_since >= STILL_PENDING:
                return last
        else:
            pending_since = None
        time.sleep(0.5)
    raise TimeoutError(f"Kueue settled nothing for Job {namespace}/{job} within {VERDICT_TIMEOUT} s: {last}")


def _expected(v: kueue_admission.Verdict) -> tuple[str, str]:
    if v.state == kueue_admission.ADMITTED:
        return v.state, v.flavors.get("main", "")
    if v.state == kueue_preemption.PREEMPTED:
        found = re.search(r"\((\w+)\)$", v.reasons[0] if v.reasons else "")
        return v.state, found.group(1) if found else ""
    return v.state, ""


def _model(s: Scenario, plane: ControlPlane, scenario_objects: list[Obj]) -> list[kueue_admission.Verdict]:
    config = [o for o in scenario_objects if o.kind == "ConfigMap" and o.name == kueue.MANAGER_CONFIG]
    classes = [Obj(b, "urn:e2e", "test") for b in queue_objects.priority_classes()]
    world_objects = [*config, *classes, *(Obj(b, "urn:e2e", "test") for b in [*_objects(s), *(_job(s, j) for j in s.jobs)])]
    world = kueue_objects.read(world_objects)
    return kueue_preemption.admit_in_order(world, kueue_preemption.read(world_objects), world.workloads, _capacity(s, plane))


def test_the_scenarios_cover_every_outcome_the_model_gives(control_plane: ControlPlane,
                                                           scenario_objects: list[Obj]) -> None:
    """The table stays worth running: admitted, waiting, never, and both preemption reasons."""
    seen = {_expected(v)[0] if v.state != kueue_preemption.PREEMPTED else _expected(v)
            for s in SCENARIOS for v in _model(s, control_plane, scenario_objects)}
    assert {kueue_admission.ADMITTED, kueue_admission.WAITING, kueue_admission.NEVER,
            (kueue_preemption.PREEMPTED, kueue_preemption.IN_CLUSTER_QUEUE),
            (kueue_preemption.PREEMPTED, kueue_preemption.RECLAMATION)} <= seen, seen


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_real_kueue_decides_each_scenario_as_the_model_does(
        scenario: Scenario, client: api.Client, control_plane: ControlPlane, removed: list[dry_run.Made],
        scenario_objects: list[Obj]) -> None:
    bodies = _objects(scenario)
    jobs = [_job(scenario, j) for j in scenario.jobs]
    model = _model(scenario, control_plane, scenario_objects)
    made = dry_run.Made()
    removed.append(made)
    lines, differences = [], []
    try:
        for body in bodies:
            response = dry_run.create_or_replace(client, _url(body), body, made)
            assert response.ok, f"{body['kind']} {body['metadata']['name']}: {response.status} {response.body}"
        for body in bodies:
            if body["kind"] == "ClusterQueue":
                client.wait_for(f"ClusterQueue {body['metadata']['name']} Active", f"{_url(body)}/{body['metadata']['name']}",
                                lambda cq: _condition(cq, "Active").get("status") == "True", VERDICT_TIMEOUT)
        for job in jobs:
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
            _settle(client, namespace, name, scenario.resource)
        for job, verdict in zip(jobs, model, strict=True):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            wl = _workload(client, namespace, name)
            state, detail, message = _state(wl, scenario.resource) if wl is not None else (
                kueue_admission.NEVER, "", "Kueue made no Workload")
            lines.append(f"{namespace}/{name}: model {_expected(verdict)} {verdict.reasons}; Kueue {(state, detail)} {message}")
            if (state, detail) != _expected(verdict):
                differences.append(lines[-1])
    finally:
        for job in jobs:
            client.request("DELETE", f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/"
                           f"{job['metadata']['name']}?propagationPolicy=Background")
        for url in reversed(made.urls):
            client.request("DELETE", url)
        if scenario.topology_aware:
            assert not made.remove(client), "a topology-aware scenario's objects outlived it"
    assert not differences, "the model and real Kueue disagree:\n  " + "\n  ".join(differences) + \
        "\nevery decision:\n  " + "\n  ".join(lines)
