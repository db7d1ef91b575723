"""Contention (bench/critical_path.py's second table): the plan's graph run as a discrete-event
simulation with two shared resources the longest-path model leaves out: the control plane's sshd
(SshdModel) and the package mirrors the apt steps download from (MirrorModel). Every parameter
carries its source."""

from __future__ import annotations

import heapq
import itertools
import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass

from bench.plan_graph import Node, join_token_ages
from bench.step_costs import BASELINE_MBIT


@dataclass(frozen=True)
class SshdModel:
    """The control plane's sshd and pulumi-command's dialing."""

    # sshd_config(5), MaxStartups, default "10:30:100" (start:rate:full): refuse a new connection with
    # probability rate/100 once `start` connections are unauthenticated, rising linearly to 100% at
    # `full`.
    start: int = 10
    rate: int = 30
    full: int = 100
    # How long a connection stays unauthenticated: TCP, version exchange, key exchange, host key,
    # public-key authentication, sshd's privilege-separated child. Estimate for a LAN; part of the
    # step's cost, not added to it.
    handshake_s: float = 0.5
    # pulumi-command (provider/pkg/provider/remote/connection.go): a refused dial is retried through
    # the pulumi SDK's retry.Until (100 ms, x1.5 per retry, at most 5 s); the step fails after more
    # than dialErrorLimit refused dials (default 10).
    dial_limit: int = 10
    first_delay_s: float = 0.1
    backoff: float = 1.5
    max_delay_s: float = 5.0

    def refusal(self, unauthenticated: int) -> float:
        if unauthenticated < self.start:
            return 0.0
        if unauthenticated >= self.full:
            return 1.0
        return (self.rate + (100 - self.rate) * (unauthenticated - self.start) / (self.full - self.start)) / 100

    def retry_delay(self, refused: int) -> float:
        return min(self.first_delay_s * self.backoff ** (refused - 1), self.max_delay_s)


@dataclass(frozen=True)
class Pool:
    """A bottleneck downloads share fairly (processor sharing)."""

    name: str
    shared_mbit: float  # what every download through it shares
    per_flow_mbit: float  # the most one download gets


@dataclass(frozen=True)
class MirrorModel:
    """Where the hosts' apt downloads come from: a pool, or another pool for some steps."""

    name: str
    what: str
    default: Pool
    by_key: tuple[tuple[str, Pool], ...] = ()  # (cost key, pool) for the steps served elsewhere

    def pool(self, key: str) -> Pool:
        return dict(self.by_key).get(key, self.default)


# The hosts fetch packages from the Internet mirrors (archive.ubuntu.com, pkgs.k8s.io,
# download.docker.com, nvidia.github.io) through the lab's uplink. Assumption: 1 Gbit/s.
_UPLINK = Pool("uplink", shared_mbit=1000, per_flow_mbit=1000)
# An apt caching proxy on the lab's network (e.g. apt-cacher-ng) with a 25 Gbit/s NIC, cold: each
# package crosses the uplink once and is streamed to every host that asked for it, so one host's
# download still gets at most the uplink's rate. Assumption: a server-class 25 GbE NIC, as a lab
# with 128 GPU servers has on its management network.
_CACHE = Pool("lan-cache", shared_mbit=25000, per_flow_mbit=1000)
UPLINK = MirrorModel("uplink", "Internet mirrors through a shared 1 Gbit/s uplink", _UPLINK)
LAN_CACHE = MirrorModel("lan-cache", "a cold LAN apt cache with a 25 Gbit/s NIC for every repository, "
                                     "fed by the uplink", _CACHE)
# What an apt proxy set in the hosts' own apt configuration caches today: the Ubuntu archive (plain
# HTTP: the driver, nfs-kernel-server). The other repositories are HTTPS (pkgs.k8s.io,
# download.docker.com, nvidia.github.io): apt tunnels them through a proxy with CONNECT, uncached.
ARCHIVE_CACHE = MirrorModel("archive-cache", "the same cache for the Ubuntu archive only (HTTPS repositories "
                                             "through the uplink)", _UPLINK,
                            by_key=(("nvidia-driver", _CACHE), ("nfs-server", _CACHE)))



@dataclass
class Sim:
    finish: dict[str, float]
    refused_dials: int = 0
    failed_steps: int = 0  # steps refused more than dialErrorLimit times: `up` would fail
    peak_unauthenticated: int = 0
    peak_downloads: int = 0


def simulate(graph: dict[str, Node], cp_host: str | None, sshd: SshdModel | None, mirror: MirrorModel | None,
             rng: random.Random) -> Sim:
    """Each step starts once its predecessors are done, as in analyse(), but a step on the control
    plane's connection first gets a connection past sshd's MaxStartups, and an apt step's download
    shares the mirror with every other download in flight. With neither model it reproduces
    analyse()'s finish times exactly."""
    dependents: dict[str, list[str]] = defaultdict(list)
    waiting = {}
    for u, n in graph.items():
        waiting[u] = len(n.preds)
        for p in n.preds:
            dependents[p].append(u)
    events: list[tuple[float, int, str, str]] = []
    order = itertools.count()

    def push(t: float, kind: str, u: str) -> None:
        heapq.heappush(events, (t, next(order), kind, u))

    for u in sorted(graph):
        if not waiting[u]:
            push(0.0, "ready", u)
    sim = Sim(finish={})
    flows: dict[Pool, dict[str, float]] = defaultdict(dict)  # pool -> step -> MB still to download
    local: dict[str, float] = {}  # step -> seconds of work after its download
    refused: dict[str, int] = defaultdict(int)
    unauthenticated = 0
    now = 0.0

    def rate(pool: Pool) -> float:  # MB/s each download in the pool gets
        return min(pool.per_flow_mbit, pool.shared_mbit / len(flows[pool])) / 8

    def next_download() -> float:
        return min((now + min(f.values()) / rate(pool) for pool, f in flows.items() if f), default=math.inf)

    def advance(to: float) -> None:
        for pool, f in flows.items():
            if f:
                moved = (to - now) * rate(pool)
                for k in f:
                    f[k] -= moved

    def work(u: str, t: float) -> None:
        node = graph[u]
        if mirror is not None and node.download_mb > 0:
            flows[mirror.pool(node.key)][u] = node.download_mb
            local[u] = max(node.cost - node.download_mb * 8 / BASELINE_MBIT, 0.0)
            sim.peak_downloads = max(sim.peak_downloads, sum(len(f) for f in flows.values()))
        else:
            push(t + node.cost, "finish", u)

    while events or any(flows.values()):
        next_event = events[0][0] if events else math.inf
        next_flow = next_download()
        if next_flow < next_event:
            advance(next_flow)
            now = next_flow
            for f in flows.values():
                for k in [k for k, left in f.items() if left <= 1e-9]:
                    del f[k]
                    push(now + local.pop(k), "finish", k)
            continue
        t, _, kind, u = heapq.heappop(events)
        advance(t)
        now = t
        node = graph[u]
        if kind == "ready":
            if sshd is not None and node.ssh_host is not None and node.ssh_host == cp_host:
                push(now, "dial", u)
            else:
                work(u, now)
        elif kind == "dial":
            assert sshd is not None
            if rng.random() < sshd.refusal(unauthenticated):
                sim.refused_dials += 1
                refused[u] += 1
                if refused[u] == sshd.dial_limit + 1:
                    sim.failed_steps += 1  # pulumi-command gives up here; counted, then retried on
                push(now + sshd.retry_delay(refused[u]), "dial", u)
            else:
                unauthenticated += 1
                sim.peak_unauthenticated = max(sim.peak_unauthenticated, unauthenticated)
                push(now + min(sshd.handshake_s, node.cost), "authenticated", u)
                work(u, now)
        elif kind == "authenticated":
            unauthenticated -= 1
        elif kind == "finish":
            sim.finish[u] = now
            for d in dependents[u]:
                waiting[d] -= 1
                if not waiting[d]:
                    push(now, "ready", d)
    if len(sim.finish) != len(graph):
        raise SystemExit("critical_path: the simulation did not finish every step (a cycle?)")
    return sim


@dataclass
class Scenario:
    name: str
    title: str
    sshd: bool
    mirror: MirrorModel | None


SCENARIOS = (
    Scenario("none", "no contention", sshd=False, mirror=None),
    Scenario("sshd", "control-plane sshd", sshd=True, mirror=None),
    Scenario("uplink", "sshd + mirrors over a 1 Gbit/s uplink", sshd=True, mirror=UPLINK),
    Scenario("archive-cache", "sshd + LAN cache of the Ubuntu archive only", sshd=True, mirror=ARCHIVE_CACHE),
    Scenario("lan-cache", "sshd + LAN cache of every repository (25 Gbit/s)", sshd=True, mirror=LAN_CACHE),
)


@dataclass
class Contention:
    """One scenario at one N, over the trials."""

    ready: float  # median time until every worker's Ready step is done
    ready_max: float
    done: float  # median time until the last step is done
    refused_dials: float  # mean per trial
    failed_steps: float  # mean per trial
    failing_trials: int  # trials in which at least one step would have failed
    peak_unauthenticated: int
    peak_downloads: int
    token_slack: float  # the least time left on a join's token when the join starts (median trial)


def contention(graph: dict[str, Node], scenario: Scenario, sshd: SshdModel, trials: int, seed: int) -> Contention:
    cp_host = next((n.ssh_host for n in graph.values() if n.key == "init"), None)
    ready_steps = [u for u, n in graph.items() if n.key == "ready"]
    runs = []
    for trial in range(trials if scenario.sshd else 1):
        rng = random.Random(seed * 1_000_003 + trial)
        runs.append(simulate(graph, cp_host, sshd if scenario.sshd else None, scenario.mirror, rng))
    readies = [max((r.finish[u] for u in ready_steps), default=0.0) for r in runs]
    median_run = runs[sorted(range(len(runs)), key=lambda i: readies[i])[len(runs) // 2]]
    slack = [ttl - age for age, _, _, ttl in join_token_ages(graph, median_run.finish)]
    return Contention(
        ready=statistics.median(readies),
        ready_max=max(readies),
        done=statistics.median(max(r.finish.values()) for r in runs),
        refused_dials=statistics.mean(r.refused_dials for r in runs),
        failed_steps=statistics.mean(r.failed_steps for r in runs),
        failing_trials=sum(1 for r in runs if r.failed_steps),
        peak_unauthenticated=max(r.peak_unauthenticated for r in runs),
        peak_downloads=max(r.peak_downloads for r in runs),
        token_slack=min(slack, default=math.nan),
    )
