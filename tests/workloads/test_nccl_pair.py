"""The NCCL pair check's results (workloads/gpuhealth/ncclpair.py) and what the GPU health service
does with them, against the Kubernetes API stand-in on 127.0.0.1 with a controlled clock:

* the exit code -> verdict mapping follows the codes the sweep and torchrun really use;
* attribution: a node is named only when it fails with two different peers that each pass with
  another node; one failing pair, a whole-fabric failure, stale, expired, malformed and `error`
  results name nobody;
* a named node is cordoned and tainted without a drain; an unattributed failure is one Event and a
  metric and changes no node; the breaker and dry run hold as for every other reason;
* a node out for NCCL returns after a passing pair check newer than the action, and not after a
  passing DCGM diagnostic (which does not test the network);
* the service writes each finished check pod's verdict onto its node, once, never over a newer
  one, and nothing for a running or signalled pod or one that is not what the check renders.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.training import launch
from tests.conftest import PROJECT_DIR
from tests.fake_k8s_api import TOKEN, FakeKubeApi

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import ncclpair  # noqa: E402
from gpuhealth import service as svc  # noqa: E402
from gpuhealth.kube import KubeClient  # noqa: E402
from gpuhealth.service import GpuHealth, Settings  # noqa: E402
from trainer import nccl  # noqa: E402

T0 = dt.datetime(2026, 11, 23, 4, 47, 0, tzinfo=dt.UTC)
WINDOW = dt.timedelta(minutes=96)  # one run of three rounds (timeoutMinutes 30 + 2 each)


def result(check: str, peer: str, code: int, at: dt.datetime = T0, valid_hours: int = 48) -> dict[str, str]:
    marks = ncclpair.annotation(check, peer, code, at, valid_hours)
    assert marks is not None
    return marks


def ring(fake: FakeKubeApi, failing: set[str], at: dt.datetime = T0, nodes: tuple[str, ...] = ("gpu-1", "gpu-2", "gpu-3")) -> None:
    """Pair results of a ring over `nodes` as both pods would write them: a pair fails (code 10)
    when one of its nodes is in `failing`."""
    n = len(nodes)
    for i in range(n if n > 2 else 1):  # two nodes: one pair
        a, b = nodes[i], nodes[(i + 1) % n]
        check = f"nccl-pair-{i:08x}"
        code = nccl.EXIT_LOW_BUSBW if {a, b} & failing else 0
        fake.annotate(a, result(check, b, code, at))
        fake.annotate(b, result(check, a, code, at))


class Clock:
    def __init__(self) -> None:
        self.now = T0 + dt.timedelta(minutes=5)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, KubeClient, Path]]:
    fake = FakeKubeApi()
    for i in range(1, 5):
        fake.add_node(f"gpu-{i}")
    fake.add_pod("team", "train-0", "gpu-1")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with fake.serve() as url:
        yield fake, KubeClient(url, token, None, insecure_loopback=True), token


def service(kube: KubeClient, clock: Clock, **kw: Any) -> GpuHealth:
    return GpuHealth(kube, Settings(**{"max_nodes_out": 1, "max_percent_out": 50.0, **kw}), clock=clock)


def node(fake: FakeKubeApi, name: str) -> dict[str, Any]:
    with fake.lock:
        return json.loads(json.dumps(fake.nodes[name]))


def is_out(fake: FakeKubeApi, name: str) -> bool:
    """Out for NCCL: tainted with the service's key and the NCCL reason, and not cordoned (the pair
    check tolerates that taint value to test the node again; nothing else lands there)."""
    n = node(fake, name)
    tainted = {"key": svc.TAINT_KEY, "value": svc.NCCL_FAIL_REASON, "effect": "NoSchedule"} in (n["spec"].get("taints") or [])
    assert not (tainted and n["spec"].get("unschedulable")), n["spec"]
    return tainted


def metric(health: GpuHealth, name: str, **labels: str) -> float:
    return health.metrics.registry.get_sample_value(name, labels) or 0.0


# --- the verdict and attribution ------------------------------------------------------------------


def test_exit_codes_map_to_the_verdicts_the_sweep_gives() -> None:
    assert ncclpair.FAIL_CODES == {nccl.EXIT_LOW_BUSBW, nccl.EXIT_SOCKET_FALLBACK, nccl.EXIT_NO_TRANSPORT_INFO,
                                   nccl.EXIT_NO_RDMA_CHANNEL, nccl.EXIT_WRONG_RESULTS, nccl.EXIT_IB_COMPLETION_ERROR}
    assert ncclpair.FAIL_CODES == {launch.EXIT_LOW_BUSBW, launch.EXIT_SOCKET_FALLBACK, launch.EXIT_NO_TRANSPORT_INFO,
                                   launch.EXIT_NO_RDMA_CHANNEL, launch.EXIT_WRONG_RESULTS,
                                   launch.EXIT_IB_COMPLETION_ERROR}
    assert ncclpair.result_for(0) == "pass" and ncclpair.result_for(1) == "error"
    for no_verdict in (launch.EXIT_CONFIG_ERROR, 2, 137, 143):
        assert ncclpair.result_for(no_verdict) is None
        assert ncclpair.annotation("nccl-pair-x", "p", no_verdict, T0, 1) is None


def _results(pairs: dict[tuple[str, str], int], at: dt.datetime = T0) -> list[ncclpair.PairResult]:
    out = []
    for i, ((a, b), code) in enumerate(pairs.items()):
        for me, peer in ((a, b), (b, a)):
            (key, text), = result(f"nccl-pair-{i:08x}", peer, code, at).items()
            out += ncclpair.node_results(me, {key: text}, T0)
    return out


def test_one_bad_node_in_a_ring_is_named_and_nothing_else() -> None:
    named = ncclpair.suspects(_results({("a", "b"): 10, ("b", "c"): 11, ("c", "a"): 0}), WINDOW)
    assert set(named) == {"b"} and {r.peer for r in named["b"]} == {"a", "c"}


@pytest.mark.parametrize(("pairs", "why"), [
    ({("a", "b"): 10}, "one pair cannot tell which of its two nodes"),
    ({("a", "b"): 10, ("b", "c"): 10, ("c", "a"): 10}, "the whole fabric: no peer passes elsewhere"),
    ({("a", "b"): 1, ("b", "c"): 1, ("c", "a"): 0}, "errors (a preempted peer) are never evidence"),
    ({("a", "b"): 10, ("b", "c"): 0, ("c", "d"): 0, ("d", "a"): 0}, "b fails with one peer only"),
])
def test_failures_that_cannot_name_a_node_name_none(pairs: dict[tuple[str, str], int], why: str) -> None:
    assert ncclpair.suspects(_results(pairs), WINDOW) == {}, why


def test_evidence_comes_from_one_run_of_the_checks() -> None:
    """Ring a-b-c-d. Yesterday everything passed; today a-b and a-d fail (b and d are the bad ones)
    and b-c, c-d did not run. Yesterday's passes of b and d with c must not pin today's failures
    on a (the reviewer's case); today's run alone names nobody."""
    day = dt.timedelta(days=1)
    yesterday = _results({("a", "b"): 0, ("b", "c"): 0, ("c", "d"): 0, ("d", "a"): 0})
    today = [r for r in _results({("a", "b"): 10, ("d", "a"): 10}, T0 + day)]
    results = [r for r in yesterday if (r.node, r.peer) not in {(x.node, x.peer) for x in today}] + today
    assert ncclpair.suspects(results, WINDOW) == {}
    # in one run (all within the window) the same shape names a
    same_run = _results({("a", "b"): 10, ("b", "c"): 0, ("c", "d"): 0, ("d", "a"): 10})
    assert set(ncclpair.suspects(same_run, WINDOW)) == {"a"}
    # two failures a day apart are not one fault seen twice
    split = _results({("a", "b"): 10, ("b", "c"): 0}) + [
        r for r in _results({("a", "b"): 0, ("c", "a"): 10, ("b", "c"): 0}, T0 + day) if r.peer != "b" or r.node != "a"]
    assert "a" not in ncclpair.suspects(split, WINDOW)


def test_stale_expired_and_malformed_results_are_ignored() -> None:
    results = _results({("a", "b"): 10, ("b", "c"): 10, ("c", "a"): 0})
    assert ncclpair.suspects(results, WINDOW, {"b": T0 + dt.timedelta(seconds=1)}) == {}  # returned after them
    later = T0 + dt.timedelta(hours=49)  # past the 48 h expiry
    ann = {k: v for i in range(3) for k, v in result(f"nccl-pair-{i:08x}", "x", 10).items()}
    assert ncclpair.node_results("b", ann, later) == []
    bad = {"gpu-cluster.io/nccl-pair-1": "not json", "gpu-cluster.io/nccl-pair-2": json.dumps({"result": "fail"}),
           "gpu-cluster.io/nccl-pair-3": json.dumps([1]), "gpu-cluster.io/other": json.dumps({"result": "fail"})}
    assert ncclpair.node_results("b", bad, T0) == []


# --- the service ------------------------------------------------------------------------------------


def test_a_named_node_is_tainted_not_cordoned_nor_drained(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    ring(fake, failing={"gpu-1"})
    health = service(kube, Clock())
    health.reconcile()
    assert is_out(fake, "gpu-1") and not any(is_out(fake, n) for n in ("gpu-2", "gpu-3", "gpu-4"))
    ann = node(fake, "gpu-1")["metadata"]["annotations"]
    assert ann[svc.ANN_ACTION] == "cordon" and ann[svc.ANN_REASON].startswith(svc.NCCL_FAIL_REASON)
    assert "gpu-2" in ann[svc.ANN_REASON] and "gpu-3" in ann[svc.ANN_REASON]
    assert ("team", "train-0") in fake.pods  # running jobs are not evicted for a slow link
    assert not [c for c in fake.calls if c.path.endswith("/eviction")]
    assert metric(health, "gpu_health_actions_total", action="cordon", reason=svc.NCCL_FAIL_REASON, result="done") == 1
    assert [e for e in fake.events if e["reason"] == "GpuHealthOutOfService" and e["involvedObject"]["name"] == "gpu-1"]


def test_one_failing_pair_is_reported_once_and_changes_nothing(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    ring(fake, failing={"gpu-1"}, nodes=("gpu-1", "gpu-2"))
    health = service(kube, Clock())
    for _ in range(3):
        health.reconcile()
    assert not any(is_out(fake, n) for n in fake.nodes)
    assert not [c for c in fake.calls if c.method == "PATCH"]
    reported = [e for e in fake.events if e["reason"] == "GpuHealthNcclPairFailed"]
    assert sorted(e["involvedObject"]["name"] for e in reported) == ["gpu-1", "gpu-2"]  # once per node
    assert "cannot name the faulty node" in reported[0]["message"]
    assert metric(health, "gpu_health_actions_total", action="none", reason=svc.NCCL_FAIL_REASON,
                  result="unattributed") == 2


def test_the_breaker_and_dry_run_hold_for_pair_failures(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    # gpu-2 already out (an XID): the breaker (1 node) refuses gpu-1
    fake.annotate("gpu-2", {svc.ANN_ACTION: "reboot", svc.ANN_TIME: svc.fmt_time(T0)})
    ring(fake, failing={"gpu-1"}, nodes=("gpu-1", "gpu-3", "gpu-4"))
    health = service(kube, Clock())
    health.reconcile()
    assert not is_out(fake, "gpu-1")
    assert metric(health, "gpu_health_actions_total", action="cordon", reason=svc.NCCL_FAIL_REASON, result="refused") == 1
    fake.annotate("gpu-2", {svc.ANN_ACTION: None, svc.ANN_TIME: None})
    dry = service(kube, Clock(), dry_run=True)
    dry.reconcile()
    assert not is_out(fake, "gpu-1")
    assert metric(dry, "gpu_health_actions_total", action="cordon", reason=svc.NCCL_FAIL_REASON, result="dry-run") == 1


def test_it_returns_after_a_passing_pair_check_not_after_a_diagnostic(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    ring(fake, failing={"gpu-1"})
    clock = Clock()
    health = service(kube, clock)
    health.reconcile()
    assert is_out(fake, "gpu-1")
    clock.advance(3600)
    # a passing DCGM diagnostic tests the GPUs, not the link: not enough
    fake.annotate("gpu-1", {svc.DIAG: "pass", svc.DIAG_TIME: svc.fmt_time(clock.now),
                            svc.DIAG_EXPIRES: svc.fmt_time(clock.now + dt.timedelta(hours=48))})
    health.reconcile()
    assert is_out(fake, "gpu-1")
    # the link repaired: the next round passes with gpu-2 (the other pair still holds the old failure)
    fake.annotate("gpu-1", result("nccl-pair-00000000", "gpu-2", 0, clock.now))
    fake.annotate("gpu-2", result("nccl-pair-00000000", "gpu-1", 0, clock.now))
    clock.advance(60)
    health.reconcile()
    assert not is_out(fake, "gpu-1")
    ann = node(fake, "gpu-1")["metadata"]["annotations"]
    assert svc.ANN_ACTION not in ann and svc.ANN_RESTORED in ann
    # its older failure with gpu-3 predates the return: it does not take the node out again
    clock.advance(60)
    health.reconcile()
    assert not is_out(fake, "gpu-1")
    back = [e for e in fake.events if e["reason"] == "GpuHealthReturned"]
    assert len(back) == 1 and "NCCL pair check nccl-pair-00000000 with gpu-2 passed" in back[0]["message"]


def check_pod(name: str, node_name: str, code: int | None, finished: dt.datetime = T0,
              nodes: str = "gpu-1,gpu-2", running: bool = False, namespace: str = "training") -> dict[str, Any]:
    """A pair-check pod as the Job controller and kubelet leave it (labels and annotations as the
    component renders them: tests/components/health/test_nccl_pairs.py holds those equal)."""
    check = ncclpair.check_name(nodes.split(","))
    state = ({"running": {"startedAt": svc.fmt_time(finished)}} if running else
             {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                             "startedAt": svc.fmt_time(finished - dt.timedelta(minutes=2)),
                             "finishedAt": svc.fmt_time(finished)}})
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": dict([ncclpair.POD_LABEL]),
                     "annotations": {ncclpair.POD_CHECK: check, ncclpair.POD_NODES: nodes,
                                     ncclpair.POD_VALID_HOURS: "48"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{check}-29414820",
                                          "uid": "u", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node_name, "containers": [{"name": ncclpair.CONTAINER}]},
        "status": {"phase": "Running" if running else ("Succeeded" if code == 0 else "Failed"),
                   "containerStatuses": [{"name": ncclpair.CONTAINER, "state": state}]},
    }


def test_the_service_records_finished_pods_on_their_nodes(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    fake.put_pod(check_pod("p-0", "gpu-1", nccl.EXIT_SOCKET_FALLBACK))
    fake.put_pod(check_pod("p-1", "gpu-2", nccl.EXIT_SOCKET_FALLBACK))
    fake.put_pod(check_pod("q-0", "gpu-3", None, running=True, nodes="gpu-3,gpu-4"))
    fake.put_pod(check_pod("q-1", "gpu-4", 143, nodes="gpu-3,gpu-4"))  # signalled: exits 143, no verdict
    # the same pod in another namespace: never read (only the check's own namespace is)
    fake.put_pod(check_pod("forged-0", "gpu-3", 10, nodes="gpu-3,gpu-4", namespace="team"))
    health = service(kube, Clock(), dry_run=True)  # results are written in dry run too: observations
    health.reconcile()
    key = "gpu-cluster.io/" + ncclpair.check_name(["gpu-1", "gpu-2"])
    for me, peer in (("gpu-1", "gpu-2"), ("gpu-2", "gpu-1")):
        value = json.loads(node(fake, me)["metadata"]["annotations"][key])
        assert value == {"result": "fail", "peer": peer, "code": 11, "time": svc.fmt_time(T0),
                         "expires": svc.fmt_time(T0 + dt.timedelta(hours=48))}
    for quiet in ("gpu-3", "gpu-4"):  # running, or no verdict: nothing
        assert not any(k.startswith("gpu-cluster.io/nccl-pair") for k in node(fake, quiet)["metadata"]["annotations"])
    patches = [c for c in fake.calls if c.method == "PATCH"]
    assert len(patches) == 2 and all(set(c.body) == {"metadata"} for c in patches)  # annotations only
    health.reconcile()  # once per pod
    assert len([c for c in fake.calls if c.method == "PATCH"]) == 2
    # an older pod of the same check (kept by the Job history) does not overwrite a newer result
    fake.put_pod(check_pod("old-0", "gpu-1", 0, finished=T0 - dt.timedelta(days=1)))
    health.reconcile()
    assert json.loads(node(fake, "gpu-1")["metadata"]["annotations"][key])["code"] == 11
    # a later run that crashed (exit 1: an error) never hides the last measured verdict
    fake.put_pod(check_pod("crash-0", "gpu-1", 1, finished=T0 + dt.timedelta(days=1)))
    health.reconcile()
    assert json.loads(node(fake, "gpu-1")["metadata"]["annotations"][key])["result"] == "fail"
    # ... but is written where there is none
    fake.put_pod(check_pod("crash-3", "gpu-3", 1, nodes="gpu-3,gpu-4", finished=T0 + dt.timedelta(days=1)))
    health.reconcile()
    key34 = "gpu-cluster.io/" + ncclpair.check_name(["gpu-3", "gpu-4"])
    assert json.loads(node(fake, "gpu-3")["metadata"]["annotations"][key34])["result"] == "error"


def _forged(change: str) -> dict[str, Any]:
    pod = check_pod("p-0", "gpu-1", 10)
    meta = pod["metadata"]
    if change == "no annotations":
        meta["annotations"] = {}
    elif change == "a check name that is not its pair's":
        meta["annotations"][ncclpair.POD_CHECK] = "nccl-pair-00000000"
    elif change == "not on one of its nodes":
        pod["spec"]["nodeName"] = "gpu-3"
    elif change == "bad validity":
        meta["annotations"][ncclpair.POD_VALID_HOURS] = "x"
    elif change == "no owner (a bare pod with the labels)":
        del meta["ownerReferences"]
    elif change == "owned by another Job":
        meta["ownerReferences"][0]["name"] = "train-29414820"
    elif change == "owned by something else":
        meta["ownerReferences"][0]["kind"] = "ReplicaSet"
    return pod


@pytest.mark.parametrize("change", ["no annotations", "a check name that is not its pair's", "not on one of its nodes",
                                    "bad validity", "no owner (a bare pod with the labels)", "owned by another Job",
                                    "owned by something else"])
def test_a_pod_that_is_not_what_the_check_renders_gives_no_verdict(change: str) -> None:
    assert ncclpair.pod_verdict(_forged(change)) is None
    assert ncclpair.pod_verdict(check_pod("p-0", "gpu-1", 10)) is not None


def test_results_with_a_node_that_is_gone_are_not_evidence(api: tuple[FakeKubeApi, KubeClient, Path]) -> None:
    fake, kube, _ = api
    # gpu-1 fails with gpu-2 and with gpu-9 (deleted since); gpu-9's "pass elsewhere" is gone with it
    fake.annotate("gpu-1", {**result("nccl-pair-00000000", "gpu-2", 10), **result("nccl-pair-00000001", "gpu-9", 10)})
    fake.annotate("gpu-2", {**result("nccl-pair-00000000", "gpu-1", 10), **result("nccl-pair-00000002", "gpu-3", 0)})
    service(kube, Clock()).reconcile()
    assert not is_out(fake, "gpu-1")
