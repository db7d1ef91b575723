"""The two-node NCCL check's results: read from its finished pods, kept on the nodes, acted on.

The check (components/gpu_health_pairs.py) is a CronJob per pair of GPU nodes running the NCCL
acceptance sweep (trainer.allreduce_bench) across the two nodes under torchrun. Its pods carry the
label POD_LABEL and the annotations POD_CHECK (the check's name), POD_NODES ("a,b") and
POD_VALID_HOURS. The GPU health service lists them (it may list pods anyway), and for each pod
whose container CONTAINER has terminated it writes onto the pod's node one annotation per check:

  gpu-cluster.io/<check>: {"result": "pass"|"fail"|"error", "peer": <other node>, "code": <exit code>,
                           "time": <the container's finishedAt>, "expires": <time + valid hours>}

from the container's exit code (components/training/launch.py, trainer.nccl):
  0                        pass
  10, 11, 12, 15           fail: the sweep measured the pair and it fell short (bus bandwidth below
                           the fraction of network.linkGbps, NCCL on sockets where RDMA is declared,
                           no transport lines to tell, or no channel over NET/IB where RDMA is declared)
  1                        error: a worker died (an NCCL error, or the peer pod was preempted or
                           evicted): written, never acted on alone
  anything else            (3: the check's own arguments; 128+: the pod was signalled) nothing written
Why the service writes them rather than the pods: the pods then need no API access at all (no
token, no rights), and the training namespace's default-deny egress, which leaves the API server
out, stays as it is.

What the service makes of them (`suspects`): one failing pair cannot say which of its two nodes is
at fault. A node is named only when its checks fail with at least two different peers and each of
those peers passes with some other node; so with two GPU nodes (one pair) a failure is reported
(an Event on both nodes, a metric) and nothing is taken out of service, and a fault of the whole
fabric (every pair failing) names no node.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PREFIX = "gpu-cluster.io/"
CHECK_PREFIX = "nccl-pair-"  # the CronJob names: nccl-pair-<8 hex>; the annotation is PREFIX + name
# What the check's pods carry (components/gpu_health_pairs.py renders them; a test keeps them equal).
POD_LABEL = ("gpu-cluster.io/check", "nccl-pair")
POD_CHECK = PREFIX + "check"
POD_NODES = PREFIX + "nodes"
POD_VALID_HOURS = PREFIX + "valid-hours"
CONTAINER = "trainer"  # the Indexed Job's container (components/training/job.py)
PASS_CODES = frozenset({0})
FAIL_CODES = frozenset({10, 11, 12, 15, 16, 17})  # trainer.nccl's verdicts (launch.py mirrors them)
ERROR_CODES = frozenset({1})  # torchrun: a worker failed


@dataclass(frozen=True)
class PairResult:
    check: str  # the annotation key's name part (nccl-pair-<hex>)
    node: str
    peer: str
    result: str  # pass | fail | error
    code: int
    time: dt.datetime
    expires: dt.datetime


def _fmt(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def result_for(code: int) -> str | None:
    if code in PASS_CODES:
        return "pass"
    if code in FAIL_CODES:
        return "fail"
    if code in ERROR_CODES:
        return "error"
    return None


def annotation(check: str, peer: str, code: int, now: dt.datetime, valid_hours: int) -> dict[str, str] | None:
    result = result_for(code)
    if result is None:
        return None
    value = {"result": result, "peer": peer, "code": code, "time": _fmt(now),
             "expires": _fmt(now + dt.timedelta(hours=valid_hours))}
    return {PREFIX + check: json.dumps(value, sort_keys=True)}


def parse(node: str, key: str, text: str) -> PairResult | None:
    """One annotation of `node` as a pair result; None when it is not one or is malformed."""
    if not key.startswith(PREFIX + CHECK_PREFIX):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    t, expires = _parse_time(value.get("time")), _parse_time(value.get("expires"))
    result, peer, code = value.get("result"), value.get("peer"), value.get("code")
    if (t is None or expires is None or result not in ("pass", "fail", "error")
            or not isinstance(peer, str) or not peer or not isinstance(code, int)):
        return None
    return PairResult(key[len(PREFIX):], node, peer, result, code, t, expires)


def node_results(node: str, annotations: dict[str, str], now: dt.datetime) -> list[PairResult]:
    """The node's unexpired, well-formed pair results (malformed ones are ignored, never acted on)."""
    parsed = (parse(node, key, text) for key, text in annotations.items())
    return [r for r in parsed if r is not None and r.expires > now]


def suspects(results: Iterable[PairResult], window: dt.timedelta,
             since: dict[str, dt.datetime] | None = None) -> dict[str, list[PairResult]]:
    """Nodes the failing checks name, with the failures that name them (module docstring).

    Evidence from one run of the checks only: the failures counted are those within `window`
    (the time all rounds of one run take) of the node's newest failure, and each peer's pass
    with another node must fall in that same stretch (a peer that passed yesterday and was not
    checked today says nothing about today). `since`: node -> a time before which its own failures
    no longer count (it was returned to service after them)."""
    since = since or {}
    by_node: dict[str, list[PairResult]] = {}
    for r in results:
        by_node.setdefault(r.node, []).append(r)

    def counts(r: PairResult) -> bool:
        floor = since.get(r.node)
        return floor is None or r.time > floor

    named: dict[str, list[PairResult]] = {}
    for node, rs in by_node.items():
        failures = [r for r in rs if r.result == "fail" and counts(r)]
        if not failures:
            continue
        newest = max(r.time for r in failures)
        failures = [r for r in failures if r.time >= newest - window]
        peers = {r.peer for r in failures}
        if len(peers) < 2:
            continue
        # each peer must be fine elsewhere, in the same run: a pass with a node other than this one
        if all(any(o.result == "pass" and o.peer != node and abs(o.time - newest) <= window
                   for o in by_node.get(peer, [])) for peer in peers):
            named[node] = sorted(failures, key=lambda r: r.time)
    return named


def check_name(pair: list[str] | tuple[str, ...]) -> str:
    """The check's name for its pair, as components/gpu_health_pairs.py names its CronJob."""
    return CHECK_PREFIX + hashlib.sha256(",".join(pair).encode()).hexdigest()[:8]


def _made_by_its_cronjob(meta: dict[str, Any], check: str) -> bool:
    """The pod's controller is a Job of the check's CronJob (<check>-<scheduled minutes>) or one made
    from it by hand (<check>-<digits>): a pod someone created with the labels alone is not evidence."""
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return (len(owners) == 1 and owners[0].get("kind") == "Job" and owners[0].get("apiVersion") == "batch/v1"
            and re.fullmatch(re.escape(check) + r"-[0-9]+", str(owners[0].get("name", ""))) is not None)


def pod_verdict(pod: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(node, the annotation to write there) for a finished pair-check pod, or None (not one, not
    finished, no verdict, or not what the check renders: its name is the hash of its pair, its
    controller a Job of its CronJob, and it ran on one of the pair)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ann = meta.get("annotations") or {}
    check, nodes, node = ann.get(POD_CHECK, ""), ann.get(POD_NODES, "").split(","), spec.get("nodeName", "")
    try:
        valid_hours = int(ann.get(POD_VALID_HOURS, ""))
    except ValueError:
        return None
    if (len(nodes) != 2 or check != check_name(nodes) or node not in nodes or valid_hours < 1
            or not _made_by_its_cronjob(meta, check)):
        return None
    for c in status.get("containerStatuses") or []:
        terminated = (c.get("state") or {}).get("terminated")
        if c.get("name") != CONTAINER or not terminated:
            continue
        finished, code = _parse_time(terminated.get("finishedAt")), terminated.get("exitCode")
        if finished is None or not isinstance(code, int):
            return None
        peer = nodes[1] if node == nodes[0] else nodes[0]
        marks = annotation(check, peer, code, finished, valid_hours)
        return (node, marks) if marks is not None else None
    return None
