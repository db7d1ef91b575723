"""The snapshot taken before an upgrade, shipped off the host for real: the rendered init update
(scripts.kubeadm_upgrade_apply with etcdBackup.s3's client) runs in the host sandbox (tests/hostsim.py,
its openssl the real one) with the real S3 client (components/lab/etcd_s3_client.py, as installed),
a real etcd's snapshot, the real etcdutl behind `ctr` (test_upgrade_scripts.etcd_tools) and a real
S3-compatible server on loopback (gofakes3, s3_servers.gofakes3):

  - a failed upload stops the upgrade before kubeadm, the verified snapshot kept on the host; the
    next run uploads it (not retaken) and only then upgrades;
  - the object is named for the upgrade, is ciphertext, and decrypts into the snapshot that
    `etcdutl snapshot restore` makes into an etcd serving the keys;
  - the scheduled snapshots' retention by count leaves it; by age (retainDays) it goes, never the
    newest pre-upgrade object.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.lab import etcd_backup_s3, scripts
from config.etcd_backup_s3 import EtcdBackupS3Config
from tests.components.lab.etcd_rehearsal import ETCD_BIN, free_port
from tests.components.lab.s3_servers import gofakes3
from tests.components.lab.test_host_scripts import (
    _calls,
    needs_isolation,
    real_machine_untouched,  # noqa: F401 - used by name
)
from tests.components.lab.test_upgrade_scripts import (
    KUBEADM_CONFIG,
    REV,
    SNAPSHOTS,
    control_plane,
    etcd_snapshot,  # noqa: F401 - the fixture, used by name
    etcd_tools,
    run,
)
from tests.hostsim import HostSim

pytestmark = [needs_isolation, pytest.mark.usefixtures("real_machine_untouched")]

NODE = "cp-1"
BUCKET = "etcd-backups"
TIMEOUT = 120


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gofakes3(tmp_path_factory.mktemp("gofakes3") / "log", BUCKET) as url:
        yield url


def _config(path: Path, endpoint: str, prefix: str, retain: int = 3, retain_days: int | None = None) -> Path:
    """The client's config as the install step writes it (etcd_backup_s3.client_config)."""
    s3 = EtcdBackupS3Config(endpoint=endpoint, bucket=BUCKET, prefix=prefix, retain=retain, retain_days=retain_days)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(etcd_backup_s3.client_config(s3, NODE, {
        "etcdBackupS3AccessKeyId": "AKIAEXAMPLE", "etcdBackupS3SecretAccessKey": "secret/with+chars",
        "etcdBackupEncryptionKey": "correct horse battery staple"}))
    path.chmod(0o600)
    return path


def _client(config: Path, client: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(client), *args], env={"PATH": "/usr/bin:/bin", "GPU_CLUSTER_ETCD_S3_CONFIG": str(config)},
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _keys(config: Path, client: Path) -> list[str]:
    listed = _client(config, client, "list")
    assert listed.returncode == 0, listed.stderr
    return [line.split("\t")[0] for line in listed.stdout.splitlines()]


def _install_client(directory: Path) -> Path:
    client = directory / "gpu-cluster-etcd-s3"
    client.write_text(etcd_backup_s3.client_script())
    client.chmod(0o700)
    return client


def _restored_value(snapshot: Path, work: Path, key: str) -> str:
    """`etcdutl snapshot restore` of `snapshot`, etcd started on it (loopback, plain HTTP): `key`'s value."""
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    data = work / "restored"
    subprocess.run([str(ETCD_BIN / "etcdutl"), "snapshot", "restore", str(snapshot), "--name", "back",
                    "--initial-cluster", f"back={peer}", "--initial-advertise-peer-urls", peer, "--data-dir", str(data)],
                   capture_output=True, timeout=TIMEOUT, check=True)
    with (work / "restored-etcd.log").open("wb") as out:
        proc = subprocess.Popen([str(ETCD_BIN / "etcd"), "--name", "back", "--data-dir", str(data),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", f"back={peer}"], stdout=out, stderr=out)
    try:
        for _ in range(150):  # 30 s
            got = subprocess.run([str(ETCD_BIN / "etcdctl"), f"--endpoints={client}", "--command-timeout=5s",
                                  "get", key, "--print-value-only"], capture_output=True, text=True, timeout=TIMEOUT)
            if got.returncode == 0:
                return got.stdout.strip()
            assert proc.poll() is None, (work / "restored-etcd.log").read_text()
            time.sleep(0.2)
        raise AssertionError("the restored etcd did not answer")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_upload_before_kubeadm_then_restore_from_the_bucket(tmp_path: Path, endpoint: str, etcd_snapshot: Path) -> None:  # noqa: F811
    prefix = "lab-a/etcd/"
    sim = HostSim(tmp_path, real_tools=("openssl",))
    control_plane(sim)
    etcd_tools(sim, etcd_snapshot)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    client = _install_client(sim.sim)
    apply = scripts.kubeadm_upgrade_apply(NODE, "1.34.3", REV, 3, s3_client=str(client))
    config = sim.path("/etc/gpu-cluster/etcd-backup-s3.json")  # the client's own default, in the sandbox
    kept = sim.path(f"{SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db")

    # The bucket does not answer: no upgrade; the verified snapshot stays on the host.
    _config(config, f"http://127.0.0.1:{free_port()}", prefix)
    start = sim.mark()
    failed = run(sim, apply, stdin=KUBEADM_CONFIG, rc=1)
    assert "gpu-cluster-etcd-s3: PUT" in failed.stderr, failed.stderr
    assert f"the etcd snapshot {SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db was not uploaded to etcdBackup.s3" \
        in failed.stderr and "not upgrading" in failed.stderr
    assert not _calls(sim.calls_since(start), "kubeadm", "upgrade")
    assert kept.read_bytes() == etcd_snapshot.read_bytes()
    assert not sim.path(f"{SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db.s3").exists()
    assert not list(kept.parent.glob(".*")), "the encrypted copy was left on the host"

    # It answers: the same snapshot goes up, then kubeadm runs.
    _config(config, endpoint, prefix)
    start = sim.mark()
    done = run(sim, apply, stdin=KUBEADM_CONFIG)
    calls = sim.calls_since(start)
    name = re.escape(prefix) + rf"etcd-{NODE}-pre-upgrade-[0-9]{{8}}T[0-9]{{6}}Z-v1\.34\.2-to-v1\.34\.3\.db\.enc"
    uploaded = re.search(rf"uploaded s3://{BUCKET}/({name}) \(", done.stdout)
    assert uploaded, done.stdout
    assert not [c for c in calls if c[:1] == ["kubectl"] and "exec" in c], "the snapshot was taken again"
    assert _calls(calls, "kubeadm", "upgrade", "apply", "v1.34.3", "--yes")
    assert uploaded.group(1) in sim.path(f"{SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db.s3").read_text()
    key = uploaded.group(1)
    assert _keys(config, client) == [key]

    # What an operator does after a failed upgrade: fetch it, decrypt it, restore it into etcd.
    fetched = tmp_path / "from-the-bucket.db"
    got = _client(config, client, "fetch", key, str(fetched))
    assert got.returncode == 0, got.stderr
    assert fetched.read_bytes() == etcd_snapshot.read_bytes()
    assert _restored_value(fetched, tmp_path, "/registry/before-upgrade") == "kept"


def test_scheduled_retention_leaves_pre_upgrade_objects_which_go_only_by_age(
    tmp_path: Path, endpoint: str, etcd_snapshot: Path,  # noqa: F811
) -> None:
    prefix = "lab-b/etcd/"
    client = _install_client(tmp_path)
    config = _config(tmp_path / "s3.json", endpoint, prefix, retain=1)
    local = tmp_path / "etcd-v1.34.2-before-v1.34.3.db"
    local.write_bytes(etcd_snapshot.read_bytes())
    bad = _client(config, client, "upload-pre-upgrade", str(local), "1.34.2", "v1.34.3;rm")
    assert bad.returncode == 1 and "is not a Kubernetes version" in bad.stderr
    up = _client(config, client, "upload-pre-upgrade", str(local), "1.34.2", "1.34.3")
    assert up.returncode == 0, up.stderr
    (before,) = _keys(config, client)
    for _ in range(3):  # scheduled snapshots, retain 1
        time.sleep(1.1)  # a new name (the time has seconds)
        scheduled = tmp_path / f"etcd-{NODE}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.db"
        scheduled.write_bytes(etcd_snapshot.read_bytes())
        assert _client(config, client, "upload", str(scheduled)).returncode == 0
    listed = _keys(config, client)
    assert before in listed and len(listed) == 2, listed  # the pre-upgrade object and the newest scheduled one

    # By age (retainDays): a pre-upgrade object older than that goes, today's stay.
    old = f"{prefix}etcd-{NODE}-pre-upgrade-20200101T000000Z-v1.33.5-to-v1.34.2.db.enc"
    request = urllib.request.Request(f"{endpoint}/{BUCKET}/{old}", data=b"an old one", method="PUT")
    urllib.request.urlopen(request, timeout=30).close()  # noqa: S310 - loopback; gofakes3 checks no signature
    aged = _config(tmp_path / "aged.json", endpoint, prefix, retain=1, retain_days=1)
    time.sleep(1.1)
    again = _client(aged, client, "upload-pre-upgrade", str(local), "1.34.3", "1.35.0")
    assert again.returncode == 0, again.stderr
    assert f"deleted s3://{BUCKET}/{old}" in again.stdout
    listed = _keys(aged, client)
    assert old not in listed and before in listed and len(listed) == 3, listed
