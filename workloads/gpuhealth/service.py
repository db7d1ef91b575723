"""The GPU health service: acts on Alertmanager notifications and diagnostic results.

    python -m gpuhealth [--dry-run] [--max-nodes-out 1] [--max-percent-out 10] [--port 9880] ...

HTTP (one port): POST /webhook (also /) takes Alertmanager's webhook JSON (version 4); GET /metrics
the Prometheus metrics; GET /healthz 200 while the reconcile loop runs.

What it does, per node (the node is the alert's `node` label, as the DCGM ServiceMonitors set it):
  * takes a node out of service for a firing alert that maps to an action (ALERT_ACTIONS; the XID
    alerts through gpuhealth/xid.py, the XID read from an `xid` label or else from the alert's
    description, "... reported XID 79 ...") or for a failing, unexpired level-1 diagnostic:
    cordon (spec.unschedulable), taint TAINT_KEY=<short reason>:NoSchedule, and record it in the
    node's annotations (ANN_*). Actions that drain then evict the node's GPU pods (pods requesting
    --gpu-resource, DaemonSet pods excepted) through the policy/v1 Eviction API: a 429 (a
    PodDisruptionBudget forbids it now) is retried every reconcile, never forced by a delete;
  * brings it back only after a passing level-1 diagnostic that is newer than the action and not
    expired (the DIAG_* annotations, written by the diagnostic job): uncordons (only if this
    service cordoned it), removes its taint and its ANN_* annotations, and records ANN_RESTORED.
    A firing alert that started before ANN_RESTORED does not take the node out again (DCGM keeps
    the last XID; a still-firing, already-handled alert is not a new fault);
  * the circuit breaker: at most min(--max-nodes-out, floor(--max-percent-out% of the GPU nodes))
    nodes out of service by this service at once. A node beyond that is refused: an Event and a
    metric (result="refused"), nothing changed; its request stays pending and is taken when room
    frees while the alert still fires;
  * the NCCL pair checks (gpuhealth/ncclpair.py): writes each finished check pod's verdict onto
    its node (annotation gpu-cluster.io/nccl-pair-<hex>); a node
    whose checks fail with two different peers, each passing with another node, is cordoned
    (reason NcclPairFailed, no drain) and returns after a passing pair check newer than that; a
    failure that names no node (one pair, or every pair failing) is an Event and a metric
    (result="unattributed") only;
  * --dry-run: the same decisions, breaker included, reported as Events (message "dry run: would
    ..."), metrics (result="dry-run") and log lines; no node or pod is changed.
A resolved alert never brings a node back (only a diagnostic does) and never acts.

Annotations (on the Node; DIAG_* are written by the diagnostic, the others by this service):
  gpu-cluster.io/diag-level1           pass | fail   result of the last DCGM level-1 diagnostic
  gpu-cluster.io/diag-level1-time      RFC 3339 UTC  when it finished
  gpu-cluster.io/diag-level1-expires   RFC 3339 UTC  after this the result counts as absent
  gpu-cluster.io/gpu-health-action     cordon | drain | reset-gpu | reboot  (present: out of service by this service)
  gpu-cluster.io/gpu-health-reason     alert name or check, XID, GPU and the catalogue's explanation
  gpu-cluster.io/gpu-health-xid        the XID, when an XID caused it
  gpu-cluster.io/gpu-health-time       RFC 3339 UTC  when it was taken out
  gpu-cluster.io/gpu-health-cordoned   "true" if this service set spec.unschedulable (else it was already)
  gpu-cluster.io/gpu-health-restored-time  RFC 3339 UTC  when this service last returned it
Taint: gpu-cluster.io/gpu-unhealthy=<xid-NN | alert name>:NoSchedule.

Metrics: gpu_health_actions_total{action,reason,result} (action cordon|drain|reset-gpu|reboot|
evict|uncordon|none; result done|dry-run|refused|blocked|error|unattributed), gpu_health_nodes_out_of_service,
gpu_health_nodes_out_of_service_limit, gpu_health_gpu_nodes, gpu_health_alerts_received_total
{alertname,status}, gpu_health_api_errors_total{call}, gpu_health_dry_run,
gpu_health_last_reconcile_timestamp_seconds.

  gpu-cluster.io/nccl-pair-<hex>       JSON: result, peer, code, time, expires (the NCCL pair check)
Does not: reset GPUs or reboot nodes (RESET_GPU / REBOOT are recommendations in the annotation and
Event), delete pods, run diagnostics or checks (CronJobs do), or touch nodes without GPUs.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpuhealth import ncclpair
from gpuhealth.kube import ApiError, KubeClient
from gpuhealth.xid import Action, action_for

log = logging.getLogger("gpuhealth")

PREFIX = "gpu-cluster.io/"
TAINT_KEY = PREFIX + "gpu-unhealthy"
ANN_ACTION = PREFIX + "gpu-health-action"
ANN_REASON = PREFIX + "gpu-health-reason"
ANN_XID = PREFIX + "gpu-health-xid"
ANN_TIME = PREFIX + "gpu-health-time"
ANN_CORDONED = PREFIX + "gpu-health-cordoned"
ANN_RESTORED = PREFIX + "gpu-health-restored-time"
DIAG = PREFIX + "diag-level1"
DIAG_TIME = DIAG + "-time"
DIAG_EXPIRES = DIAG + "-expires"
OUR_ANNOTATIONS = (ANN_ACTION, ANN_REASON, ANN_XID, ANN_TIME, ANN_CORDONED)

XID_ALERTS = ("GpuFatalXidError", "GpuXidError")
# Alerts of components/monitoring/alerts.py that act without an XID; the rest only count.
ALERT_ACTIONS = {
    "GpuUncorrectableMemoryError": Action.RESET_GPU,
    "GpuEccDoubleBitError": Action.RESET_GPU,
    "GpuRowRemapFailure": Action.DRAIN,
    "GpuNodeAllocatableBelowCapacity": Action.CORDON,
}
# A rule may name its action itself with this label (cordon, drain, reset-gpu, reboot).
ACTION_LABEL = "gpu_health_action"
DIAG_FAIL_REASON = "DiagLevel1Failed"
NCCL_FAIL_REASON = "NcclPairFailed"
NCCL_CHECK_BASIS = PREFIX + "nccl-pair"  # the `reason` of a return counted after a passing pair check
# The diagnostic's pods (components/gpu_health.py DIAG_LABELS; a test keeps them equal). They ask
# for the GPUs of a node this service took out, to bring it back: a drain must not evict them.
DIAG_POD_LABEL = ("app.kubernetes.io/name", "gpu-diag")
_XID_IN_TEXT = re.compile(r"\bXID\s+([0-9]+)", re.IGNORECASE)
_TAINT_VALUE = re.compile(r"[^A-Za-z0-9._-]")


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def fmt_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> dt.datetime | None:
    """RFC 3339 (Alertmanager's nanoseconds included); None when absent or unparsable."""
    if not text:
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text.strip())
    if not m:
        return None
    frac = (m.group(2) or "")[:7]  # microseconds at most
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return dt.datetime.fromisoformat(m.group(1) + frac + zone)
    except ValueError:
        return None


@dataclass
class Settings:
    max_nodes_out: int = 1
    max_percent_out: float = 10.0
    dry_run: bool = False
    gpu_resource: str = "nvidia.com/gpu"
    event_namespace: str = "default"
    reconcile_seconds: float = 30.0
    # The NCCL pair check: the namespace of its pods, and how long one run of all its rounds takes
    # (results further apart are not evidence of the same fault).
    pair_namespace: str = "training"
    pair_window_minutes: float = 96.0
    # The namespace of the diagnostic's pods (components/gpu_health.py): a drain leaves them be.
    diag_namespace: str = "gpu-health"

    def __post_init__(self) -> None:
        if self.max_nodes_out < 0:
            raise ValueError("--max-nodes-out must be >= 0")
        if not 0 <= self.max_percent_out <= 100:
            raise ValueError("--max-percent-out must be within 0..100")
        if self.reconcile_seconds <= 0:
            raise ValueError("--reconcile-seconds must be > 0")
        if self.pair_window_minutes <= 0:
            raise ValueError("--pair-window-minutes must be > 0")

    def limit(self, gpu_nodes: int) -> int:
        """Nodes this service may hold out of service at once: the stricter of the two limits."""
        return min(self.max_nodes_out, math.floor(gpu_nodes * self.max_percent_out / 100))


@dataclass(order=True)
class Request:
    """Take `node` out of service with `action` for `reason` (an alert name or a check)."""

    since: dt.datetime
    node: str
    reason: str
    action: Action = field(compare=False)
    xid: int | None = field(default=None, compare=False)
    gpu: str = field(default="", compare=False)
    detail: str = field(default="", compare=False)
    refused: bool = field(default=False, compare=False)

    @property
    def taint_value(self) -> str:
        value = f"xid-{self.xid}" if self.xid else self.reason
        return _TAINT_VALUE.sub("-", value)[:63].strip("-._") or "unhealthy"


def request_from_alert(alert: dict[str, Any], received: dt.datetime) -> Request | None:
    """The action an alert (webhook v4 `alerts[]` item) asks for, or None."""
    labels = alert.get("labels") or {}
    node, name = labels.get("node", ""), labels.get("alertname", "")
    if not node or not name:
        return None
    since = parse_time(alert.get("startsAt")) or received
    xid: int | None = None
    if name in XID_ALERTS:
        text = labels.get("xid") or ""
        if not text.strip().isdigit():
            found = _XID_IN_TEXT.search((alert.get("annotations") or {}).get("description", ""))
            text = found.group(1) if found else ""
        if not text.strip().isdigit():
            # An XID alert whose XID cannot be read: the unknown-XID rule (cordon, no drain).
            action, detail = action_for(-1)
        else:
            xid = int(text)
            action, detail = action_for(xid)
    elif labels.get(ACTION_LABEL):
        by_label = {a.label: a for a in Action}
        if labels[ACTION_LABEL] not in by_label:
            return None
        action, detail = by_label[labels[ACTION_LABEL]], f"{name}: {ACTION_LABEL}={labels[ACTION_LABEL]}"
    elif name in ALERT_ACTIONS:
        action, detail = ALERT_ACTIONS[name], name
    else:
        return None
    if action is Action.NONE:
        return None
    return Request(since=since, node=node, reason=name, action=action, xid=xid, gpu=labels.get("gpu", ""),
                   detail=detail)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.actions = Counter("gpu_health_actions", "Actions and refusals by the GPU health service.",
                               ["action", "reason", "result"], registry=r)
        self.out = Gauge("gpu_health_nodes_out_of_service", "Nodes out of service by this service.", registry=r)
        self.limit = Gauge("gpu_health_nodes_out_of_service_limit", "Circuit breaker: most nodes out at once.",
                           registry=r)
        self.gpu_nodes = Gauge("gpu_health_gpu_nodes", "Nodes with the GPU resource.", registry=r)
        self.alerts = Counter("gpu_health_alerts_received", "Alerts received from Alertmanager.",
                              ["alertname", "status"], registry=r)
        self.api_errors = Counter("gpu_health_api_errors", "Failed Kubernetes API calls.", ["call"], registry=r)
        self.dry_run = Gauge("gpu_health_dry_run", "1 in dry-run mode.", registry=r)
        self.last = Gauge("gpu_health_last_reconcile_timestamp_seconds", "Last completed reconcile.", registry=r)


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("annotations") or {})


def _gpu_count(quantities: dict[str, Any] | None, resource: str) -> float:
    try:
        return float(str((quantities or {}).get(resource, "0")))
    except ValueError:
        return 0.0


def is_gpu_pod(pod: dict[str, Any], resource: str) -> bool:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if any(o.get("kind") == "DaemonSet" for o in (pod.get("metadata") or {}).get("ownerReferences") or []):
        return False
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        if _gpu_count(res.get("limits"), resource) > 0 or _gpu_count(res.get("requests"), resource) > 0:
            return True
    return False


@dataclass
class DiagResult:
    passed: bool
    time: dt.datetime
    expires: dt.datetime


def diag_result(annotations: dict[str, str], now: dt.datetime) -> DiagResult | None:
    """The node's level-1 diagnostic, or None when absent, malformed or expired."""
    value = annotations.get(DIAG)
    t, expires = parse_time(annotations.get(DIAG_TIME)), parse_time(annotations.get(DIAG_EXPIRES))
    if value not in ("pass", "fail") or t is None or expires is None or expires <= now:
        return None
    return DiagResult(value == "pass", t, expires)


class GpuHealth:
    """Decisions and actions; `handle_webhook` may be called from any thread, `reconcile` from one."""

    def __init__(self, kube: KubeClient, settings: Settings, metrics: Metrics | None = None,
                 clock: Callable[[], dt.datetime] = now_utc) -> None:
        self.kube, self.settings, self.clock = kube, settings, clock
        self.metrics = metrics or Metrics()
        self.metrics.dry_run.set(1 if settings.dry_run else 0)
        self._inbox: list[tuple[str, Request | None, str, str]] = []
        self._inbox_lock = threading.Lock()
        self.pending: dict[tuple[str, str, str], Request] = {}
        self.blocked_reported: set[tuple[str, str]] = set()
        # dry run: node -> (action, time, reason) it would have been taken out with
        self.simulated: dict[str, tuple[Action, dt.datetime, str]] = {}
        self.pair_failures_reported: set[tuple[str, str, dt.datetime]] = set()  # (node, check, time)
        self.returns_reported: set[tuple[str, str]] = set()  # dry run: (node, diagnostic time)

    # -- input -----------------------------------------------------------------------------------
    def handle_webhook(self, payload: dict[str, Any]) -> int:
        received = self.clock()
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise ValueError("not an Alertmanager webhook payload: no alerts[]")
        items = []
        for alert in alerts:
            if not isinstance(alert, dict):
                continue
            labels = alert.get("labels") or {}
            status = alert.get("status") or payload.get("status") or "firing"
            self.metrics.alerts.labels(labels.get("alertname", ""), status).inc()
            items.append((status, request_from_alert(alert, received), labels.get("node", ""),
                          labels.get("alertname", "")))
        with self._inbox_lock:
            self._inbox.extend(items)
        return len(items)

    def _take_inbox(self) -> None:
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
        for status, req, node, name in items:
            if status == "resolved":
                # A resolved alert cancels what was not done yet; it never brings a node back.
                for key in [k for k in self.pending if k[0] == node and k[1] == name]:
                    del self.pending[key]
            elif req is not None:
                key = (req.node, req.reason, req.gpu)
                old = self.pending.get(key)
                if old is None or req.action > old.action:
                    self.pending[key] = req

    # -- output ----------------------------------------------------------------------------------
    def _event(self, node: dict[str, Any], reason: str, message: str, warning: bool = True) -> None:
        meta = node.get("metadata") or {}
        stamp = fmt_time(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'node')}.gpu-health.", "namespace": self.settings.event_namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta.get("name", ""), "uid": meta.get("uid", "")},
            "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
            "source": {"component": "gpu-health"}, "reportingComponent": "gpu-cluster.io/gpu-health",
            "reportingInstance": "gpu-health", "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        log.info("event %s %s: %s", meta.get("name"), reason, message)
        try:
            self.kube.create_event(self.settings.event_namespace, event)
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("create-event").inc()
            log.warning("event for %s not recorded: %s", meta.get("name"), e)

    def _count(self, action: str, reason: str, result: str) -> None:
        self.metrics.actions.labels(action, reason, result).inc()

    # -- the loop body ---------------------------------------------------------------------------
    def reconcile(self) -> None:
        self._take_inbox()
        now = self.clock()
        try:
            nodes = {n["metadata"]["name"]: n for n in self.kube.list_nodes()}
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("list-nodes").inc()
            log.warning("cannot list nodes: %s", e)
            return
        gpu_nodes = {k: n for k, n in nodes.items()
                     if _gpu_count((n.get("status") or {}).get("capacity"), self.settings.gpu_resource) > 0}
        limit = self.settings.limit(len(gpu_nodes))
        self.metrics.gpu_nodes.set(len(gpu_nodes))
        self.metrics.limit.set(limit)
        out = self._out_of_service(nodes)

        # Check results: a failing diagnostic newer than the node's last return to service (a
        # request from an earlier failure that has since passed, expired or gone is dropped).
        for name, node in gpu_nodes.items():
            ann = _annotations(node)
            diag = diag_result(ann, now)
            restored = parse_time(ann.get(ANN_RESTORED))
            key = (name, DIAG_FAIL_REASON, "")
            if not (diag and not diag.passed):
                self.pending.pop(key, None)
            elif name not in out and (restored is None or diag.time > restored):
                self.pending.setdefault(key, Request(since=diag.time, node=name, reason=DIAG_FAIL_REASON,
                                                     action=Action.DRAIN, detail="DCGM level-1 diagnostic failed"))

        self._record_pair_results(gpu_nodes)
        self._pair_checks(gpu_nodes, out, now)

        for key, req in sorted(self.pending.items(), key=lambda kv: kv[1]):
            target = gpu_nodes.get(req.node)
            if target is None:
                log.info("ignoring %s for %s: not a GPU node", req.reason, req.node)
                del self.pending[key]
                continue
            restored = parse_time(_annotations(target).get(ANN_RESTORED))
            if restored is not None and req.since <= restored:
                del self.pending[key]  # handled before the node came back
                continue
            if req.node in out:
                if req.action > out[req.node]:
                    if self._take_out(target, req, escalate=True):
                        out[req.node] = req.action
                        del self.pending[key]
                else:
                    del self.pending[key]
                continue
            if len(out) >= limit:
                if not req.refused:
                    req.refused = True
                    self._count(req.action.label, req.reason, "refused")
                    self._event(target, "GpuHealthRefused",
                                f"{'dry run: ' if self.settings.dry_run else ''}circuit breaker: {len(out)} of at "
                                f"most {limit} nodes already out of service (max-nodes-out "
                                f"{self.settings.max_nodes_out}, max-percent-out {self.settings.max_percent_out:g}% "
                                f"of {len(gpu_nodes)} GPU nodes); not taking {req.node} out ({req.action.label}) "
                                f"for {req.reason}: {req.detail}")
                continue
            if self._take_out(target, req, escalate=False):
                out[req.node] = req.action
                del self.pending[key]

        for name, action in out.items():
            if action.drains and name in nodes and not self.settings.dry_run:
                self._drain(nodes[name])
        for name in list(out):
            if name in nodes and self._maybe_return(nodes[name], now):
                del out[name]
        self.metrics.out.set(len(out))
        self.metrics.last.set(self.clock().timestamp())

    def _record_pair_results(self, gpu_nodes: dict[str, dict[str, Any]]) -> None:
        """The NCCL pair check's finished pods -> their verdicts on their nodes (gpuhealth/ncclpair.py),
        written once per pod (a result newer than the pod's, or the same, is left as it is). These
        are check results, like the diagnostic's: written in dry run too."""
        try:
            pods = self.kube.list_pods(self.settings.pair_namespace, "=".join(ncclpair.POD_LABEL))
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("list-pods").inc()
            log.warning("cannot list the NCCL pair check's pods: %s", e)
            return
        for pod in pods:
            found = ncclpair.pod_verdict(pod)
            if found is None or found[0] not in gpu_nodes:
                continue
            name, marks = found
            node = gpu_nodes[name]
            (key, value), = marks.items()
            new = ncclpair.parse(name, key, value)
            current = _annotations(node).get(key)
            old = ncclpair.parse(name, key, current) if current is not None else None
            assert new is not None  # pod_verdict wrote it
            if old is not None and old.time >= new.time:
                continue
            if new.result == "error" and old is not None and old.result != "error" and old.expires > self.clock():
                continue  # a crashed run never hides the last measured verdict
            try:
                updated = self.kube.patch_node(name, {"metadata": {"annotations": marks}})
            except (ApiError, OSError) as e:
                self.metrics.api_errors.labels("patch-node").inc()
                log.warning("cannot record the NCCL pair result on %s (retried next reconcile): %s", name, e)
                continue
            if (updated or {}).get("metadata"):
                node.clear()
                node.update(updated)
            log.info("recorded on %s: %s=%s", name, key, value)

    def _pair_checks(self, gpu_nodes: dict[str, dict[str, Any]], out: dict[str, Action], now: dt.datetime) -> None:
        """The NCCL pair checks (gpuhealth/ncclpair.py): a node the failures name is tainted (not
        cordoned, not drained: a slow or fallen-back link slows jobs, it does not corrupt them); a failure that
        names no node is reported once, as an Event on the node and a metric, and changes nothing."""
        # results with a node that is no GPU node any more say nothing about this one
        results = [r for name, node in gpu_nodes.items() for r in ncclpair.node_results(name, _annotations(node), now)
                   if r.peer in gpu_nodes]
        restored = {name: t for name, node in gpu_nodes.items()
                    if (t := parse_time(_annotations(node).get(ANN_RESTORED))) is not None}
        named = ncclpair.suspects(results, dt.timedelta(minutes=self.settings.pair_window_minutes), restored)
        for name in gpu_nodes:
            key = (name, NCCL_FAIL_REASON, "")
            failures = named.get(name)
            if failures is None:
                self.pending.pop(key, None)
            elif name not in out:
                peers = ", ".join(sorted({f.peer for f in failures}))
                self.pending.setdefault(key, Request(
                    since=failures[-1].time, node=name, reason=NCCL_FAIL_REASON, action=Action.CORDON,
                    detail=f"NCCL pair checks failed with {peers}, each of which passes with another node "
                           f"(exit codes {', '.join(str(f.code) for f in failures)})"))
        for r in results:
            if r.result != "fail" or r.node in named or r.peer in named:
                continue
            floor = restored.get(r.node)
            if (floor is not None and r.time <= floor) or (r.node, r.check, r.time) in self.pair_failures_reported:
                continue
            self.pair_failures_reported.add((r.node, r.check, r.time))
            self._count("none", NCCL_FAIL_REASON, "unattributed")
            self._event(gpu_nodes[r.node], "GpuHealthNcclPairFailed",
                        f"NCCL pair check {r.check} with {r.peer} failed at {fmt_time(r.time)} (exit code {r.code}); "
                        "one failing pair cannot name the faulty node: no action until the node also fails with "
                        "another peer that passes elsewhere")

    def _out_of_service(self, nodes: dict[str, dict[str, Any]]) -> dict[str, Action]:
        """Nodes out of service by this service (their ANN_ACTION), plus, in dry run, those it
        would have taken out."""
        by_label = {a.label: a for a in Action}
        out = {}
        for name, node in nodes.items():
            value = _annotations(node).get(ANN_ACTION)
            if value:
                out[name] = by_label.get(value, Action.DRAIN)
        if self.settings.dry_run:
            out.update({k: a for k, (a, _, _) in self.simulated.items() if k in nodes})
        return out

    def _take_out(self, node: dict[str, Any], req: Request, escalate: bool) -> bool:
        name = req.node
        verb = "escalating to" if escalate else "taking out of service:"
        what = f"{req.action.label} ({req.reason}{f' GPU {req.gpu}' if req.gpu else ''}: {req.detail})"
        if self.settings.dry_run:
            self.simulated[name] = (req.action, self.clock(), req.reason)
            self._count(req.action.label, req.reason, "dry-run")
            self._event(node, "GpuHealthDryRun", f"dry run: would be {verb} {what}; nothing changed")
            return True
        spec = node.get("spec") or {}
        stamp = fmt_time(self.clock())
        taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": req.taint_value, "effect": "NoSchedule"})
        annotations: dict[str, str | None] = {
            ANN_ACTION: req.action.label,
            ANN_REASON: f"{req.reason}{f' gpu {req.gpu}' if req.gpu else ''}: {req.detail}"[:1000],
            ANN_XID: str(req.xid) if req.xid is not None else None,
            ANN_TIME: stamp,
        }
        # Out for NCCL: tainted, not cordoned, so the pair check (which tolerates this taint value
        # only) can run there again, while nothing else lands; any other reason cordons too.
        cordon = req.reason != NCCL_FAIL_REASON
        if cordon and not spec.get("unschedulable"):
            annotations[ANN_CORDONED] = "true"
        elif not escalate:
            annotations[ANN_CORDONED] = "false"
        patch = {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion"), "annotations": annotations},
                 "spec": {"taints": taints, **({"unschedulable": True} if cordon else {})}}
        if not node["metadata"].get("resourceVersion"):
            del patch["metadata"]["resourceVersion"]
        try:
            updated = self.kube.patch_node(name, patch)
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("patch-node").inc()
            self._count(req.action.label, req.reason, "error")
            log.warning("cannot take %s out of service (retried next reconcile): %s", name, e)
            return False
        if (updated or {}).get("metadata"):
            node.clear()
            node.update(updated)
        self._count(req.action.label, req.reason, "done")
        recommend = {Action.RESET_GPU: "; reset the GPU (nvidia-smi -r)", Action.REBOOT: "; reboot the node"}
        check = "NCCL pair check" if req.reason == NCCL_FAIL_REASON else DIAG
        self._event(node, "GpuHealthOutOfService",
                    f"{verb} {what}: {'cordoned, ' if cordon else ''}tainted {TAINT_KEY}={req.taint_value}:NoSchedule"
                    f"{', draining GPU pods' if req.action.drains else ''}{recommend.get(req.action, '')}; "
                    f"returns after a passing {check} newer than {stamp}")
        return True

    def _drain(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        reason = _annotations(node).get(ANN_REASON, "").split(":")[0].split(" ")[0] or "unknown"
        try:
            pods = self.kube.list_pods_on(name)
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("list-pods").inc()
            log.warning("cannot list pods on %s: %s", name, e)
            return
        for pod in pods:
            if not is_gpu_pod(pod, self.settings.gpu_resource) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if self._is_diagnostic(pod):
                continue  # the check that returns the node: evicting it would keep the node out for good
            ns, pname = pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]
            try:
                self.kube.evict(ns, pname)
            except ApiError as e:
                if e.status == 404:
                    continue
                if e.status == 429:
                    self._count("evict", reason, "blocked")
                    if (ns, pname) not in self.blocked_reported:
                        self.blocked_reported.add((ns, pname))
                        self._event(node, "GpuHealthEvictionBlocked",
                                    f"eviction of {ns}/{pname} refused (429: a PodDisruptionBudget forbids it now); "
                                    "retried every reconcile, never forced")
                    continue
                self.metrics.api_errors.labels("evict").inc()
                self._count("evict", reason, "error")
                log.warning("eviction of %s/%s failed: %s", ns, pname, e)
                continue
            except OSError as e:
                self.metrics.api_errors.labels("evict").inc()
                log.warning("eviction of %s/%s failed: %s", ns, pname, e)
                continue
            self.blocked_reported.discard((ns, pname))
            self._count("evict", reason, "done")
            self._event(node, "GpuHealthEvicted", f"evicted GPU pod {ns}/{pname} (policy/v1 Eviction)")

    def _is_diagnostic(self, pod: dict[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        key, value = DIAG_POD_LABEL
        return meta.get("namespace") == self.settings.diag_namespace and (meta.get("labels") or {}).get(key) == value

    def _maybe_return(self, node: dict[str, Any], now: dt.datetime) -> bool:
        name = node["metadata"]["name"]
        ann = _annotations(node)
        simulated = self.simulated.get(name) if self.settings.dry_run else None
        if simulated is not None:
            since, reason = simulated[1], simulated[2]
        else:
            since, reason = parse_time(ann.get(ANN_TIME)) or now, ann.get(ANN_REASON, "")
        if reason.startswith(NCCL_FAIL_REASON):
            # out for the network: only a passing pair check, newer than the action, brings it back
            passes = [r for r in ncclpair.node_results(name, ann, now) if r.result == "pass" and r.time > since]
            if not passes:
                return False
            latest = max(passes, key=lambda r: r.time)
            check, passed_at = f"NCCL pair check {latest.check} with {latest.peer}", latest.time
            basis = NCCL_CHECK_BASIS
        else:
            diag = diag_result(ann, now)
            if diag is None or not diag.passed or diag.time <= since:
                return False
            check, passed_at, basis = DIAG, diag.time, DIAG
        msg = f"returned to service: {check} passed at {fmt_time(passed_at)}, newer than the action at {fmt_time(since)}"
        if self.settings.dry_run:
            self.simulated.pop(name, None)
            if (name, fmt_time(passed_at)) in self.returns_reported:
                return False
            self.returns_reported.add((name, fmt_time(passed_at)))
            self._count("uncordon", basis, "dry-run")
            self._event(node, "GpuHealthDryRun", "dry run: would be " + msg + "; nothing changed", warning=False)
            return True
        spec = node.get("spec") or {}
        patch: dict[str, Any] = {
            "metadata": {"annotations": {**dict.fromkeys(OUR_ANNOTATIONS), ANN_RESTORED: fmt_time(self.clock())}},
            "spec": {"taints": [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY] or None},
        }
        if ann.get(ANN_CORDONED) == "true":
            patch["spec"]["unschedulable"] = None
        if node["metadata"].get("resourceVersion"):
            patch["metadata"]["resourceVersion"] = node["metadata"]["resourceVersion"]
        try:
            self.kube.patch_node(name, patch)
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("patch-node").inc()
            self._count("uncordon", basis, "error")
            log.warning("cannot return %s to service (retried next reconcile): %s", name, e)
            return False
        self._count("uncordon", basis, "done")
        self._event(node, "GpuHealthReturned", msg, warning=False)
        return True


class _Handler(BaseHTTPRequestHandler):
    service: GpuHealth
    wake: threading.Event
    alive: Callable[[], bool]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("http: " + format, *args)

    def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.service.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            ok = self.alive()
            self._reply(200 if ok else 503, b"ok\n" if ok else b"reconcile loop stopped\n")
        else:
            self._reply(404, b"not found\n")

    def do_POST(self) -> None:
        if self.path.split("?")[0] not in ("/", "/webhook"):
            self._reply(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if not 0 < length <= 10 * 1024 * 1024:
                raise ValueError("body missing or over 10 MiB")
            payload = json.loads(self.rfile.read(length))
            if not isinstance(payload, dict):
                raise ValueError("not a JSON object")
            n = self.service.handle_webhook(payload)
        except ValueError as e:
            self._reply(400, f"{e}\n".encode())
            return
        self.wake.set()
        self._reply(200, json.dumps({"accepted": n}).encode(), "application/json")


class Server:
    """The HTTP server and the reconcile loop (every --reconcile-seconds, and at once after a webhook)."""

    def __init__(self, service: GpuHealth, address: str, port: int) -> None:
        self.service = service
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.loop = threading.Thread(target=self._run, name="reconcile", daemon=True)
        handler = type("Handler", (_Handler,), {"service": service, "wake": self.wake,
                                                "alive": staticmethod(self.loop.is_alive)})
        self.http = ThreadingHTTPServer((address, port), handler)
        self.http.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.service.reconcile()
            except Exception:  # a bug in one pass must not stop the loop (and /healthz)
                log.exception("reconcile failed")
            self.wake.wait(self.service.settings.reconcile_seconds)
            self.wake.clear()

    def start(self) -> None:
        self.loop.start()
        threading.Thread(target=self.http.serve_forever, name="http", daemon=True).start()

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.set()
        self.http.shutdown()
        self.http.server_close()
        self.loop.join(timeout=15)
