"""Alertmanager's webhook (version 4) -> requests to take nodes out, each alert judged alone.

One malformed alert (a label or annotation that is not a string, `labels` that is not a map, a
status other than firing/resolved, a start time that is not a string) is refused with its index
and the reason, and counted; it never keeps the other alerts of its batch from being acted on. A
payload that is not a webhook at all (not an object, no `alerts` list, a group status other than
firing/resolved) is refused whole: gpuhealth/web.py answers it 400.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from gpuhealth.contract import Request, parse_time
from gpuhealth.xid import Action, action_for

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
STATUSES = ("firing", "resolved")
# An XID is a small number (NVIDIA's catalogue ends in the hundreds); a longer run of digits is no
# XID (and int() of thousands of digits raises).
_XID = re.compile(r"[0-9]{1,6}")
_XID_IN_TEXT = re.compile(r"\bXID\s+([0-9]{1,6})\b", re.IGNORECASE)


class PayloadError(ValueError):
    """The body is no Alertmanager webhook payload at all."""


@dataclass(frozen=True)
class Judged:
    """One alert of a batch: accepted (status, alertname, node, request: None when it asks for
    nothing), or refused (`problem` says why, `field` which part: the metric's label)."""

    index: int
    status: str = ""
    alertname: str = ""
    node: str = ""
    request: Request | None = None
    problem: str = ""
    field: str = ""


def _string_map_problem(key: str, value: Any, required: bool) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, dict):
        return f"{key}: not a map of strings ({type(value).__name__})"
    for k, v in value.items():
        if not isinstance(v, str):
            return f"{key}.{str(k)[:64]}: not a string ({type(v).__name__})"
    return ""


def alert_problem(alert: Any) -> tuple[str, str]:
    """(field, why) when `alert` is malformed, else ("", "")."""
    if not isinstance(alert, dict):
        return "alert", f"not an object ({type(alert).__name__})"
    for key, required in (("labels", True), ("annotations", False)):
        problem = _string_map_problem(key, alert.get(key), required)
        if problem:
            return key, problem
    status = alert.get("status")
    if status is not None and status not in STATUSES:
        return "status", f"status: not one of {', '.join(STATUSES)}"
    starts = alert.get("startsAt")
    if starts is not None and not isinstance(starts, str):
        return "startsAt", f"startsAt: not a string ({type(starts).__name__})"
    return "", ""


def judge(payload: Any, received: dt.datetime) -> list[Judged]:
    """Every alert of the payload, judged alone; PayloadError when it is no webhook payload."""
    if not isinstance(payload, dict):
        raise PayloadError(f"not a JSON object ({type(payload).__name__})")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("not an Alertmanager webhook payload: no alerts[] list")
    group_status = payload.get("status", "firing")
    if group_status not in STATUSES:
        raise PayloadError(f"status: not one of {', '.join(STATUSES)}")
    judged = []
    for i, alert in enumerate(alerts):
        part, problem = alert_problem(alert)
        if problem:
            judged.append(Judged(i, problem=problem, field=part))
            continue
        labels = alert["labels"]
        judged.append(Judged(i, status=alert.get("status") or group_status, alertname=labels.get("alertname", ""),
                             node=labels.get("node", ""), request=request_from_alert(alert, received)))
    return judged


def request_from_alert(alert: dict[str, Any], received: dt.datetime) -> Request | None:
    """The action a well-formed alert (webhook v4 `alerts[]` item, see alert_problem) asks for, or None."""
    labels = alert.get("labels") or {}
    node, name = labels.get("node", ""), labels.get("alertname", "")
    if not node or not name:
        return None
    since = parse_time(alert.get("startsAt")) or received
    xid: int | None = None
    if name in XID_ALERTS:
        text = (labels.get("xid") or "").strip()
        if not _XID.fullmatch(text):
            found = _XID_IN_TEXT.search((alert.get("annotations") or {}).get("description", ""))
            text = found.group(1) if found else ""
        if not text:
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
