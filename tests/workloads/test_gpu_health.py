"""The GPU health service (workloads/gpuhealth) against the Kubernetes API stand-in
(tests/fake_k8s_api.py) on 127.0.0.1, one reconcile at a time with a controlled clock:

* the XID table covers alerts.py's FATAL_XIDS and the common application XIDs, unknown XIDs cordon;
* a fatal XID alert cordons, taints, annotates and evicts the GPU pods (only those) via policy/v1,
  with an Event and a metric for each;
* the breaker refuses the N+1th node (Event + metric, no change) under either limit, and takes it
  when room frees while the alert still fires;
* dry run changes nothing and reports the same decisions;
* a 429 eviction (PodDisruptionBudget) is retried on the next reconcile, never forced;
* return to service only after a passing, unexpired diagnostic newer than the action; the taint
  and annotations go, other taints and an administrator's cordon stay; the handled alert does not
  take the node out again; a resolved alert brings nothing back;
* a failing diagnostic drains; a weaker action escalates; a 409 conflict is retried;
(the HTTP side and the CLI: test_gpu_health_http.py.)
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.monitoring.alerts import FATAL_XIDS
from tests.conftest import PROJECT_DIR
from tests.fake_k8s_api import TOKEN, FakeKubeApi

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import service as svc  # noqa: E402
from gpuhealth.kube import KubeClient  # noqa: E402
from gpuhealth.service import GpuHealth, Settings, request_from_alert  # noqa: E402
from gpuhealth.xid import TABLE, UNKNOWN_ACTION, Action, action_for  # noqa: E402

T0 = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def alert(node: str, xid: int | None = 79, name: str = "GpuFatalXidError", status: str = "firing",
          starts: dt.datetime = T0, gpu: str = "0", **labels: str) -> dict[str, Any]:
    desc = f"GPU {gpu} on {node} reported XID {xid}; the GPU needs a reset." if xid is not None else "x"
    return {"status": status, "labels": {"alertname": name, "node": node, "gpu": gpu, "severity": "critical", **labels},
            "annotations": {"description": desc}, "startsAt": starts.isoformat().replace("+00:00", "Z"),
            "endsAt": "0001-01-01T00:00:00Z", "fingerprint": f"{node}{gpu}{name}"}


def webhook(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4", "status": "firing", "receiver": "gpu-health", "groupLabels": {}, "alerts": list(alerts)}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, KubeClient]]:
    fake = FakeKubeApi()
    for i in range(1, 5):
        fake.add_node(f"gpu-{i}")
    fake.add_node("cpu-1", gpus=0)
    fake.add_pod("team", "train-0", "gpu-1")
    fake.add_pod("team", "cpu-job", "gpu-1", gpus=0)
    fake.add_pod("gpu-operator", "dcgm-exporter-x", "gpu-1", daemonset=True)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with fake.serve() as url:
        yield fake, KubeClient(url, token, None, insecure_loopback=True)


def service(kube: KubeClient, clock: Clock, **kw: Any) -> GpuHealth:
    settings = Settings(**{"max_nodes_out": 1, "max_percent_out": 50.0, "reconcile_seconds": 1.0, **kw})
    return GpuHealth(kube, settings, clock=clock)


def metric(health: GpuHealth, name: str, **labels: str) -> float:
    value = health.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def diag(fake: FakeKubeApi, node: str, result: str, at: dt.datetime, valid_seconds: float = 3600) -> None:
    fake.annotate(node, {svc.DIAG: result, svc.DIAG_TIME: svc.fmt_time(at),
                         svc.DIAG_EXPIRES: svc.fmt_time(at + dt.timedelta(seconds=valid_seconds))})


# ------------------------------------------------------------------------------------------------
# the XID table and the alert -> request decision


def test_xid_table_covers_the_fatal_xids_and_application_faults() -> None:
    # the alert rules' fatal XIDs are exactly those the catalogue-bucketed table drains for
    assert set(FATAL_XIDS) == {x for x, e in TABLE.items() if e.action.drains}
    for xid in (8, 13, 31, 43, 45, 63, 92):  # application faults, and the catalogue's IGNORE bucket
        assert action_for(xid)[0] is Action.NONE, xid
    assert action_for(79)[0] is Action.REBOOT
    assert action_for(48)[0] is Action.RESET_GPU
    assert action_for(94)[0] is Action.CORDON
    assert action_for(9999) == (UNKNOWN_ACTION, action_for(9999)[1]) and UNKNOWN_ACTION is Action.CORDON
    # the action follows the catalogue's bucket, but for 94 (contained: cordoned until a reset)
    for e in TABLE.values():
        expected = {"IGNORE": Action.NONE, "RESTART_APP": Action.NONE, "RESTART_BM": Action.REBOOT}.get(
            e.bucket, Action.RESET_GPU)
        assert e.action is (Action.CORDON if e.xid == 94 else expected), e


def test_request_from_alert() -> None:
    req = request_from_alert(alert("gpu-1", 79), T0)
    assert req and (req.node, req.action, req.xid, req.gpu, req.since) == ("gpu-1", Action.REBOOT, 79, "0", T0)
    assert req.taint_value == "xid-79"
    # an `xid` label wins over the description
    labelled = alert("gpu-1", 79)
    labelled["labels"]["xid"] = "48"
    req = request_from_alert(labelled, T0)
    assert req and req.xid == 48 and req.action is Action.RESET_GPU
    assert request_from_alert(alert("gpu-1", 13, name="GpuXidError"), T0) is None  # application fault
    unreadable = request_from_alert(alert("gpu-1", None), T0)
    assert unreadable and unreadable.action is UNKNOWN_ACTION and unreadable.xid is None
    assert request_from_alert(alert("gpu-1", None, name="GpuTemperatureHigh"), T0) is None  # report only
    ecc = request_from_alert(alert("gpu-1", None, name="GpuUncorrectableMemoryError"), T0)
    assert ecc and ecc.action is Action.RESET_GPU and ecc.taint_value == "GpuUncorrectableMemoryError"
    opt_in = request_from_alert(alert("gpu-1", None, name="Custom", gpu_health_action="drain"), T0)
    assert opt_in and opt_in.action is Action.DRAIN
    assert request_from_alert(alert("", 79), T0) is None  # no node label
    # Alertmanager's nanosecond timestamps
    a = alert("gpu-1", 79)
    a["startsAt"] = "2026-11-23T12:00:00.123456789Z"
    req = request_from_alert(a, T0 + dt.timedelta(hours=1))
    assert req and req.since == T0 + dt.timedelta(microseconds=123456)


def test_breaker_limit_is_the_stricter_of_the_two() -> None:
    assert Settings(max_nodes_out=1, max_percent_out=50).limit(4) == 1
    assert Settings(max_nodes_out=5, max_percent_out=50).limit(4) == 2
    assert Settings(max_nodes_out=5, max_percent_out=10).limit(4) == 0
    assert Settings(max_nodes_out=5, max_percent_out=10).limit(100) == 5
    with pytest.raises(ValueError, match="max-percent-out"):
        Settings(max_percent_out=150)
    with pytest.raises(ValueError, match="max-nodes-out"):
        Settings(max_nodes_out=-1)


# ------------------------------------------------------------------------------------------------
# actions against the API stand-in


def test_fatal_xid_cordons_taints_annotates_and_evicts_gpu_pods(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    health = service(kube, clock)
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    node = fake.node("gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert [(t["key"], t["value"], t["effect"]) for t in node["spec"]["taints"]] == [
        (svc.TAINT_KEY, "xid-79", "NoSchedule")]
    ann = node["metadata"]["annotations"]
    assert ann[svc.ANN_ACTION] == "reboot" and ann[svc.ANN_XID] == "79" and ann[svc.ANN_TIME] == "2026-11-23T12:00:00Z"
    assert "GPU_HAS_FALLEN_OFF_THE_BUS" in ann[svc.ANN_REASON] and ann[svc.ANN_CORDONED] == "true"
    # the GPU pod only: not the CPU pod, not the DaemonSet's
    assert [c.path for c in fake.calls_of("POST", "/eviction")] == ["/api/v1/namespaces/team/pods/train-0/eviction"]
    assert fake.calls_of("POST", "/eviction")[0].body["apiVersion"] == "policy/v1"
    assert ("team", "train-0") not in fake.pods and ("team", "cpu-job") in fake.pods
    assert fake.event_reasons("gpu-1") == ["GpuHealthOutOfService", "GpuHealthEvicted"]
    event = fake.events[0]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "uid-gpu-1"}
    assert event["type"] == "Warning" and "reboot" in event["message"]
    assert metric(health, "gpu_health_actions_total", action="reboot", reason="GpuFatalXidError", result="done") == 1
    assert metric(health, "gpu_health_actions_total", action="evict", reason="GpuFatalXidError", result="done") == 1
    assert metric(health, "gpu_health_nodes_out_of_service") == 1
    assert metric(health, "gpu_health_alerts_received_total", alertname="GpuFatalXidError", status="firing") == 1
    # the repeat notification (same alert) changes nothing
    patches = len(fake.calls_of("PATCH"))
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    assert len(fake.calls_of("PATCH")) == patches
    assert not fake.calls_of("DELETE")


def test_breaker_refuses_the_next_node_and_takes_it_when_room_frees(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    health = service(kube, clock)  # limit min(1, 50% of 4) = 1
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    clock.advance(5)
    health.handle_webhook(webhook(alert("gpu-2", 48, starts=clock.now)))
    health.reconcile()
    health.reconcile()  # still refused, reported once
    assert not fake.calls_of("PATCH", "gpu-2")
    assert fake.event_reasons("gpu-2") == ["GpuHealthRefused"]
    assert "circuit breaker" in fake.events[-1]["message"]
    assert metric(health, "gpu_health_actions_total", action="reset-gpu", reason="GpuFatalXidError",
                  result="refused") == 1
    assert metric(health, "gpu_health_nodes_out_of_service") == 1
    assert metric(health, "gpu_health_nodes_out_of_service_limit") == 1
    # gpu-1 passes its diagnostic: it returns, and gpu-2 (still firing) goes out
    clock.advance(5)
    diag(fake, "gpu-1", "pass", clock.now)
    health.reconcile()
    health.reconcile()
    assert "unschedulable" not in fake.node("gpu-1")["spec"]
    assert fake.node("gpu-2")["spec"]["unschedulable"] is True
    assert metric(health, "gpu_health_nodes_out_of_service") == 1


def test_percent_limit_can_be_the_stricter(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    health = service(kube, Clock(), max_nodes_out=3, max_percent_out=10.0)  # 10% of 4 nodes: 0
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    assert not fake.calls_of("PATCH") and not fake.calls_of("POST", "/eviction")
    assert fake.event_reasons("gpu-1") == ["GpuHealthRefused"]


def test_dry_run_changes_nothing_and_reports(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    health = service(kube, clock, dry_run=True)
    health.handle_webhook(webhook(alert("gpu-1", 79), alert("gpu-2", 48)))
    health.reconcile()
    health.reconcile()
    assert not fake.calls_of("PATCH") and not fake.calls_of("POST", "/eviction") and not fake.calls_of("DELETE")
    assert fake.event_reasons("gpu-1") == ["GpuHealthDryRun"] and fake.event_reasons("gpu-2") == ["GpuHealthRefused"]
    assert fake.events[0]["message"].startswith("dry run: would be taking out of service: reboot")
    assert metric(health, "gpu_health_actions_total", action="reboot", reason="GpuFatalXidError", result="dry-run") == 1
    assert metric(health, "gpu_health_actions_total", action="reset-gpu", reason="GpuFatalXidError",
                  result="refused") == 1
    assert metric(health, "gpu_health_dry_run") == 1
    clock.advance(5)
    diag(fake, "gpu-1", "pass", clock.now)
    health.reconcile()
    assert metric(health, "gpu_health_actions_total", action="uncordon", reason=svc.DIAG, result="dry-run") == 1
    assert not fake.calls_of("PATCH")


def test_pdb_blocked_eviction_is_retried_not_forced(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    fake.add_pod("team", "train-1", "gpu-1", pdb_blocks=2)
    health = service(kube, Clock())
    health.handle_webhook(webhook(alert("gpu-1", 48)))
    health.reconcile()
    assert ("team", "train-1") in fake.pods
    health.reconcile()
    assert ("team", "train-1") in fake.pods
    health.reconcile()
    assert ("team", "train-1") not in fake.pods
    statuses = [c.status for c in fake.calls_of("POST", "train-1/eviction")]
    assert statuses == [429, 429, 201]
    assert not fake.calls_of("DELETE")
    assert fake.event_reasons("gpu-1").count("GpuHealthEvictionBlocked") == 1  # once, not every retry
    assert metric(health, "gpu_health_actions_total", action="evict", reason="GpuFatalXidError", result="blocked") == 2


def test_return_to_service_needs_a_fresh_passing_diagnostic(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    fake.nodes["gpu-1"]["spec"]["taints"] = [{"key": "other", "effect": "NoSchedule"}]
    health = service(kube, clock)
    diag(fake, "gpu-1", "pass", T0 - dt.timedelta(minutes=5))  # older than the action
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    clock.advance(10)
    health.reconcile()
    assert fake.node("gpu-1")["spec"]["unschedulable"] is True
    diag(fake, "gpu-1", "fail", clock.now)
    health.reconcile()
    assert fake.node("gpu-1")["spec"]["unschedulable"] is True
    diag(fake, "gpu-1", "pass", clock.now, valid_seconds=-1)  # already expired
    health.reconcile()
    assert fake.node("gpu-1")["spec"]["unschedulable"] is True
    diag(fake, "gpu-1", "pass", clock.now)
    health.reconcile()
    node = fake.node("gpu-1")
    assert "unschedulable" not in node["spec"]
    assert node["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}]
    ann = node["metadata"]["annotations"]
    assert not set(svc.OUR_ANNOTATIONS) & set(ann) and ann[svc.ANN_RESTORED] == svc.fmt_time(clock.now)
    assert fake.event_reasons("gpu-1")[-1] == "GpuHealthReturned"
    assert metric(health, "gpu_health_actions_total", action="uncordon", reason=svc.DIAG, result="done") == 1
    assert metric(health, "gpu_health_nodes_out_of_service") == 0
    # the same alert, still firing (DCGM keeps the last XID), does not take it out again; resolved neither
    patches = len(fake.calls_of("PATCH"))
    health.handle_webhook(webhook(alert("gpu-1", 79), alert("gpu-1", 79, status="resolved")))
    health.reconcile()
    assert len(fake.calls_of("PATCH")) == patches
    # a new fault after the return does
    clock.advance(60)
    health.handle_webhook(webhook(alert("gpu-1", 95, starts=clock.now)))
    health.reconcile()
    assert fake.node("gpu-1")["spec"]["unschedulable"] is True


def test_administrators_cordon_is_kept(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    fake.nodes["gpu-1"]["spec"]["unschedulable"] = True
    health = service(kube, clock)
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    assert fake.node("gpu-1")["metadata"]["annotations"][svc.ANN_CORDONED] == "false"
    clock.advance(10)
    diag(fake, "gpu-1", "pass", clock.now)
    health.reconcile()
    node = fake.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and "taints" not in node["spec"]


def test_resolved_alert_never_returns_a_node(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    health = service(kube, Clock())
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    health.handle_webhook(webhook(alert("gpu-1", 79, status="resolved")))
    health.reconcile()
    assert fake.node("gpu-1")["spec"]["unschedulable"] is True


def test_failing_diagnostic_drains_and_unknown_xid_escalates(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    health = service(kube, clock, max_nodes_out=2)
    diag(fake, "gpu-2", "fail", clock.now)
    health.handle_webhook(webhook(alert("gpu-1", 200)))  # unknown XID: cordon, no eviction
    health.reconcile()
    assert fake.node("gpu-2")["metadata"]["annotations"][svc.ANN_ACTION] == "drain"
    assert fake.node("gpu-1")["metadata"]["annotations"][svc.ANN_ACTION] == "cordon"
    assert fake.node("gpu-1")["spec"]["taints"][0]["value"] == "xid-200"
    assert not fake.calls_of("POST", "/eviction")
    clock.advance(5)
    health.handle_webhook(webhook(alert("gpu-1", 79, starts=clock.now)))
    health.reconcile()
    assert fake.node("gpu-1")["metadata"]["annotations"][svc.ANN_ACTION] == "reboot"
    assert fake.node("gpu-1")["metadata"]["annotations"][svc.ANN_CORDONED] == "true"  # kept from the first action
    assert fake.calls_of("POST", "train-0/eviction")


def test_conflict_is_retried(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    health = service(kube, Clock())
    original = kube.list_nodes

    def stale() -> list[dict[str, Any]]:
        nodes = original()
        fake.annotate("gpu-1", {"someone-else": "changed"})  # after the read: the patch's version is stale
        return nodes

    kube.list_nodes = stale  # type: ignore[method-assign]
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    assert [c.status for c in fake.calls_of("PATCH")] == [409]
    assert metric(health, "gpu_health_api_errors_total", call="patch-node") == 1
    kube.list_nodes = original  # type: ignore[method-assign]
    health.reconcile()
    node = fake.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["annotations"]["someone-else"] == "changed"


def test_non_gpu_node_is_left_alone(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    health = service(kube, Clock())
    health.handle_webhook(webhook(alert("cpu-1", 79), alert("nowhere", 79)))
    health.reconcile()
    assert not fake.calls_of("PATCH") and not fake.events


def test_dry_run_counts_nodes_already_out(api: tuple[FakeKubeApi, KubeClient]) -> None:
    """A node a previous (acting) run took out still counts against the breaker in dry run."""
    fake, kube = api
    fake.annotate("gpu-3", {svc.ANN_ACTION: "drain", svc.ANN_TIME: svc.fmt_time(T0)})
    health = service(kube, Clock(), dry_run=True)
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    health.reconcile()
    assert fake.event_reasons("gpu-1") == ["GpuHealthRefused"] and not fake.calls_of("PATCH")
    assert metric(health, "gpu_health_nodes_out_of_service") == 1


def test_refused_diagnostic_failure_is_dropped_once_it_passes(api: tuple[FakeKubeApi, KubeClient]) -> None:
    fake, kube = api
    clock = Clock()
    health = service(kube, clock)
    health.handle_webhook(webhook(alert("gpu-1", 79)))
    diag(fake, "gpu-2", "fail", clock.now)
    health.reconcile()
    assert fake.event_reasons("gpu-2") == ["GpuHealthRefused"]
    clock.advance(5)
    diag(fake, "gpu-2", "pass", clock.now)  # re-run passed while it waited
    diag(fake, "gpu-1", "pass", clock.now)  # room frees
    health.reconcile()
    health.reconcile()
    assert not fake.calls_of("PATCH", "gpu-2")


def test_a_drain_leaves_the_diagnostic_that_brings_the_node_back(api: tuple[FakeKubeApi, KubeClient]) -> None:
    """The diagnostic's pod asks for the node's GPUs and tolerates the service's taint: evicting it
    with the other GPU pods would keep the node out for good. A look-alike elsewhere is evicted."""
    fake, kube = api
    key, value = svc.DIAG_POD_LABEL
    for ns, name in (("gpu-health", "gpu-diag-gpu-1-29414820-x"), ("team", "impostor")):
        fake.put_pod({"metadata": {"name": name, "namespace": ns, "labels": {key: value}},
                      "spec": {"nodeName": "gpu-1", "containers": [{"name": "dcgm", "resources": {
                          "limits": {"nvidia.com/gpu": "8"}}}]},
                      "status": {"phase": "Running"}})
    health = service(kube, Clock())
    health.handle_webhook(webhook(alert("gpu-1", xid=79)))
    health.reconcile()
    evicted = {c.path.split("/")[-2] for c in fake.calls if c.path.endswith("/eviction")}
    assert evicted == {"train-0", "impostor"}
    assert ("gpu-health", "gpu-diag-gpu-1-29414820-x") in fake.pods
