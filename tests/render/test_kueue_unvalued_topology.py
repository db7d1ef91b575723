"""Kueue's admission model (render/cluster/kueue_admission.py) on nodes that carry Google's topology
labels with values no offline check knows (render/cluster/nodes.py: A4 / A3 Ultra pools of a
reservation), and the node model that gives them those labels and no value."""

from __future__ import annotations

from dataclasses import replace

from render.cluster import kueue_admission as ka
from render.cluster import kueue_objects
from render.cluster.nodes import GOOGLE_TOPOLOGY_LABELS, gke_nodes
from render.cluster.scheduling import expand
from tests.render.kueue_builders import capacity, gpu_node, job
from tests.render.test_kueue_topology_model import GKE_LEVELS, REQUIRED, _tas_world

SUBBLOCK = GKE_LEVELS[1]


def _unvalued(name: str, gpus: int):
    return replace(gpu_node(name, gpus), unvalued=GOOGLE_TOPOLOGY_LABELS)


def _alone(objects: list, *nodes) -> list[ka.Verdict]:
    return ka.each_alone(kueue_objects.read(objects), capacity(*nodes))


def test_a_required_level_on_unvalued_labels_is_judged_on_per_node_fit() -> None:
    nodes = [_unvalued("h200-1", 8), _unvalued("h200-2", 8)]
    (v,) = _alone(_tas_world(GKE_LEVELS, job("train", 2, gpus=8, annotations={REQUIRED: SUBBLOCK}), nominal=16), *nodes)
    assert v.state == ka.ADMITTED and sorted(v.nodes["main"]) == ["h200-1", "h200-2"], v
    # Three eight-GPU pods on two nodes: no placement, whatever Google's sub-blocks are.
    (never,) = _alone(_tas_world(GKE_LEVELS, job("wide", 3, gpus=8, annotations={REQUIRED: SUBBLOCK}), nominal=24),
                      *nodes)
    assert never.state == ka.NEVER and f"its nodes hold only 2 of 3 pods, whatever {SUBBLOCK} Google gives them" \
        in never.reasons[0], never


def test_nodes_without_the_labels_stay_out_beside_unvalued_ones() -> None:
    (v,) = _alone(_tas_world(GKE_LEVELS, job("train", 2, gpus=8, annotations={REQUIRED: SUBBLOCK}), nominal=16),
                  _unvalued("h200-1", 8), gpu_node("bare-1", 8), gpu_node("bare-2", 8))
    assert v.state == ka.NEVER, v  # one labelled node cannot hold two pods; the bare ones are out
    assert "1 of 2" in v.reasons[0], v.reasons


def _pool(machine: str, reservation: bool) -> dict:
    affinity = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
                "values": ["r"]} if reservation else {"consumeReservationType": "NO_RESERVATION"}
    return {"name": "p", "nodeLocations": ["us-central1-a"], "autoscaling": {"minNodeCount": 0, "maxNodeCount": 2},
            "nodeConfig": {"machineType": machine, "reservationAffinity": affinity,
                           "guestAccelerators": [{"type": "nvidia-h200-141gb", "count": 8}]}}


def test_only_a4_and_a3_ultra_reservation_pools_get_the_labels_and_never_a_value() -> None:
    (labelled,) = gke_nodes([_pool("a3-ultragpu-8g", True)])
    assert labelled.unvalued == GOOGLE_TOPOLOGY_LABELS
    assert not set(GOOGLE_TOPOLOGY_LABELS) & set(labelled.labels)
    assert all(n.unvalued == GOOGLE_TOPOLOGY_LABELS for n in expand([labelled]))  # each node of the pool
    assert gke_nodes([_pool("a3-ultragpu-8g", False)])[0].unvalued == ()
    assert gke_nodes([_pool("a3-highgpu-8g", True)])[0].unvalued == ()
