"""The GPU health service: acts on Alertmanager notifications and diagnostic results.

    python -m gpuhealth [--dry-run] [--max-nodes-out 1] [--max-percent-out 10] [--port 9880] ...

HTTP (one port, gpuhealth/web.py): POST /webhook (also /) takes Alertmanager's webhook JSON (version
4) with the bearer token of --webhook-token-file (401 without it, nothing changed); GET /metrics the
Prometheus metrics; GET /healthz 200 while a reconcile pass succeeded within --stale-reconciles
intervals. Each alert of a batch is judged alone (gpuhealth/alerts.py): a malformed one is refused
in the answer, logged and counted, and the others are acted on.

The parts: gpuhealth/contract.py (names on the Node, settings, a request), alerts.py (webhook ->
requests), this module (the decisions: inbox, breaker, checks, return), actions.py (what changes a
Node or pod, and Events), metrics.py, web.py (HTTP, the token, the loop thread).

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
{alertname,status}, gpu_health_alerts_rejected_total{field} (malformed alerts refused),
gpu_health_http_requests_total{handler,code}, gpu_health_api_errors_total{call},
gpu_health_reconcile_failures_total, gpu_health_dry_run,
gpu_health_last_successful_reconcile_timestamp_seconds (the staleness alert reads it).

  gpu-cluster.io/nccl-pair-<hex>       JSON: result, peer, code, time, expires (the NCCL pair check)
Does not: reset GPUs or reboot nodes (RESET_GPU / REBOOT are recommendations in the annotation and
Event), delete pods, run diagnostics or checks (CronJobs do), or touch nodes without GPUs.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

from gpuhealth import alerts, ncclpair
from gpuhealth.actions import NodeActions
from gpuhealth.alerts import Judged, PayloadError, request_from_alert
from gpuhealth.contract import (
    ANN_ACTION,
    ANN_CORDONED,
    ANN_REASON,
    ANN_RESTORED,
    ANN_TIME,
    ANN_XID,
    DIAG,
    DIAG_EXPIRES,
    DIAG_FAIL_REASON,
    DIAG_POD_LABEL,
    DIAG_TIME,
    NCCL_FAIL_REASON,
    OUR_ANNOTATIONS,
    TAINT_KEY,
    Request,
    Settings,
    annotations_of,
    diag_result,
    fmt_time,
    gpu_count,
    now_utc,
    parse_time,
)
from gpuhealth.kube import ApiError, KubeClient
from gpuhealth.metrics import Metrics
from gpuhealth.xid import Action

# What the tests and other modules read from here (the names moved out when this file was split).
__all__ = [
    "ANN_ACTION", "ANN_CORDONED", "ANN_REASON", "ANN_RESTORED", "ANN_TIME", "ANN_XID", "DIAG", "DIAG_EXPIRES",
    "DIAG_POD_LABEL", "DIAG_TIME", "NCCL_FAIL_REASON", "OUR_ANNOTATIONS", "TAINT_KEY", "GpuHealth", "Judged",
    "Metrics", "PayloadError", "Request", "Settings", "fmt_time", "parse_time", "request_from_alert",
]

log = logging.getLogger("gpuhealth")

class GpuHealth(NodeActions):
    """Decisions and actions; `handle_webhook` may be called from any thread, `reconcile` from one."""

    def __init__(self, kube: KubeClient, settings: Settings, metrics: Metrics | None = None,
                 clock: Callable[[], dt.datetime] = now_utc) -> None:
        self.kube, self.settings, self.clock = kube, settings, clock
        self.metrics = metrics or Metrics()
        self.metrics.dry_run.set(1 if settings.dry_run else 0)
        self._inbox: list[Judged] = []
        self._inbox_lock = threading.Lock()
        self.pending: dict[tuple[str, str, str], Request] = {}
        self.blocked_reported: set[tuple[str, str]] = set()
        # dry run: node -> (action, time, reason) it would have been taken out with
        self.simulated: dict[str, tuple[Action, dt.datetime, str]] = {}
        self.pair_failures_reported: set[tuple[str, str, dt.datetime]] = set()  # (node, check, time)
        self.returns_reported: set[tuple[str, str]] = set()  # dry run: (node, diagnostic time)

    # -- input -----------------------------------------------------------------------------------
    def handle_webhook(self, payload: Any) -> list[Judged]:
        """Judge each alert of an Alertmanager payload alone (gpuhealth/alerts.py) and queue the
        well-formed ones for the next reconcile; a malformed one is logged, counted and returned
        with its reason. PayloadError when the body is no webhook payload (nothing queued)."""
        judged = alerts.judge(payload, self.clock())
        for j in judged:
            if j.problem:
                self.metrics.rejected.labels(j.field).inc()
                log.warning("alert %d of the batch refused (the others are acted on): %s", j.index, j.problem)
            else:
                self.metrics.alerts.labels(j.alertname, j.status).inc()
        with self._inbox_lock:
            self._inbox.extend(j for j in judged if not j.problem)
        return judged

    def _take_inbox(self) -> None:
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
        for item in items:
            req = item.request
            if item.status == "resolved":
                # A resolved alert cancels what was not done yet; it never brings a node back.
                for key in [k for k in self.pending if k[0] == item.node and k[1] == item.alertname]:
                    del self.pending[key]
            elif req is not None:
                key = (req.node, req.reason, req.gpu)
                old = self.pending.get(key)
                if old is None or req.action > old.action:
                    self.pending[key] = req

    # -- the loop body ---------------------------------------------------------------------------
    def reconcile(self) -> bool:
        """One pass; True when it listed the nodes and ran to the end (an API error on one node is
        counted and retried next pass, and does not make the pass fail)."""
        self._take_inbox()
        now = self.clock()
        try:
            nodes = {n["metadata"]["name"]: n for n in self.kube.list_nodes()}
        except (ApiError, OSError) as e:
            self.metrics.api_errors.labels("list-nodes").inc()
            self.metrics.reconcile_failures.inc()
            log.warning("cannot list nodes: %s", e)
            return False
        gpu_nodes = {k: n for k, n in nodes.items()
                     if gpu_count((n.get("status") or {}).get("capacity"), self.settings.gpu_resource) > 0}
        limit = self.settings.limit(len(gpu_nodes))
        self.metrics.gpu_nodes.set(len(gpu_nodes))
        self.metrics.limit.set(limit)
        out = self._out_of_service(nodes)

        # Check results: a failing diagnostic newer than the node's last return to service (a
        # request from an earlier failure that has since passed, expired or gone is dropped).
        for name, node in gpu_nodes.items():
            ann = annotations_of(node)
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
            restored = parse_time(annotations_of(target).get(ANN_RESTORED))
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
        self.metrics.last_success.set(self.clock().timestamp())
        return True

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
            current = annotations_of(node).get(key)
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
        results = [r for name, node in gpu_nodes.items() for r in ncclpair.node_results(name, annotations_of(node), now)
                   if r.peer in gpu_nodes]
        restored = {name: t for name, node in gpu_nodes.items()
                    if (t := parse_time(annotations_of(node).get(ANN_RESTORED))) is not None}
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
            value = annotations_of(node).get(ANN_ACTION)
            if value:
                out[name] = by_label.get(value, Action.DRAIN)
        if self.settings.dry_run:
            out.update({k: a for k, (a, _, _) in self.simulated.items() if k in nodes})
        return out
