"""GKE queued provisioning in Kueue's part of the whole-cluster check (render/cluster/kueue_provisioning.py):

- the objects components/queues/provisioning.py makes (ProvisioningRequestConfig, AdmissionCheck,
  a ClusterQueue running the check on the flex-start flavor only, the flavor tolerating GKE's
  gke-queued taint) held to the CRDs of the pinned Kueue chart, and malformed ones refused;
- the model on GKE's node model (render/cluster/nodes.py: the NodePool inputs a plan registers): a
  flex-start pool has no node at `up`, yet a job its maximum holds is admitted, its nodes coming
  from a ProvisioningRequest; a job larger than the pool's maximum is never admitted, the problem
  naming the job, its queue, the pool and how many nodes are short; a queue whose AdmissionCheck
  or ProvisioningRequestConfig is missing is inactive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.queues import provisioning
from config.queues import Flavor
from render.cluster import Report, kueue_check
from render.cluster.admission import Admission
from render.cluster.nodes import Node, gke_nodes
from render.cluster.objects import Obj
from render.cluster.scheduling import expand
from tests.render.kueue_builders import (
    GPU,
    cluster_queue,
    job,
    local_queue,
    manager_config,
    namespace,
    obj,
    quota,
)
from tests.render.test_kueue_admission_check import RELEASE_URN, _chart_objects

FLEX_FLAVOR = Flavor("h100-flex-flex-start", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                                              "gpu-cluster/pool": "h100-flex", "cloud.google.com/gke-queued": "true"},
                     16, "gke.gpuPools")
ON_DEMAND = Flavor("nvidia-l4", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, 4, "gke.gpuPools")
FLAVORS = (ON_DEMAND, FLEX_FLAVOR)


def _resource_flavor(f: Flavor) -> Obj:
    from components.queues import objects

    return obj(provisioning.tolerating_queued_nodes(objects.resource_flavor(f)))


def _team_queue(gpus: int) -> Obj:
    cq = cluster_queue("team-a", [(ON_DEMAND.name, [quota(GPU, 4)]), (FLEX_FLAVOR.name, [quota(GPU, gpus)])])
    return obj(provisioning.with_admission_check(cq.body, FLAVORS))


def _kueue_objects(gpus: int = 16, *, check: bool = True, config: bool = True) -> list[Obj]:
    extra = [obj(b) for b in provisioning.provisioning_objects(FLAVORS, GPU)
             if (check or b["kind"] != "AdmissionCheck") and (config or b["kind"] != "ProvisioningRequestConfig")]
    return [*map(_resource_flavor, FLAVORS), _team_queue(gpus), local_queue("team-a", "team", "team-a"), *extra]


# --- against the pinned chart's CRDs ------------------------------------------------------------------

def _schema_problems(upstream: Path, custom: list[Obj]) -> list[str]:
    kinds = ("ClusterQueue", "LocalQueue", "ResourceFlavor", "AdmissionCheck", "ProvisioningRequestConfig")
    objects = [*_chart_objects(upstream), *custom]
    return [f"{p.subject}: {p.reason}" for p in Admission(objects, {"urn:queues": [RELEASE_URN]}, "1.33").schema()
            if p.subject.split(" ", 1)[0] in kinds]


def test_the_queued_provisioning_objects_are_valid_against_the_chart_crds(upstream_dir: Path) -> None:
    objects = _kueue_objects()
    assert {o.kind for o in objects} >= {"AdmissionCheck", "ProvisioningRequestConfig"}
    assert _schema_problems(upstream_dir, objects) == []


@pytest.mark.parametrize("kind, break_it, expected", [
    ("ProvisioningRequestConfig", lambda s: s.update(provisioningClassName="Queued_Provisioning"), "does not match"),
    ("ProvisioningRequestConfig", lambda s: s.pop("provisioningClassName"), "'provisioningClassName' is a required"),
    ("AdmissionCheck", lambda s: s.pop("controllerName"), "'controllerName' is a required property"),
    ("ClusterQueue", lambda s: s["admissionChecksStrategy"]["admissionChecks"][0].update(onFlavors="h100"),
     "is not of type 'array'"),
    # v1beta1's list of checks for every flavor: v1beta2 has only admissionChecksStrategy.
    ("ClusterQueue", lambda s: s.update(admissionChecks=["gke-queued-provisioning"]),
     "('admissionChecks' was unexpected)"),
], ids=["bad-class", "no-class", "no-controller", "on-flavors-not-a-list", "v1beta1-admission-checks"])
def test_a_malformed_provisioning_object_is_refused(upstream_dir: Path, kind: str, break_it: Any, expected: str) -> None:
    objects = _kueue_objects()
    (target,) = [o for o in objects if o.kind == kind]
    break_it(target.body["spec"])
    problems = _schema_problems(upstream_dir, objects)
    assert problems and all(p.startswith(f"{kind} ") and "not valid against CRD" in p for p in problems), problems
    assert any(expected in p for p in problems), problems


# --- the model on GKE's node model ----------------------------------------------------------------------

def _pool(name: str, machine: str, accelerator: str, gpus: int, max_nodes: int, queued: bool) -> dict[str, Any]:
    """A GPU NodePool's inputs as the plan registers them (components/gke/gpu_node_pool.py)."""
    out: dict[str, Any] = {
        "name": name, "nodeLocations": ["us-central1-a"],
        "autoscaling": {"minNodeCount": 0, "maxNodeCount": max_nodes, "locationPolicy": "ANY"},
        "nodeConfig": {"machineType": machine, "guestAccelerators": [{"type": accelerator, "count": gpus}],
                       "labels": {"gpu-cluster/pool": name},
                       "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]},
    }
    if queued:
        out["queuedProvisioning"] = {"enabled": True}
        out["nodeConfig"]["flexStart"] = True
        # the pool's own label (components/gke/provisioning.py): GKE sets only the taint
        out["nodeConfig"]["labels"]["cloud.google.com/gke-queued"] = "true"
    return out


def _nodes(flex_max: int = 2, flex_labelled: bool = True) -> list[Node]:
    flex = _pool("h100-flex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, flex_max, True)
    if not flex_labelled:
        del flex["nodeConfig"]["labels"]["cloud.google.com/gke-queued"]
    nodes = expand(gke_nodes([_pool("l4", "g2-standard-8", "nvidia-l4", 1, 4, False), flex]))
    for n in nodes:
        n.extended = {GPU: float(n.gpus)}  # GKE's device plugin advertises them (scheduling.daemonsets)
    return nodes


def _judge(*objects: Obj, nodes: list[Node] | None = None) -> Report:
    report = Report("gke")
    kueue_check.judge(report, [manager_config(), namespace("team-a"), *objects], nodes or _nodes(), [])
    return report


def _h100_job(name: str, pods: int, **spec: Any) -> Obj:
    return job(name, pods, gpus=8, nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, **spec)


def test_the_flex_start_pool_has_no_node_at_up() -> None:
    flex = [n for n in _nodes() if n.group == "h100-flex"]
    assert len(flex) == 2 and all(n.min_count == 0 for n in flex)
    assert all({"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"} in n.taints for n in flex)


def test_a_job_the_pools_maximum_holds_is_admitted_through_a_provisioning_request() -> None:
    report = _judge(*_kueue_objects(), _h100_job("pretrain", 2))
    assert report.ok, report.problems
    (line,) = report.queued
    assert "admitted whole, main on h100-flex-flex-start" in line
    assert "ProvisioningRequest (queued-provisioning.gke.io" in line


def test_a_flex_start_pool_without_its_own_queued_label_holds_no_job_of_its_flavor() -> None:
    """GKE taints queued-provisioning nodes but does not label them cloud.google.com/gke-queued
    (Cluster Toolkit's gke-node-pool adds the label itself): a pool that left it to GKE would never
    match its flavor, and its jobs would wait forever."""
    flex = [n for n in _nodes(flex_labelled=False) if n.group == "h100-flex"]
    assert all("cloud.google.com/gke-queued" not in n.labels for n in flex)
    assert all(n.labels["cloud.google.com/gke-flex-start"] == "true" for n in flex)
    report = _judge(*_kueue_objects(), _h100_job("pretrain", 2), nodes=_nodes(flex_labelled=False))
    assert any(p.startswith("Job team-a/pretrain") and "flex-start flavor h100-flex-flex-start: no node pool carries "
               "its nodeLabels" in p for p in report.problems), report.problems


def test_a_job_larger_than_the_pools_maximum_is_never_admitted_naming_the_pool_and_shortfall() -> None:
    report = _judge(*_kueue_objects(gpus=24), _h100_job("pretrain", 3))
    problem = next(p for p in report.problems if "flex-start pool" in p)
    assert problem.startswith("Job team-a/pretrain (LocalQueue team-a/team → ClusterQueue team-a")
    assert ("flex-start pool h100-flex scales to at most 2 nodes (gke.gpuPools[].autoscaling.maxNodes x zones) "
            "but the job needs 3 (3 pods of main at 1 per node): 1 node short") in problem


def test_a_pod_no_node_of_the_pool_can_hold_is_named() -> None:
    big = _h100_job("pretrain", 1)
    big.body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"memory": "4000Gi"}
    report = _judge(*_kueue_objects(), big)
    assert any("flex-start pool h100-flex: a node of it cannot hold one pod of pod set main (insufficient memory"
               in p for p in report.problems), report.problems


@pytest.mark.parametrize("missing, words", [
    ({"check": False}, "its AdmissionCheck gke-queued-provisioning does not exist"),
    ({"config": False}, "names ProvisioningRequestConfig gke-queued-provisioning, which does not exist"),
])
def test_a_queue_whose_provisioning_check_is_missing_admits_nothing(missing: dict[str, bool], words: str) -> None:
    report = _judge(*_kueue_objects(**missing), _h100_job("pretrain", 1))
    assert any(p.startswith("Job team-a/pretrain") and "ClusterQueue team-a is inactive" in p and words in p
               for p in report.problems), report.problems


def test_a_job_on_the_on_demand_flavor_needs_no_provisioning_request() -> None:
    l4 = job("finetune", 2, gpus=1, nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-l4"})
    report = _judge(*_kueue_objects(), l4)
    assert report.ok, report.problems
    (line,) = report.queued
    assert "main on nvidia-l4" in line and "ProvisioningRequest" not in line


def test_the_on_demand_flavor_never_lands_on_queued_nodes() -> None:
    """Same accelerator, two pools: the on-demand flavor's pods do not tolerate GKE's gke-queued taint."""
    h100 = Flavor("nvidia-h100-80gb", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, 16, "gke.gpuPools")
    from components.queues import objects as queue_objects

    cq = cluster_queue("team-a", [(h100.name, [quota(GPU, 16)])])
    report = _judge(obj(queue_objects.resource_flavor(h100)), cq, local_queue("team-a", "team", "team-a"),
                    _h100_job("pretrain", 1))
    assert any("untolerated taint cloud.google.com/gke-queued" in p for p in report.problems), report.problems
