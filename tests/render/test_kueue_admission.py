"""Kueue's admission model (render/cluster/kueue_admission.py) on small worlds: gang admission in
order, borrowing inside a cohort, flavors in order, a rack too small, the GPU health taint
(kueue#9616), and what makes a workload never admitted."""

from __future__ import annotations

from render.cluster import kueue_admission as ka
from render.cluster import kueue_objects
from render.cluster.scheduling import Capacity, place
from render.cluster.workloads import workloads
from tests.render.kueue_builders import (
    GPU,
    capacity,
    cluster_queue,
    flavor,
    gpu_node,
    job,
    local_queue,
    manager_config,
    namespace,
    obj,
    one_team,
    pytorch_job,
    quota,
    topology,
)

HEALTH_TAINT = {"key": "gpu-cluster.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"}
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}


def _alone(objects: list, *nodes) -> list[ka.Verdict]:
    return ka.each_alone(kueue_objects.read(objects), capacity(*nodes))


def _in_order(objects: list, *nodes) -> list[ka.Verdict]:
    world = kueue_objects.read(objects)
    return ka.admit_in_order(world, world.workloads, capacity(*nodes))


# --- all or nothing -------------------------------------------------------------------------------

def test_two_jobs_each_needing_every_gpu_one_admitted_the_other_waits() -> None:
    nodes = [gpu_node("gpu-1", 1), gpu_node("gpu-2", 1)]
    first, second = _in_order(one_team(2, job("first", 2), job("second", 2)), *nodes)
    assert first.state == ka.ADMITTED and sorted(first.nodes["main"]) == ["gpu-1", "gpu-2"]
    # The second is not half-started: none of its pods is placed, its whole quota is still to come.
    assert second.state == ka.WAITING and not second.nodes, second
    assert second.reasons == ["waits for quota: nvidia.com/gpu in flavor gpu (2 asked, 0 unused)"]
    # Once the first is done (its quota released), the second is admitted whole.
    (later,) = _in_order(one_team(2, job("second", 2)), *nodes)
    assert later.state == ka.ADMITTED


def test_without_kueue_the_same_two_gangs_each_half_start() -> None:
    """The deadlock Kueue prevents, in the check's scheduler model: the Job controller creates
    both Jobs' pods at once, the scheduler binds them as they come, each gang holds one GPU and
    waits for the other forever."""
    jobs = workloads([job("first", 2, queue=None), job("second", 2, queue=None)])
    nodes = capacity(gpu_node("gpu-1", 1), gpu_node("gpu-2", 1))
    one_pod = [type(w)(w.kind, w.namespace, w.name, w.obj, w.spec, w.metadata, 1, job=True) for w in jobs]
    placed = {w.name: 0 for w in jobs}
    for _ in range(2):  # the pods arrive interleaved: first-0, second-0, first-1, second-1
        for w in one_pod:
            placed[w.name] += place(w, nodes, keep=True).placed
    assert placed == {"first": 1, "second": 1}


# --- cohorts ----------------------------------------------------------------------------------------

def _cohort(b_borrowing: int | None, a_lending: int | None = None, *jobs) -> list:
    return [manager_config(), namespace("team-a"), namespace("team-b"), flavor("gpu"),
            cluster_queue("team-a", [("gpu", [quota(GPU, 4, lending=a_lending)])], cohort="gpu-cluster"),
            cluster_queue("team-b", [("gpu", [quota(GPU, 0, borrowing=b_borrowing)])], cohort="gpu-cluster"),
            local_queue("team-a", "team", "team-a"), local_queue("team-b", "team", "team-b"), *jobs]


NODES = [gpu_node(f"gpu-{i}", 1) for i in range(1, 5)]


def test_a_team_without_gpus_borrows_up_to_its_limit_from_an_idle_team() -> None:
    (two,) = _alone(_cohort(2, None, job("b-two", 2, namespace="team-b")), *NODES)
    assert two.state == ka.ADMITTED and two.borrowed == {("gpu", GPU): 2.0}
    (three,) = _alone(_cohort(2, None, job("b-three", 3, namespace="team-b")), *NODES)
    assert three.state == ka.NEVER
    assert "nvidia.com/gpu asks 3, ClusterQueue team-b can use at most 2 (nominal 0 + 2 borrowed from cohort gpu-cluster)" \
        in three.reasons[0]


def test_borrowing_waits_while_the_lender_uses_its_quota() -> None:
    a_busy, b = _in_order(_cohort(2, None, job("a-three", 3), job("b-two", 2, namespace="team-b")), *NODES)
    assert a_busy.state == ka.ADMITTED and not a_busy.borrowed
    assert b.state == ka.WAITING and "(2 asked, 1 unused)" in b.reasons[0]


def test_borrowing_limit_counts_what_the_team_already_borrowed() -> None:
    one, two = _in_order(_cohort(2, None, job("b-one", 1, namespace="team-b"), job("b-two", 2, namespace="team-b")), *NODES)
    assert one.state == ka.ADMITTED and one.borrowed == {("gpu", GPU): 1.0}
    # team-a idles with 4 GPUs, but team-b may hold at most 2 borrowed at a time.
    assert two.state == ka.WAITING and "(2 asked, 1 unused)" in two.reasons[0]


def test_lending_limit_caps_what_the_cohort_can_borrow() -> None:
    (b,) = _alone(_cohort(None, 1, job("b-two", 2, namespace="team-b")), *NODES)
    assert b.state == ka.NEVER and "can use at most 1 (nominal 0 + 1 borrowed" in b.reasons[0]


def test_no_cohort_no_borrowing() -> None:
    objects = one_team(2, job("three", 3))
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "can use at most 2 (nominal 2, no cohort)" in v.reasons[0]


# --- flavors --------------------------------------------------------------------------------------------

def _two_flavors(*jobs, borrow: str = "MayStopSearch") -> list:
    return [manager_config(), namespace("team-a"),
            flavor("a100", {"nvidia.com/gpu.product": "A100"}), flavor("h100", {"nvidia.com/gpu.product": "H100"}),
            cluster_queue("team-a", [("a100", [quota(GPU, 2)]), ("h100", [quota(GPU, 4)])],
                          flavorFungibility={"whenCanBorrow": borrow}),
            local_queue("team-a", "team", "team-a"), *jobs]


FLAVOR_NODES = [gpu_node("a-1", 2, **{"nvidia.com/gpu.product": "A100"}),
                gpu_node("h-1", 4, **{"nvidia.com/gpu.product": "H100"})]


def test_flavors_are_tried_in_order_and_the_pods_follow_the_flavor() -> None:
    small, big = _alone(_two_flavors(job("small", 2), job("big", 4)), *FLAVOR_NODES)
    assert small.flavors == {"main": "a100"} and small.nodes["main"] == ["a-1", "a-1"]
    assert big.flavors == {"main": "h100"} and big.nodes["main"] == ["h-1"] * 4


def test_a_flavor_the_pods_do_not_select_is_skipped() -> None:
    pinned = job("pinned", 1, nodeSelector={"nvidia.com/gpu.product": "H100"})
    (v,) = _alone(_two_flavors(pinned), *FLAVOR_NODES)
    assert v.flavors == {"main": "h100"}


def test_a_flavor_taint_the_pods_do_not_tolerate_is_skipped() -> None:
    objects = _two_flavors(job("one", 1))
    objects[2].body["spec"]["nodeTaints"] = [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    (v,) = _alone(objects, *FLAVOR_NODES)
    assert v.flavors == {"main": "h100"}


def test_quota_of_a_flavor_whose_nodes_cannot_hold_the_pods_is_no_capacity() -> None:
    """Quota is declared, not measured: 8 GPUs of quota on a 4-GPU node pool admits a job its
    nodes can never run; the model says so instead of letting it Pending."""
    objects = one_team(8, job("eight", 8), flavor_labels={"pool": "gpu"})
    (v,) = _alone(objects, gpu_node("g-1", 2, pool="gpu"), gpu_node("g-2", 2, pool="gpu"), gpu_node("other", 8))
    assert v.state == ka.NEVER
    assert "admitted by quota to flavor gpu, but only 4 of 8 pods of pod set main can be placed" in v.reasons[0]
    assert "other" not in v.reasons[0], "a node outside the flavor is no capacity for it"


# --- the GPU health taint (kueue#9616) ---------------------------------------------------------------

def test_a_node_the_gpu_health_service_took_out_is_not_capacity() -> None:
    healthy, taken_out = gpu_node("gpu-1", 1), gpu_node("gpu-2", 1)
    taken_out.taints += [HEALTH_TAINT, CORDON_TAINT]
    (v,) = _alone(one_team(2, job("both", 2)), healthy, taken_out)
    assert v.state == ka.NEVER
    assert "gpu-2: untolerated taint gpu-cluster.io/gpu-unhealthy=xid-79:NoSchedule" in v.reasons[0]


def test_pods_pinned_to_a_tainted_node_would_stay_pending() -> None:
    taken_out = gpu_node("gpu-2", 1)
    taken_out.taints.append(HEALTH_TAINT)
    pinned = job("pinned", 1, nodeSelector={"kubernetes.io/hostname": "gpu-2"})
    (v,) = _alone(one_team(2, pinned), gpu_node("gpu-1", 1), taken_out)
    assert v.state == ka.NEVER and "would stay Pending" in v.reasons[0]


def test_topology_assignment_skips_the_tainted_node() -> None:
    rack_1 = [gpu_node("r1-a", 1, rack="r1"), gpu_node("r1-b", 1, rack="r1")]
    rack_2 = [gpu_node("r2-a", 1, rack="r2"), gpu_node("r2-b", 1, rack="r2")]
    rack_1[1].taints.append(HEALTH_TAINT)
    (v,) = _alone(_racks(job("pair", 2, annotations={kueue_objects.REQUIRED_TOPOLOGY: "rack"})), *rack_1, *rack_2)
    assert v.state == ka.ADMITTED and sorted(v.nodes["main"]) == ["r2-a", "r2-b"]


# --- topology -------------------------------------------------------------------------------------------

def _racks(*jobs) -> list:
    return [manager_config(), namespace("team-a"), topology("racks", "rack", "kubernetes.io/hostname"),
            flavor("gpu", topology="racks"), cluster_queue("team-a", [("gpu", [quota(GPU, 16)])]),
            local_queue("team-a", "team", "team-a"), *jobs]


RACKS = [gpu_node("r1-a", 4, rack="r1"), gpu_node("r1-b", 4, rack="r1"), gpu_node("r2-a", 4, rack="r2")]
ONE_RACK = {kueue_objects.REQUIRED_TOPOLOGY: "rack"}


def test_a_rack_too_small_for_a_job_that_requires_one() -> None:
    (v,) = _alone(_racks(job("twelve", 3, gpus=4, annotations=ONE_RACK)), *RACKS)
    assert v.state == ka.NEVER
    assert "flavor gpu: no rack domain holds all 3 pods (rack=r1: 2 of 3; rack=r2: 1 of 3)" in v.reasons[0]
    # The same job without the requirement spans both racks.
    (spread,) = _alone(_racks(job("twelve", 3, gpus=4)), *RACKS)
    assert spread.state == ka.ADMITTED


def test_a_job_that_fits_one_rack_gets_the_tightest_one() -> None:
    (v,) = _alone(_racks(job("four", 1, gpus=4, annotations=ONE_RACK)), *RACKS)
    assert v.nodes["main"] == ["r2-a"]  # rack r2 has just the room, r1 stays whole for a bigger job
    (v,) = _alone(_racks(job("eight", 2, gpus=4, annotations=ONE_RACK)), *RACKS)
    assert sorted(v.nodes["main"]) == ["r1-a", "r1-b"]


def test_a_rack_taken_by_an_admitted_job_makes_the_next_wait() -> None:
    first, second = _in_order(_racks(job("a", 2, gpus=4, annotations=ONE_RACK),
                                     job("b", 2, gpus=4, annotations=ONE_RACK)), *RACKS)
    assert first.state == ka.ADMITTED and second.state == ka.WAITING, second


def test_a_level_the_topology_lacks_is_no_fit() -> None:
    (v,) = _alone(_racks(job("x", 1, annotations={kueue_objects.REQUIRED_TOPOLOGY: "block"})), *RACKS)
    assert v.state == ka.NEVER and "its Topology has no level block" in v.reasons[0]


# --- never admitted ---------------------------------------------------------------------------------------

def test_a_local_queue_that_does_not_exist() -> None:
    (v,) = _alone(one_team(2, job("j", 1, queue="nope")), *NODES)
    assert v.state == ka.NEVER and v.reasons == ["LocalQueue team-a/nope does not exist"]


def test_a_local_queue_pointing_at_no_cluster_queue() -> None:
    objects = one_team(2, local_queue("team-a", "orphan", "gone"), job("j", 1, queue="orphan"))
    (v,) = _alone(objects, *NODES)
    assert v.reasons == ["LocalQueue team-a/orphan points at ClusterQueue gone, which does not exist"]


def test_namespace_selector_must_match_the_job_namespace() -> None:
    only_b = {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}}
    objects = [manager_config(), namespace("team-a"), flavor("gpu"),
               cluster_queue("team-a", [("gpu", [quota(GPU, 2)])], selector=only_b),
               local_queue("team-a", "team", "team-a"), job("j", 1)]
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "does not admit workloads from namespace team-a" in v.reasons[0]
    objects[3].body["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    assert _alone(objects, *NODES)[0].state == ka.ADMITTED
    del objects[3].body["spec"]["namespaceSelector"]  # unset: Kueue's nothing selector
    assert _alone(objects, *NODES)[0].state == ka.NEVER


def test_a_missing_resource_flavor_makes_the_cluster_queue_inactive() -> None:
    objects = [o for o in one_team(2, job("j", 1)) if o.kind != "ResourceFlavor"]
    (v,) = _alone(objects, *NODES)
    assert v.reasons == ["ClusterQueue team-a is inactive: its ResourceFlavor gpu does not exist"]


def test_a_resource_the_cluster_queue_does_not_cover() -> None:
    objects = one_team(2, job("j", 1))
    objects[-1].body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["rdma/hca"] = 1
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "asks for rdma/hca, which ClusterQueue team-a does not cover" in v.reasons[0]
    objects[0] = manager_config(resources="resources:\n  excludeResourcePrefixes: [rdma/]\n")
    rdma_node = gpu_node("gpu-1", 1)
    rdma_node.extended["rdma/hca"] = 1.0
    assert _alone(objects, rdma_node)[0].state == ka.ADMITTED
    # Excluded from quota, still asked of the node: a node without the device keeps it Pending.
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "no rdma/hca on the node" in v.reasons[0]


def test_ephemeral_storage_and_hugepages_the_queue_does_not_cover_block_admission() -> None:
    """Kueue counts every resource name a pod asks for (pkg/resources NewRequestsFromPodSpec), and
    one no resource group covers is "unavailable in ClusterQueue" (flavorassigner.go): the job is
    never admitted, though the scheduler model would place its pods."""
    for resource, amount in (("ephemeral-storage", "10Gi"), ("hugepages-2Mi", "1Gi")):
        objects = one_team(2, job("j", 1))
        objects[-1].body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {resource: amount}
        (v,) = _alone(objects, *NODES)
        assert v.state == ka.NEVER, (resource, v)
        assert f'Kueue reports "resource {resource} unavailable in ClusterQueue"' in v.reasons[0]
        # Covered by the queue's resource group, it is admitted.
        objects[3] = cluster_queue("team-a", [("gpu", [quota(GPU, 2), quota(resource, "100Gi")])], covered=(GPU, resource))
        assert _alone(objects, *NODES)[0].state == ka.ADMITTED, resource
    # A zero request needs no cover (Kueue skips it, #8079).
    objects = one_team(2, job("j", 1))
    objects[-1].body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"ephemeral-storage": "0"}
    assert _alone(objects, *NODES)[0].state == ka.ADMITTED


def test_pytorchjob_needs_its_integration_and_counts_every_replica() -> None:
    objects = one_team(3, pytorch_job("pt", master_gpus=1, workers=3))
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "kubeflow.org/pytorchjob is not in the manager's integrations.frameworks" in v.reasons[0]
    objects[0] = manager_config(("batch/job", "kubeflow.org/pytorchjob"))
    (v,) = _alone(objects, *NODES)
    # Master (1 GPU) and 3 Workers: 4 GPUs against a quota of 3, counted across the pod sets.
    assert v.state == ka.NEVER and "nvidia.com/gpu asks 4, ClusterQueue team-a can use at most 3" in v.reasons[0]
    objects[3] = cluster_queue("team-a", [("gpu", [quota(GPU, 4)])])
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.ADMITTED and v.flavors == {"master": "gpu", "worker": "gpu"}


def test_a_queue_label_without_kueue_queues_nothing() -> None:
    objects = [o for o in one_team(2, job("j", 1)) if o.kind != "ConfigMap"]
    (v,) = _alone(objects, *NODES)
    assert v.state == ka.NEVER and "the plan installs no Kueue" in v.reasons[0]


def test_capacity_after_counts_what_long_running_pods_take() -> None:
    node = gpu_node("gpu-1", 2)
    server = job("server", 1).body | {"kind": "Deployment", "apiVersion": "apps/v1",
                                      "spec": {"replicas": 1, "template": job("s", 1).body["spec"]["template"]}}
    (w,) = workloads([obj(server)])
    p = place(w, [Capacity.of(node)], keep=False)
    left = ka.capacity_after([node], [p])
    assert left[0].free[GPU] == 1.0
