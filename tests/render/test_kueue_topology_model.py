"""Kueue's admission model (render/cluster/kueue_admission.py) with blocks over racks, nodes that lack
the Topology's labels (GKE's, on capacity Google does not label), and one flavor per GPU model tried
in the ClusterQueue's order."""

from __future__ import annotations

from render.cluster import kueue_admission as ka
from render.cluster import kueue_objects
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
    quota,
    topology,
)

BLOCK, RACK, HOST = "gpu-cluster.io/block", "gpu-cluster.io/rack", "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GKE_LEVELS = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
              "cloud.google.com/gce-topology-host", HOST)
MODEL = "gpu-cluster.io/gpu-model"


def _tas_world(levels: tuple[str, ...], *jobs, nominal: int = 8) -> list:
    return [manager_config(), namespace("team-a"), topology("topo", *levels), flavor("gpu", topology="topo"),
            cluster_queue("team-a", [("gpu", [quota(GPU, nominal)])]), local_queue("team-a", "team", "team-a"), *jobs]


def _alone(objects: list, *nodes) -> list[ka.Verdict]:
    return ka.each_alone(kueue_objects.read(objects), capacity(*nodes))


def _in_order(objects: list, *nodes) -> list[ka.Verdict]:
    world = kueue_objects.read(objects)
    return ka.admit_in_order(world, world.workloads, capacity(*nodes))


# Two blocks: b1 holds racks r1 (2 nodes) and r2 (1 node); b2 holds r3 (1 node). One GPU each.
BLOCKS = [gpu_node("n1", 1, **{BLOCK: "b1", RACK: "r1"}), gpu_node("n2", 1, **{BLOCK: "b1", RACK: "r1"}),
          gpu_node("n3", 1, **{BLOCK: "b1", RACK: "r2"}), gpu_node("n4", 1, **{BLOCK: "b2", RACK: "r3"})]


def test_a_job_requiring_one_block_that_fits_in_no_block_is_never_admitted() -> None:
    (v,) = _alone(_tas_world((BLOCK, RACK, HOST), job("wide", 4, annotations={REQUIRED: BLOCK})), *BLOCKS)
    assert v.state == ka.NEVER, v
    assert f"no {BLOCK} domain holds all 4 pods" in v.reasons[0] and "b1: 3 of 4" in v.reasons[0], v.reasons


def test_a_job_requiring_one_block_spans_its_racks() -> None:
    (v,) = _alone(_tas_world((BLOCK, RACK, HOST), job("three", 3, annotations={REQUIRED: BLOCK})), *BLOCKS)
    assert v.state == ka.ADMITTED and sorted(v.nodes["main"]) == ["n1", "n2", "n3"], v
    # The same three pods in one rack: no rack holds them.
    (rack,) = _alone(_tas_world((BLOCK, RACK, HOST), job("three", 3, annotations={REQUIRED: RACK})), *BLOCKS)
    assert rack.state == ka.NEVER and f"no {RACK} domain" in rack.reasons[0], rack


def test_a_second_block_job_waits_for_the_first_block() -> None:
    first, second = _in_order(_tas_world((BLOCK, RACK, HOST), job("first", 3, annotations={REQUIRED: BLOCK}),
                                         job("second", 2, annotations={REQUIRED: BLOCK})), *BLOCKS)
    assert first.state == ka.ADMITTED and second.state == ka.WAITING, (first, second)


def test_nodes_without_the_topology_labels_admit_nothing_and_the_reason_names_the_level() -> None:
    """GKE writes cloud.google.com/gce-topology-* on some capacity only: on nodes without them a TAS
    flavor has no node at all (Kueue leaves them out), so a job requiring a level never runs."""
    bare = [gpu_node("gke-1", 1), gpu_node("gke-2", 1)]
    (v,) = _alone(_tas_world(GKE_LEVELS, job("train", 2, annotations={REQUIRED: GKE_LEVELS[1]})), *bare)
    assert v.state == ka.NEVER, v
    assert GKE_LEVELS[0] in v.reasons[0] and f"requires one {GKE_LEVELS[1]} domain" in v.reasons[0], v.reasons
    # Without a required level either: the flavor still has no node.
    (plain,) = _alone(_tas_world(GKE_LEVELS, job("train", 2)), *bare)
    assert plain.state == ka.NEVER and "Kueue leaves such a node out" in plain.reasons[0], plain
    # Labelled nodes (a reservation's dense capacity): admitted in one sub-block.
    labelled = [gpu_node(f"gke-{i}", 1, **dict(zip(GKE_LEVELS[:3], ("blk", "sub-1", f"host-{i}"), strict=True)))
                for i in (1, 2)]
    (ok,) = _alone(_tas_world(GKE_LEVELS, job("train", 2, annotations={REQUIRED: GKE_LEVELS[1]})), *labelled)
    assert ok.state == ka.ADMITTED, ok


def _two_models(*jobs) -> list:
    """Flavors a100 then h100 (the ClusterQueue's order), 2 GPUs of quota each."""
    return [manager_config(), namespace("team-a"), flavor("a100", {MODEL: "NVIDIA-A100-SXM4-80GB"}),
            flavor("h100", {MODEL: "NVIDIA-H100-80GB-HBM3"}),
            cluster_queue("team-a", [("a100", [quota(GPU, 2)]), ("h100", [quota(GPU, 2)])]),
            local_queue("team-a", "team", "team-a"), *jobs]


MODELS = [gpu_node("a-1", 1, **{MODEL: "NVIDIA-A100-SXM4-80GB"}), gpu_node("a-2", 1, **{MODEL: "NVIDIA-A100-SXM4-80GB"}),
          gpu_node("h-1", 1, **{MODEL: "NVIDIA-H100-80GB-HBM3"}), gpu_node("h-2", 1, **{MODEL: "NVIDIA-H100-80GB-HBM3"})]


def test_a_two_node_job_goes_to_the_h100_flavor_when_the_a100_flavor_is_full() -> None:
    first, second, third = _in_order(_two_models(job("first", 2), job("second", 2), job("third", 2)), *MODELS)
    assert first.flavors == {"main": "a100"} and sorted(first.nodes["main"]) == ["a-1", "a-2"], first
    assert second.state == ka.ADMITTED and second.flavors == {"main": "h100"}, second
    assert sorted(second.nodes["main"]) == ["h-1", "h-2"], second
    assert third.state == ka.WAITING, third  # both flavors' quota taken


def test_a_job_selecting_a_model_skips_the_other_flavor() -> None:
    pinned = job("pinned", 1, nodeSelector={MODEL: "NVIDIA-H100-80GB-HBM3"})
    (v,) = _alone(_two_models(pinned), *MODELS)
    assert v.state == ka.ADMITTED and v.flavors == {"main": "h100"}, v
