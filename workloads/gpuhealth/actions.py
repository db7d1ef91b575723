"""What the GPU health service changes, and how it tells: take a node out (cordon, taint, annotate),
drain its GPU pods through the Eviction API, return it, and record each as an Event. The decisions
(which node, when, within the breaker) are gpuhealth/service.py's; this is its base class.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from gpuhealth import ncclpair
from gpuhealth.contract import (
    ANN_ACTION,
    ANN_CORDONED,
    ANN_REASON,
    ANN_RESTORED,
    ANN_TIME,
    ANN_XID,
    DIAG,
    DIAG_POD_LABEL,
    NCCL_CHECK_BASIS,
    NCCL_FAIL_REASON,
    OUR_ANNOTATIONS,
    TAINT_KEY,
    Request,
    Settings,
    annotations_of,
    diag_result,
    fmt_time,
    is_gpu_pod,
    parse_time,
)
from gpuhealth.kube import ApiError, KubeClient
from gpuhealth.metrics import Metrics
from gpuhealth.xid import Action

log = logging.getLogger("gpuhealth")


class NodeActions:
    """The changes to Nodes and pods; GpuHealth (gpuhealth/service.py) sets these attributes."""

    kube: KubeClient
    settings: Settings
    metrics: Metrics
    clock: Callable[[], dt.datetime]
    simulated: dict[str, tuple[Action, dt.datetime, str]]  # dry run: node -> (action, time, reason)
    blocked_reported: set[tuple[str, str]]
    returns_reported: set[tuple[str, str]]

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
        reason = annotations_of(node).get(ANN_REASON, "").split(":")[0].split(" ")[0] or "unknown"
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
        ann = annotations_of(node)
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
