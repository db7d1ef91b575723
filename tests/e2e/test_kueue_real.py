"""The check's Kueue model (render/cluster/kueue_admission.py) held to the real Kueue manager
(e2e/kueue.py), the release the program installs: v0.19.2 built from sigs.k8s.io/kueue, the version
kueue_objects.MODELLED_VERSION names (issue 33's scenarios: test_kueue_real_scenarios.py).

The lab-ha stack's own Kueue objects (its chart's CRDs and webhooks, its manager Configuration, its
ResourceFlavor, ClusterQueues, LocalQueues and WorkloadPriorityClasses) go to the e2e control plane
(made from lab: two GPU nodes of one GPU each); every ClusterQueue must become Active. Then Jobs are
submitted one after another, each through Kueue's own webhooks (failurePolicy Fail: a Job is only
created when the webhook server answers), and real Kueue's decision for each (admitted on which
flavor, or pending: waiting for quota, or over what the queue could ever use) must be the model's,
judged in the same order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.toolchain_versions import KUEUE
from e2e import api, dry_run, kueue
from e2e.control_plane import ControlPlane
from render import cluster, program
from render.cluster import kueue_admission, kueue_objects
from render.cluster import objects as cluster_objects
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity
from tests.toolchain import toolchain_binary

STACK = "lab-ha"  # the committed stack with queues on (lab has none)
KUEUE_KINDS = ("ResourceFlavor", "WorkloadPriorityClass", "Topology", "ClusterQueue", "LocalQueue")
PLURALS = {"WorkloadPriorityClass": "workloadpriorityclasses", "Topology": "topologies"}  # the CRDs' names.plural
ACTIVE_TIMEOUT = 60
VERDICT_TIMEOUT = 60  # s for Kueue to admit a Job or say why not
STILL_PENDING = 5  # s a pending Job is watched to stay pending
GPU = "nvidia.com/gpu"
NEVER_SAYS = "> maximum capacity"  # flavorassigner.go: more than the queue could ever use
WAITS_SAYS = "insufficient unused quota"  # flavorassigner.go: quota in use by others
# KWOK's pod-complete stage ends a Job's pod a few seconds after it is Ready, which would free its
# quota; the model judges Jobs that still run, so their pods complete only after the test.
RUNS_ON = {"pod-complete.stage.kwok.x-k8s.io/delay": "10m", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "10m"}


def _url(body: dict[str, Any]) -> str:
    plural = PLURALS.get(body["kind"], body["kind"].lower() + "s")
    base = f"/apis/{body['apiVersion']}"
    namespace = body["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


@pytest.fixture(scope="module")
def plan_objects() -> list[Obj]:
    plan = program.run(STACK)
    return cluster_objects.collect(plan, cluster.upstream_dir(), plan.config.kubernetes_version).objects


@pytest.fixture(scope="module")
def real_kueue(control_plane: ControlPlane, client: api.Client, plan_objects: list[Obj],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[kueue.RealKueue]:
    toolchain_binary(KUEUE, "kueue")
    assert control_plane.certs is not None
    folder = tmp_path_factory.mktemp("kueue")
    kubeconfig = control_plane.certs.kubeconfig("admin", control_plane.server, folder)
    manager = kueue.RealKueue(client, kubeconfig, folder)
    try:
        manager.start(plan_objects)
    except Exception as err:
        manager.stop()
        pytest.fail(f"the Kueue manager did not come up: {err}\n{_tail(manager.log)}")
    yield manager
    left = manager.stop()
    assert not left, f"still there after Kueue's teardown: {left}"


def _tail(log: Path) -> str:
    return log.read_bytes()[-6000:].decode(errors="replace") if log.exists() else "(no log)"


@pytest.fixture(scope="module")
def queues(real_kueue: kueue.RealKueue, client: api.Client, plan_objects: list[Obj]) -> Iterator[list[Obj]]:
    """The stack's team namespaces and Kueue objects, created for real (through Kueue's webhooks),
    and removed while Kueue still runs (it takes its finalizers off them and their Workloads)."""
    made = [o for o in plan_objects if o.kind in KUEUE_KINDS and o.api_version.startswith("kueue.x-k8s.io/")]
    namespaces = {o.namespace for o in made if o.namespace}
    ours = dry_run.Made()
    for o in plan_objects:
        if o.kind == "Namespace" and o.name in namespaces:
            response = dry_run.create_or_replace(client, "/api/v1/namespaces", o.body, ours)
            assert response.ok, response.body
    for o in sorted(made, key=lambda o: KUEUE_KINDS.index(o.kind)):
        response = dry_run.create_or_replace(client, _url(o.body), o.body, ours)
        assert response.ok, f"{o.kind} {o.name}: {response.status} {response.body}"
    yield made
    left = ours.remove(client)
    assert not left, f"still there {dry_run.DELETE_TIMEOUT} s after deletion, Kueue running: {left}"


def test_real_kueue_makes_every_clusterqueue_of_the_stack_active(client: api.Client, queues: list[Obj]) -> None:
    cluster_queues = [o for o in queues if o.kind == "ClusterQueue"]
    assert cluster_queues, "the lab-ha plan has no ClusterQueue to hold to Kueue"
    for o in cluster_queues:
        client.wait_for(f"ClusterQueue {o.name} Active", f"{_url(o.body)}/{o.name}",
                        lambda cq: any(c["type"] == "Active" and c["status"] == "True"
                                       for c in (cq.get("status") or {}).get("conditions") or []), ACTIVE_TIMEOUT)


def _job(name: str, namespace: str, queue: str, gpus: int) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {kueue_objects.QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {
                "metadata": {"annotations": RUNS_ON},
                "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example.com/trainer:1",
                                "resources": {"requests": resources, "limits": {GPU: str(gpus)}}}]}}}}


def _condition(wl: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _workload(client: api.Client, namespace: str, job: str) -> dict[str, Any] | None:
    items = client.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads").get("items", [])
    return next((w for w in items if any(r.get("name") == job for r in w["metadata"].get("ownerReferences") or [])),
                None)


def _real_verdict(client: api.Client, namespace: str, job: str) -> tuple[str, str, str]:
    """(state, flavor, message) as the Job's Workload says once Kueue has decided, within the timeout."""
    deadline = time.monotonic() + VERDICT_TIMEOUT
    seen: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        seen = _workload(client, namespace, job)
        if seen is not None:
            if _condition(seen, "Admitted").get("status") == "True":
                flavors = seen["status"]["admission"]["podSetAssignments"][0]["flavors"]
                return kueue_admission.ADMITTED, str(flavors.get(GPU, "")), ""
            pending = _condition(seen, "QuotaReserved")
            message = str(pending.get("message", ""))
            if pending.get("status") == "False" and (NEVER_SAYS in message or WAITS_SAYS in message):
                time.sleep(STILL_PENDING)
                again = _workload(client, namespace, job) or {}
                if _condition(again, "Admitted").get("status") != "True":
                    return (kueue_admission.NEVER if NEVER_SAYS in message else kueue_admission.WAITING), "", message
                continue
        time.sleep(0.5)
    raise TimeoutError(f"Kueue decided nothing for Job {namespace}/{job} within {VERDICT_TIMEOUT} s: {seen}")


def test_real_kueue_admits_and_holds_the_jobs_as_the_model_does(
        client: api.Client, control_plane: ControlPlane, queues: list[Obj], plan_objects: list[Obj]) -> None:
    """vision and language each hold one GPU of nominal quota and may borrow one from the cohort
    (Pulumi.lab-ha.yaml; the program's own ClusterQueue gpu-cluster has none): vision's first Job
    runs on its own quota, its second borrows language's idle GPU, one of three GPUs is more than
    it could ever use, and one more is over its borrowing limit. Preemption (language reclaiming
    its GPU) is not part of admit_in_order and not judged here."""
    local = {o.namespace: o.name for o in queues if o.kind == "LocalQueue"}
    scenario = [("vision-first", "team-vision", 1), ("vision-borrows", "team-vision", 1),
                ("vision-too-big", "team-vision", 3), ("vision-over-its-borrowing-limit", "team-vision", 1)]
    jobs = [_job(name, ns, local[ns], gpus) for name, ns, gpus in scenario]
    world = kueue_objects.read([o for o in plan_objects if not (o.kind in ("Job", "CronJob") or "pytorch" in o.kind.lower())]
                               + [Obj(j, "urn:e2e", "test") for j in jobs])
    capacity = [Capacity.of(n) for n in control_plane.lab.nodes]
    model = kueue_admission.admit_in_order(world, world.workloads, capacity)
    differences, lines = [], []
    try:
        for job, verdict in zip(jobs, model, strict=True):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
            state, flavor, message = _real_verdict(client, namespace, name)
            expected_flavor = verdict.flavors.get("main", "") if verdict.state == kueue_admission.ADMITTED else ""
            lines.append(f"{namespace}/{name}: model {verdict.state} {expected_flavor} {verdict.reasons}; "
                         f"Kueue {state} {flavor} {message}")
            if (state, flavor) != (verdict.state, expected_flavor):
                differences.append(lines[-1])
    finally:
        for job in jobs:
            client.request("DELETE", f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/"
                           f"{job['metadata']['name']}?propagationPolicy=Background")
    assert not differences, "the model and real Kueue disagree:\n  " + "\n  ".join(differences) + \
        "\nevery decision:\n  " + "\n  ".join(lines)
    assert {v.state for v in model} == {kueue_admission.ADMITTED, kueue_admission.WAITING, kueue_admission.NEVER}, lines


def test_the_manager_is_the_pinned_release(real_kueue: kueue.RealKueue) -> None:
    """cmd/kueue logs the version ldflags build.sh sets (upstream's Makefile LD_FLAGS) as it starts;
    it is the release the model follows."""
    assert KUEUE.version == f"v{kueue_objects.MODELLED_VERSION}"
    assert f'"gitVersion":"{KUEUE.version}"' in real_kueue.log.read_text(errors="replace"), _tail(real_kueue.log)
