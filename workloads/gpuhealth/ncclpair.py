"""The two-node NCCL check's results: written on each node by its pods, read by the service.

    python -m gpuhealth.ncclpair --check nccl-pair-1a2b3c4d --nodes gpu-1,gpu-2 --valid-hours 48 <exit code>

The check (components/gpu_health_pairs.py) is a CronJob per pair of GPU nodes running the NCCL
acceptance sweep (trainer.allreduce_bench) across the two nodes under torchrun; after torchrun, each
of its two pods runs this with the pod's exit code, and it writes onto its own node (NODE_NAME) one
annotation per check:

  gpu-cluster.io/<check>: {"result": "pass"|"fail"|"error", "peer": <other node>, "code": <exit code>,
                           "time": <RFC 3339 UTC>, "expires": <RFC 3339 UTC>}

from the exit code (components/training/launch.py, trainer.nccl):
  0                        pass
  10, 11, 12               fail: the sweep measured the pair and it fell short (bus bandwidth below
                           the fraction of network.linkGbps, NCCL on sockets where RDMA is declared,
                           or no transport lines to tell)
  1                        error: a worker died (an NCCL error, or the peer pod was preempted or
                           evicted): written, never acted on alone
  anything else            (3: the check's own arguments; 128+: the pod was signalled) nothing written

What the service makes of them (`suspects`): one failing pair cannot say which of its two nodes is
at fault. A node is named only when its checks fail with at least two different peers and each of
those peers passes with some other node; so with two GPU nodes (one pair) a failure is reported
(an Event on both nodes, a metric) and nothing is taken out of service, and a fault of the whole
fabric (every pair failing) names no node.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuhealth.kube import KubeClient

PREFIX = "gpu-cluster.io/"
CHECK_PREFIX = "nccl-pair-"  # the CronJob names: nccl-pair-<8 hex>; the annotation is PREFIX + name
PASS_CODES = frozenset({0})
FAIL_CODES = frozenset({10, 11, 12})  # trainer.nccl's verdicts (launch.py mirrors them)
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


def node_results(node: str, annotations: dict[str, str], now: dt.datetime) -> list[PairResult]:
    """The node's unexpired, well-formed pair results (malformed ones are ignored, never acted on)."""
    out = []
    for key, text in annotations.items():
        if not key.startswith(PREFIX + CHECK_PREFIX):
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        t, expires = _parse_time(value.get("time")), _parse_time(value.get("expires"))
        result, peer, code = value.get("result"), value.get("peer"), value.get("code")
        if (t is None or expires is None or expires <= now or result not in ("pass", "fail", "error")
                or not isinstance(peer, str) or not peer or not isinstance(code, int)):
            continue
        out.append(PairResult(key[len(PREFIX):], node, peer, result, code, t, expires))
    return out


def suspects(results: Iterable[PairResult], since: dict[str, dt.datetime] | None = None) -> dict[str, list[PairResult]]:
    """Nodes the failing checks name, with the failures that name them (module docstring).

    `since`: node -> a time before which its own failures no longer count (it was returned to
    service after them)."""
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
        peers = {r.peer for r in failures}
        if len(peers) < 2:
            continue
        # each peer must be fine elsewhere: a pass of its own with a node other than this one
        if all(any(o.result == "pass" and o.peer != node for o in by_node.get(peer, [])) for peer in peers):
            named[node] = sorted(failures, key=lambda r: r.time)
    return named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuhealth.ncclpair", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", required=True, help="the check's name (nccl-pair-<hex>): the annotation key")
    parser.add_argument("--nodes", required=True, help="the pair: two node names, comma-separated")
    parser.add_argument("--valid-hours", type=int, required=True)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this pod's node (NODE_NAME)")
    parser.add_argument("code", type=int, help="the pod's exit code")
    args = parser.parse_args(argv)
    pair = [n for n in args.nodes.split(",") if n]
    if not args.check.startswith(CHECK_PREFIX) or len(pair) != 2 or args.node not in pair:
        print(f"ncclpair: --check must start with {CHECK_PREFIX} and this node ({args.node or 'NODE_NAME unset'}) "
              f"must be one of the two --nodes ({args.nodes})", file=sys.stderr)
        return 2
    peer = pair[1] if args.node == pair[0] else pair[0]
    marks = annotation(args.check, peer, args.code, dt.datetime.now(dt.UTC), args.valid_hours)
    if marks is None:
        print(f"ncclpair: exit code {args.code} is no verdict on {args.node} (the check's own arguments, or the "
              "pod was signalled); node left as it is", file=sys.stderr)
        return 0
    KubeClient.from_env().patch_node(args.node, {"metadata": {"annotations": marks}})
    print(f"ncclpair: {args.node} with {peer}: {json.dumps(marks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
