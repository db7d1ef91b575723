"""The plan as a graph of steps (bench/critical_path.py): which step waits for which, as the Pulumi
engine schedules them with unbounded --parallel, and its longest chains (depth, critical path) and
the join tokens' ages."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from bench.step_costs import COMMAND, DOWNLOADS_MB, IMPLICIT_WAITS, Cost, UnknownStep, cost_of

TOKEN_TTL = 15 * 60  # the earlier layout's per-join `kubeadm token create --ttl 15m`


@dataclass
class Node:
    urn: str
    name: str
    cost: float
    key: str
    preds: dict[str, str]  # predecessor urn -> why r waits for it
    parent: str = ""
    ssh_host: str | None = None  # a remote command: the host its SSH connection goes to
    download_mb: float = 0.0  # what the step downloads from the package mirrors


def build_graph(plan, costs: tuple[Cost, ...]) -> dict[str, Node]:
    by_urn = {r.urn: r for r in plan.resources}
    children: dict[str, list[str]] = defaultdict(list)
    for r in plan.resources:
        if r.parent in by_urn:
            children[r.parent].append(r.urn)

    def descendants(urn: str) -> list[str]:
        out, todo = [], list(children[urn])
        while todo:
            u = todo.pop()
            out.append(u)
            todo.extend(children[u])
        return out

    def expand(urn: str) -> list[str]:
        if urn not in by_urn:
            return []  # the stack itself or a resource outside the plan
        return [urn] if by_urn[urn].custom else [urn, *descendants(urn)]

    unknown: list[str] = []
    graph: dict[str, Node] = {}
    for r in plan.resources:
        try:
            seconds, key = cost_of(r, costs)
        except UnknownStep as e:
            unknown.append(str(e))
            continue
        preds: dict[str, str] = {}
        for d in r.dependencies:
            for u in expand(d):
                preds.setdefault(u, f"depends on {by_urn[d].name}")
        provider = r.provider.rsplit("::", 1)[0] if r.provider else ""
        if provider in by_urn:
            preds.setdefault(provider, "its provider")
        ancestor = r.parent
        while ancestor in by_urn:
            a = by_urn[ancestor]
            if a.custom:
                preds.setdefault(ancestor, "its custom parent")
            for d in a.dependencies:
                for u in expand(d):
                    preds.setdefault(u, f"its ancestor {a.name} depends on {by_urn[d].name}")
            ancestor = a.parent
        preds.pop(r.urn, None)
        ssh_host = (r.inputs.get("connection") or {}).get("host") if r.type == COMMAND else None
        download = DOWNLOADS_MB[key][0] if key in DOWNLOADS_MB else 0.0
        graph[r.urn] = Node(r.urn, r.name, seconds, key, preds, r.parent, ssh_host, download)
    if unknown:
        raise UnknownStep("no cost for: " + ", ".join(sorted(unknown)))
    for waiter, target, why in IMPLICIT_WAITS:
        targets = [u for u, n in graph.items() if n.key == target]
        for node in graph.values():
            if node.key == waiter:
                for u in targets:
                    node.preds.setdefault(u, why)
    return graph


@dataclass
class Result:
    workers: int
    resources: int
    costed: int
    depth: int
    critical: float
    total: float
    critical_chain: list[tuple[Node, float, float, str]]  # node, start, finish, why it waited
    depth_chain: list[tuple[Node, float, float, str]]
    token_ages: list[tuple[float, float, float]]  # per join: (age at use, token minted at, join starts at)


def analyse(workers: int, graph: dict[str, Node]) -> Result:
    finish: dict[str, float] = {}
    steps: dict[str, int] = {}
    by_time: dict[str, str | None] = {}
    by_steps: dict[str, str | None] = {}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(root: str) -> None:
        stack = [(root, False)]
        while stack:
            urn, expanded = stack.pop()
            if state.get(urn) == 2:
                continue
            node = graph[urn]
            if not expanded:
                if state.get(urn) == 1:
                    raise SystemExit(f"critical_path: dependency cycle through {node.name}")
                state[urn] = 1
                stack.append((urn, True))
                stack.extend((p, False) for p in node.preds if state.get(p) != 2)
                continue
            best_t = max(node.preds, key=lambda p: (finish[p], steps[p], p), default=None)
            best_s = max(node.preds, key=lambda p: (steps[p], finish[p], p), default=None)
            finish[urn] = node.cost + (finish[best_t] if best_t else 0.0)
            steps[urn] = (1 if node.cost > 0 else 0) + (steps[best_s] if best_s else 0)
            by_time[urn], by_steps[urn] = best_t, best_s
            state[urn] = 2

    for urn in sorted(graph):
        visit(urn)

    def chain(end: str, via: dict[str, str | None]) -> list[tuple[Node, float, float, str]]:
        out = []
        u: str | None = end
        while u is not None:
            prev = via[u]
            node = graph[u]
            out.append((node, finish[u] - node.cost, finish[u], node.preds[prev] if prev else "nothing"))
            u = prev
        return list(reversed(out))

    end_t = max(graph, key=lambda u: (finish[u], steps[u], u))
    end_s = max(graph, key=lambda u: (steps[u], finish[u], u))
    return Result(
        workers=workers,
        resources=len(graph),
        costed=sum(1 for n in graph.values() if n.cost > 0),
        depth=steps[end_s],
        critical=finish[end_t],
        total=sum(n.cost for n in graph.values()),
        critical_chain=chain(end_t, by_time),
        depth_chain=chain(end_s, by_steps),
        token_ages=join_token_ages(graph, finish),
    )


def join_token_ttl() -> float:
    """The cluster token's lifetime after the program ran (components/lab/node_join.py)."""
    try:
        from components.lab import node_join
    except ImportError:
        return math.nan
    ttl = getattr(node_join, "JOIN_TOKEN_TTL", None)
    return ttl.total_seconds() if ttl is not None else math.nan


def join_token_ages(graph: dict[str, Node], finish: dict[str, float]) -> list[tuple[float, float, float, float]]:
    """Per join: (token age when the join starts, issued at, join starts at, token lifetime).

    Earlier layout: each join's token step mints a token that lives TOKEN_TTL from then. Now: one
    token Secret whose expiry is set when the program runs (t = 0), JOIN_TOKEN_TTL later."""
    tokens = {n.parent: u for u, n in graph.items() if n.key == "token"}
    cluster_token = any(n.name.endswith("-token") and n.key == "k8s-object" for n in graph.values())
    ages = []
    for u, n in graph.items():
        if n.key != "join":
            continue
        used = finish[u] - n.cost
        if n.parent in tokens:
            minted = finish[tokens[n.parent]]
            ages.append((used - minted, minted, used, float(TOKEN_TTL)))
        elif cluster_token:
            ages.append((used, 0.0, used, join_token_ttl()))
    return ages
