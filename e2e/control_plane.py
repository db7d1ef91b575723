"""A real control plane on loopback, made from the toolchain's binaries and a lab stack's plan:

  etcd                     client and peer URLs on free loopback ports, data in the folder
  kube-apiserver           kubeadm 1.34's flags (cmd/kubeadm/app/phases/controlplane/manifests.go:
                           getAPIServerCommand: NodeRestriction on top of the default admission
                           plugins, authorization Node,RBAC, the front proxy, service-account keys),
                           then the stack's own ClusterConfiguration.apiServer.extraArgs (the audit
                           policy, the EncryptionConfiguration), as kubeadm appends them
  kube-controller-manager  kubeadm's flags (node CIDRs from the stack's pod CIDR), no leader election
  kube-scheduler           kubeadm's flags, no leader election
  kwok                     the lab's nodes from the stack's node model (e2e/kwok.py)

Each component is waited for with a deadline (its health endpoint), and `stop` ends all of them,
newest first, each process group terminated and then killed. Differences from a kubeadm host, and
why: etcd speaks plain HTTP on loopback (nothing else reaches it) and skips fsync (a throwaway
store); every secure port is a free one; components bind 127.0.0.1 only; the API server keeps no
endpoint for the `kubernetes` Service (loopback addresses are refused there).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.lab import hardening
from components.toolchain_versions import ETCD, KUBERNETES, KWOK, binary_path
from e2e import api, kwok, pki, processes
from e2e.lab_stack import KWOK_SELECTOR, LabControlPlane, local_path

START_TIMEOUT = {"etcd": 60, "kube-apiserver": 180, "kube-controller-manager": 90, "kube-scheduler": 90, "kwok": 60}
NODES_READY_TIMEOUT = 120
HEALTH_TIMEOUT = 5  # seconds per health request
ETCDCTL_TIMEOUT = 30
DNS_DOMAIN = "cluster.local"  # kubeadm's default Networking.DNSDomain


def _insecure_loopback() -> ssl.SSLContext:
    """For the health endpoints of controller-manager and scheduler: their serving certificate is
    self-signed at start-up, and /healthz is always allowed (--authorization-always-allow-paths)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _says_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, context=context, timeout=HEALTH_TIMEOUT) as resp:
        return bool(resp.status == 200 and resp.read().strip() in (b"ok", b'{"health":"true","reason":""}'))


@dataclass
class ControlPlane:
    lab: LabControlPlane
    folder: Path
    components: list[processes.Component] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)  # component -> seconds until healthy
    nodes_ready_seconds: float = 0.0
    total_seconds: float = 0.0  # PKI, every component healthy, the nodes Ready
    etcd_url: str = ""
    server: str = ""
    client: api.Client | None = None
    certs: pki.Pki | None = None
    moved: dict[str, Path] = field(default_factory=dict)  # host folder -> where it lies here

    # --- the components, in start order ---

    def _start(self, name: str, argv: list[str], ready: Any) -> None:
        component = processes.start(name, argv, self.logs)
        self.components.append(component)
        self.started[name] = round(processes.wait_until(f"{name} healthy", ready, START_TIMEOUT[name], component), 2)

    def _etcd(self) -> None:
        client_port, peer_port = processes.free_port(), processes.free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self._start("etcd", [
            str(binary_path(ETCD, "etcd")), "--name=e2e", f"--data-dir={self.folder / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=e2e={peer}",
            "--unsafe-no-fsync=true",
        ], lambda: _says_ok(f"{self.etcd_url}/health"))

    def _api_server(self) -> None:
        assert self.certs is not None
        c = self.certs.path
        port = processes.free_port()
        self.server = f"https://127.0.0.1:{port}"
        kubeadm = {
            "advertise-address": "127.0.0.1", "bind-address": "127.0.0.1",
            "enable-admission-plugins": "NodeRestriction",
            "service-cluster-ip-range": self.lab.service_cidr,
            "service-account-key-file": c("sa.pub"), "service-account-signing-key-file": c("sa.key"),
            "service-account-issuer": f"https://kubernetes.default.svc.{DNS_DOMAIN}",
            "client-ca-file": c("ca.crt"), "tls-cert-file": c("apiserver.crt"),
            "tls-private-key-file": c("apiserver.key"),
            "kubelet-client-certificate": c("apiserver-kubelet-client.crt"),
            "kubelet-client-key": c("apiserver-kubelet-client.key"),
            "enable-bootstrap-token-auth": "true", "secure-port": str(port), "allow-privileged": "true",
            "kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
            "requestheader-username-headers": "X-Remote-User", "requestheader-group-headers": "X-Remote-Group",
            "requestheader-extra-headers-prefix": "X-Remote-Extra-",
            "requestheader-client-ca-file": c("front-proxy-ca.crt"),
            "requestheader-allowed-names": "front-proxy-client",
            "proxy-client-cert-file": c("front-proxy-client.crt"), "proxy-client-key-file": c("front-proxy-client.key"),
            "etcd-servers": self.etcd_url,
            "authorization-mode": "Node,RBAC",
            # The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints refuse (loopback):
            # no reconciler, rather than an error every 10 s (nothing in the cluster dials it; KWOK's pods run nothing).
            "endpoint-reconciler-type": "none",
        }
        self.moved = moved = self.lab.write_files(self.folder / "host")
        argv = [str(binary_path(KUBERNETES, "kube-apiserver")), *(f"--{k}={v}" for k, v in kubeadm.items()),
                *self.lab.local_api_server_args(moved)]
        self.client = api.Client(self.server, c("ca.crt"), c("admin.crt"), c("admin.key"))
        client = self.client
        self._start("kube-apiserver", argv, lambda: client.request("GET", "/readyz").body == "ok")

    def _controller_manager(self) -> None:
        assert self.certs is not None
        c = self.certs.path
        port = processes.free_port()
        kubeconfig = self.certs.kubeconfig("controller-manager", self.server, self.folder)
        self._start("kube-controller-manager", [
            str(binary_path(KUBERNETES, "kube-controller-manager")),
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", f"--client-ca-file={c('ca.crt')}",
            f"--requestheader-client-ca-file={c('front-proxy-ca.crt')}", f"--root-ca-file={c('ca.crt')}",
            f"--service-account-private-key-file={c('sa.key')}", f"--cluster-signing-cert-file={c('ca.crt')}",
            f"--cluster-signing-key-file={c('ca.key')}", "--use-service-account-credentials=true",
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--allocate-node-cidrs=true", f"--cluster-cidr={self.lab.pod_cidr}",
            f"--service-cluster-ip-range={self.lab.service_cidr}", f"--cluster-name={self.lab.cluster_name}",
        ], lambda: _says_ok(f"https://127.0.0.1:{port}/healthz", _insecure_loopback()))

    def _scheduler(self) -> None:
        assert self.certs is not None
        port = processes.free_port()
        kubeconfig = self.certs.kubeconfig("scheduler", self.server, self.folder)
        self._start("kube-scheduler", [
            str(binary_path(KUBERNETES, "kube-scheduler")),
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
        ], lambda: _says_ok(f"https://127.0.0.1:{port}/healthz", _insecure_loopback()))

    def _kwok(self) -> None:
        assert self.certs is not None
        port = processes.free_port()
        kubeconfig = self.certs.kubeconfig("kwok", self.server, self.folder)
        config = kwok.write_config(self.folder / "kwok-stages.yaml")
        self._start("kwok", kwok.argv(binary_path(KWOK, "kwok"), kubeconfig, config, port, KWOK_SELECTOR),
                    lambda: _says_ok(f"http://127.0.0.1:{port}/healthz"))

    def _nodes(self) -> None:
        """The stack's nodes, created through the API; KWOK makes each Ready."""
        assert self.client is not None
        began = time.monotonic()
        for node in self.lab.node_objects():
            self.client.create("/api/v1/nodes", node)
        names = {n.name for n in self.lab.nodes}
        self.client.wait_for("the stack's nodes Ready", "/api/v1/nodes",
                             lambda body: names <= ready_nodes(body), NODES_READY_TIMEOUT)
        self.nodes_ready_seconds = round(time.monotonic() - began, 2)

    # --- up and down ---

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    def start(self) -> ControlPlane:
        """Every component up and healthy and the nodes Ready, or every started one stopped again."""
        began = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.certs = pki.make(self.folder / "pki", self.lab.service_cidr)
        try:
            for step in (self._etcd, self._api_server, self._controller_manager, self._scheduler, self._kwok,
                         self._nodes):
                step()
        except BaseException:
            self.stop()
            raise
        self.total_seconds = round(time.monotonic() - began, 2)
        return self

    def summary(self) -> dict[str, Any]:
        """What came up and how fast (out/e2e/report.json)."""
        return {"stack": self.lab.stack, "start_seconds": dict(self.started),
                "nodes_ready_seconds": self.nodes_ready_seconds, "total_seconds": self.total_seconds,
                "api_server_flags_from_stack": [f"--{name}" for name, _ in self.lab.api_server_args],
                "nodes": {n["metadata"]["name"]: {"taints": n["spec"]["taints"], "allocatable": n["status"]["allocatable"]}
                          for n in self.lab.node_objects()},
                "not_advertised": list(self.lab.unadvertised)}

    def stop(self) -> None:
        while self.components:
            processes.stop(self.components.pop())

    def left_behind(self, pids: list[int]) -> list[int]:
        """Which of `pids` (process groups this control plane started) still have a live process."""
        return [pid for pid in pids if processes.group_members(pid)]

    def log_tails(self) -> str:
        return "\n".join(f"--- {log.name} (last lines) ---\n{log.read_bytes()[-processes.LOG_TAIL_BYTES:].decode(errors='replace')}"
                         for log in sorted(self.logs.glob("*.log")))

    # --- what the checks read besides the API ---

    def etcd_value(self, key: str) -> bytes:
        """The raw value etcd stores at `key` (what reaches the disk), read with the toolchain's etcdctl."""
        result = subprocess.run([str(binary_path(ETCD, "etcdctl")), f"--endpoints={self.etcd_url}", "get", key,
                                 "--print-value-only"], capture_output=True, timeout=ETCDCTL_TIMEOUT, check=False,
                                env={**os.environ, "ETCDCTL_API": "3"})
        if result.returncode != 0:
            raise RuntimeError(f"etcdctl get {key}: {result.stderr.decode(errors='replace')}")
        return result.stdout

    @property
    def audit_log(self) -> Path:
        return local_path(self.moved, hardening.AUDIT_LOG_FILE)


def ready_nodes(node_list: dict[str, Any]) -> set[str]:
    return {n["metadata"]["name"] for n in node_list.get("items", [])
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (n.get("status") or {}).get("conditions") or [])}
