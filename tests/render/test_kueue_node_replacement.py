"""kueue#9616 in the admission model (render/cluster/kueue_node_replacement.py): a job admitted with a
topology assignment, the GPU health service taints one of its hosts and evicts the pod there, the Job
recreates it. With the program's manager Configuration (components/queues/kueue.py) the pod is
re-placed on another host of the same rack, or the workload is requeued: never left pinned to the
tainted host. With the failed-node replacement gates and recoveryTimeout off, the model shows the
trap itself."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components.queues import kueue
from render.cluster import kueue_admission as ka
from render.cluster import kueue_node_replacement as nr
from render.cluster import kueue_objects
from render.cluster.objects import Obj
from tests.render.kueue_builders import (
    GPU,
    capacity,
    cluster_queue,
    flavor,
    gpu_node,
    job,
    local_queue,
    namespace,
    obj,
    quota,
    topology,
)

RACK, HOST = "gpu-cluster.io/rack", "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TAINTS = nr.GPU_UNHEALTHY_TAINTS


def _config(doc: dict[str, Any]) -> Obj:
    return obj({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {kueue_objects.MANAGER_CONFIG_KEY: yaml.safe_dump(doc)}})


def _programs_config(**changes: Any) -> dict[str, Any]:
    """The manager Configuration the program installs (10 minutes), with `changes` on top."""
    doc = kueue.manager_config(10, ["team-a"])
    for key, value in changes.items():
        doc[key] = {**doc[key], **value}
    return doc


def _world(config: dict[str, Any], *jobs: Obj) -> list[Obj]:
    return [_config(config), namespace("team-a"), topology("racks", RACK, HOST), flavor("gpu", topology="racks"),
            cluster_queue("team-a", [("gpu", [quota(GPU, 16)])]), local_queue("team-a", "team", "team-a"), *jobs]


def _rack(rack: str, *hosts: str) -> list:
    return [gpu_node(f"{rack}-{h}", 1, **{RACK: rack}) for h in hosts]


def _taint(objects: list[Obj], nodes: list, host: str) -> tuple[ka.Verdict, nr.Outcome]:
    world = kueue_objects.read(objects)
    cap = capacity(*nodes)
    verdicts = ka.admit_in_order(world, world.workloads, cap)
    recovery = nr.recovery_of(objects)
    assert recovery is not None
    train = verdicts[0]
    assert train.state == ka.ADMITTED and host in train.nodes["main"], train
    return train, nr.replace_pod(world, recovery, verdicts, cap, train, "main", host, TAINTS)


TRAIN = job("train", 2, annotations={REQUIRED: RACK})


def test_the_pod_of_a_tainted_host_is_replaced_on_another_host_of_its_rack() -> None:
    """Admitted on r1-a and r1-b; r1-b tainted, its pod replaced: placed on r1-c, r1's free host."""
    train, outcome = _taint(_world(_programs_config(), TRAIN), _rack("r1", "a", "b", "c"), "r1-b")
    assert sorted(train.nodes["main"]) == ["r1-a", "r1-b"], train
    assert outcome.state == nr.REPLACED and outcome.node == "r1-c", outcome


def test_with_no_room_in_the_rack_the_workload_is_requeued_not_moved_to_another_rack() -> None:
    """r1 has no free host (r2 does, but the job requires one rack): evicted and requeued at once
    (TASFailedNodeReplacementFailFast), never left pinned to r1-b."""
    nodes = [*_rack("r1", "a", "b"), *_rack("r2", "a", "b", "c")]
    train, outcome = _taint(_world(_programs_config(), TRAIN), nodes, "r1-b")
    assert sorted(train.nodes["main"]) == ["r1-a", "r1-b"], train
    assert outcome.state == nr.REQUEUED and outcome.after_s == 0.0, outcome
    assert "FailFast" in outcome.reason and f"{RACK}=r1" in outcome.reason, outcome


def test_a_host_taken_by_another_job_is_no_room() -> None:
    """r1-c runs another admitted job's pod: no room for the replacement in r1, requeued."""
    other = job("other", 1, annotations={REQUIRED: RACK})
    nodes = _rack("r1", "a", "b", "c")
    world = kueue_objects.read(_world(_programs_config(), TRAIN, other))
    verdicts = ka.admit_in_order(world, world.workloads, capacity(*nodes))
    assert [v.nodes["main"] for v in verdicts] == [["r1-a", "r1-b"], ["r1-c"]], verdicts
    recovery = nr.recovery_of(_world(_programs_config()))
    assert recovery is not None
    outcome = nr.replace_pod(world, recovery, verdicts, capacity(*nodes), verdicts[0], "main", "r1-b", TAINTS)
    assert outcome.state == nr.REQUEUED, outcome
    # The other job gone: r1-c takes the pod.
    alone = nr.replace_pod(world, recovery, verdicts[:1], capacity(*nodes), verdicts[0], "main", "r1-b", TAINTS)
    assert alone.state == nr.REPLACED and alone.node == "r1-c", alone


def test_without_fail_fast_recovery_timeout_requeues_it() -> None:
    config = _programs_config(featureGates={"TASFailedNodeReplacementFailFast": False})
    _, outcome = _taint(_world(config, TRAIN), _rack("r1", "a", "b"), "r1-b")
    assert outcome.state == nr.REQUEUED and outcome.after_s == 600.0 and "recoveryTimeout" in outcome.reason, outcome


def test_with_the_gates_off_and_no_recovery_timeout_the_pod_stays_pinned_kueue_9616() -> None:
    """The trap itself: the model is not built to always succeed."""
    config = _programs_config(featureGates={"TASFailedNodeReplacement": False},
                              waitForPodsReady={"recoveryTimeout": "0s"})
    _, outcome = _taint(_world(config, TRAIN), _rack("r1", "a", "b", "c"), "r1-b")
    assert outcome.state == nr.PINNED and outcome.node == "r1-b" and "kueue#9616" in outcome.reason, outcome
    # The gates off, recoveryTimeout on (the program's): requeued after it, even with r1-c free.
    gates_off = _programs_config(featureGates={"TASReplaceNodeOnNodeTaints": False})
    _, requeued = _taint(_world(gates_off, TRAIN), _rack("r1", "a", "b", "c"), "r1-b")
    assert requeued.state == nr.REQUEUED and requeued.after_s == 600.0, requeued


def test_pods_that_tolerate_the_taint_keep_their_host() -> None:
    tolerant = job("train", 2, annotations={REQUIRED: RACK},
                   tolerations=[{"key": GPU, "operator": "Exists"}, *({"key": t["key"], "operator": "Exists"} for t in TAINTS)])
    _, outcome = _taint(_world(_programs_config(), tolerant), _rack("r1", "a", "b", "c"), "r1-b")
    assert outcome.state == nr.REPLACED and outcome.node == "r1-b", outcome


def test_the_programs_configuration_replaces_tainted_nodes_and_recovers() -> None:
    recovery = nr.Recovery.from_config(kueue.manager_config(7, ["team-a"]))
    assert recovery.replaces_tainted_nodes and recovery.fail_fast, recovery
    assert recovery.recovery_timeout_s == 7 * 60.0, recovery
    # Kueue's defaults: recoveryTimeout is the timeout; "0s" turns it off.
    assert nr.Recovery.from_config({"waitForPodsReady": {"timeout": "3m"}}).recovery_timeout_s == 180.0
    assert nr.Recovery.from_config({"waitForPodsReady": {"timeout": "3m", "recoveryTimeout": "0s"}}).recovery_timeout_s == 0.0


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600.0), ("1h30m", 5400.0), ("0s", 0.0), ("90s", 90.0)])
def test_go_durations(text: str, seconds: float) -> None:
    assert nr.go_duration(text) == seconds


def test_a_bad_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        nr.go_duration("10 minutes")
