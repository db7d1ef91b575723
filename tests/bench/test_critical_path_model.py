"""The contention models of bench/critical_path.py, on small graphs built here: sshd's MaxStartups
as sshd_config(5) states it, pulumi-command's redial schedule, and a simulation that reduces to the
longest path without contention and shares the mirror fairly with it. (The benchmark itself is
not a test: it asserts nothing about times.)"""

from __future__ import annotations

import random

import pytest

from bench.critical_path import (
    LAN_CACHE,
    UPLINK,
    Node,
    SshdModel,
    analyse,
    simulate,
)

CP = "192.0.2.10"


def _node(name: str, cost: float, preds: tuple[str, ...] = (), key: str = "step", ssh_host: str | None = None,
          download_mb: float = 0.0) -> Node:
    return Node(name, name, cost, key, {p: "test" for p in preds}, ssh_host=ssh_host, download_mb=download_mb)


def test_max_startups_refusal_follows_sshd_config():
    sshd = SshdModel()
    assert [sshd.refusal(u) for u in (0, 9)] == [0.0, 0.0]
    assert sshd.refusal(10) == pytest.approx(0.30)  # "refuse ... with a probability of rate/100 (30%)"
    assert sshd.refusal(55) == pytest.approx(0.65)  # "increases linearly"
    assert sshd.refusal(100) == 1.0 and sshd.refusal(150) == 1.0  # "all ... refused" at full


def test_redials_follow_pulumis_retry_schedule():
    sshd = SshdModel()
    delays = [sshd.retry_delay(n) for n in range(1, 11)]
    assert delays[:3] == pytest.approx([0.1, 0.15, 0.225])
    # Ten refusals (the dial limit) take ~11 s of waiting; the eleventh fails the step.
    assert sum(delays) == pytest.approx(11.33, abs=0.01)
    assert sshd.retry_delay(30) == 5.0


def test_without_contention_the_simulation_is_the_longest_path():
    graph = {n.urn: n for n in (
        _node("a", 5), _node("b", 7, ("a",)), _node("c", 3, ("a",), ssh_host=CP), _node("d", 1, ("b", "c"), download_mb=50),
    )}
    sim = simulate(graph, CP, None, None, random.Random(0))
    assert sim.finish == {"a": 5, "b": 12, "c": 8, "d": 13}
    assert max(sim.finish.values()) == analyse(0, graph).critical


def test_a_burst_of_control_plane_sessions_is_refused_and_redialled():
    graph = {f"s{i}": _node(f"s{i}", 2, ssh_host=CP) for i in range(128)}
    graph["w"] = _node("w", 2, ssh_host="198.18.0.10")  # a worker's own sshd: never refused
    sim = simulate(graph, CP, SshdModel(), None, random.Random(1))
    assert sim.refused_dials > 0 and sim.peak_unauthenticated >= 10
    assert sim.finish["w"] == 2
    assert max(sim.finish.values()) > 2  # some sessions waited for a redial
    # One session per worker on their own hosts instead: nothing to refuse.
    spread = {f"s{i}": _node(f"s{i}", 2, ssh_host=f"198.18.1.{i}") for i in range(128)}
    calm = simulate(spread, CP, SshdModel(), None, random.Random(1))
    assert calm.refused_dials == 0 and max(calm.finish.values()) == 2


@pytest.mark.parametrize("hosts", [1, 4, 128])
def test_downloads_share_the_uplink_fairly(hosts):
    # 100 MB each through 1 Gbit/s (125 MB/s): alone 0.8 s, together hosts x 0.8 s; the step's cost
    # (10 s for one host alone) keeps its 9.2 s of local work.
    graph = {f"h{i}": _node(f"h{i}", 10, key="kube-packages", download_mb=100) for i in range(hosts)}
    sim = simulate(graph, None, None, UPLINK, random.Random(0))
    assert max(sim.finish.values()) == pytest.approx(9.2 + 0.8 * hosts)
    cached = simulate(graph, None, None, LAN_CACHE, random.Random(0))
    # A 25 Gbit/s cache: each host still gets at most the 1 Gbit/s a cold cache fetches at.
    assert max(cached.finish.values()) == pytest.approx(9.2 + max(0.8, 100 * hosts / 3125))
