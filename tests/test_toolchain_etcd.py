"""The etcd built by tools/toolchain/build.sh runs: a member on loopback (free ports, a temporary
data dir) takes a write through etcdctl, and etcdutl reads the snapshot etcdctl saves, the tools
the lab's backups run (components/lab/etcd_backup.py) at the version kubeadm 1.34 runs."""

from __future__ import annotations

import socket
import subprocess
import time

from components.toolchain_versions import ETCD
from tests.toolchain import toolchain_binary

TIMEOUT = 30  # seconds for each command and for the member to come up


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_toolchain_etcd_serves_and_its_snapshot_reads_back(tmp_path):
    etcd, etcdctl, etcdutl = (toolchain_binary(ETCD, b) for b in ("etcd", "etcdctl", "etcdutl"))
    client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    member = subprocess.Popen(
        [str(etcd), "--name", "m", "--data-dir", str(tmp_path / "data"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"m={peer}", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        def ctl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(etcdctl), "--endpoints", client, *args],
                                  capture_output=True, text=True, timeout=TIMEOUT, check=False)

        deadline = time.monotonic() + TIMEOUT
        while ctl("endpoint", "health").returncode != 0:
            assert member.poll() is None, member.stderr.read() if member.stderr else "etcd exited"
            assert time.monotonic() < deadline, "etcd did not become healthy"
            time.sleep(0.2)
        assert ctl("put", "gpu-cluster", "real").returncode == 0
        assert ctl("get", "gpu-cluster", "--print-value-only").stdout.strip() == "real"
        snapshot = tmp_path / "snapshot.db"
        saved = ctl("snapshot", "save", str(snapshot))
        assert saved.returncode == 0, saved.stderr
    finally:
        member.terminate()
        member.wait(timeout=TIMEOUT)
    status = subprocess.run([str(etcdutl), "snapshot", "status", str(snapshot), "-w", "json"],
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert status.returncode == 0, status.stderr
    assert '"totalKey"' in status.stdout
