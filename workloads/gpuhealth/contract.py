"""What the GPU health service and the cluster agree on: the names it writes on a Node (annotations,
taint; the module docstring of gpuhealth/service.py says what each holds), the diagnostic's
annotations it reads, its settings and one request to take a node out of service.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpuhealth.xid import Action

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
DIAG_FAIL_REASON = "DiagLevel1Failed"
NCCL_FAIL_REASON = "NcclPairFailed"
NCCL_CHECK_BASIS = PREFIX + "nccl-pair"  # the `reason` of a return counted after a passing pair check
# The diagnostic's pods (components/gpu_health.py DIAG_LABELS; a test keeps them equal). They ask
# for the GPUs of a node this service took out, to bring it back: a drain must not evict them.
DIAG_POD_LABEL = ("app.kubernetes.io/name", "gpu-diag")
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
    # /healthz fails once no reconcile pass has succeeded for this many intervals (a loop that is
    # stuck in a call or failing every pass, not only one whose thread died).
    stale_reconciles: float = 4.0

    def __post_init__(self) -> None:
        if self.max_nodes_out < 0:
            raise ValueError("--max-nodes-out must be >= 0")
        if not 0 <= self.max_percent_out <= 100:
            raise ValueError("--max-percent-out must be within 0..100")
        if self.reconcile_seconds <= 0:
            raise ValueError("--reconcile-seconds must be > 0")
        if self.pair_window_minutes <= 0:
            raise ValueError("--pair-window-minutes must be > 0")
        if self.stale_reconciles < 2:
            raise ValueError("--stale-reconciles must be >= 2 (one pass may run late)")

    @property
    def stale_seconds(self) -> float:
        """How long without a successful reconcile pass before /healthz fails."""
        return self.stale_reconciles * self.reconcile_seconds

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


def annotations_of(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("annotations") or {})


def gpu_count(quantities: dict[str, Any] | None, resource: str) -> float:
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
        if gpu_count(res.get("limits"), resource) > 0 or gpu_count(res.get("requests"), resource) > 0:
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
