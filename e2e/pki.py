"""A throwaway PKI for one control plane on loopback, made with the openssl CLI (the venv has no
`cryptography`): the certificates kubeadm makes (cmd/kubeadm/app/phases/certs in k8s.io/kubernetes
v1.34.2: the cluster CA, the API server's serving and kubelet-client certificates, the front-proxy
CA and client, the service-account key pair) and one client certificate per component that talks
to the API server, each with the user and groups kubeadm gives it. ECDSA P-256 keys: quick to make,
and accepted by every component (the service-account tokens are then ES256). Valid one day.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

OPENSSL_TIMEOUT = 30  # seconds per openssl call
DAYS = "1"

# user (CN) and groups (O) per client, as kubeadm writes them into its kubeconfigs
CLIENTS = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    # KWOK writes node and pod status for every fake node: what kwokctl's own cluster gives it.
    "kwok": ("kwok-controller", ("system:masters",)),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("kubeadm:cluster-admins",)),
}


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                            timeout=OPENSSL_TIMEOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _subject(cn: str, groups: tuple[str, ...] = ()) -> str:
    return "".join(f"/O={g}" for g in groups) + f"/CN={cn}"


def _ca(folder: Path, name: str, cn: str) -> None:
    _openssl("req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", DAYS, "-subj", _subject(cn),
             cwd=folder)


def _signed(folder: Path, name: str, ca: str, subject: str, extensions: list[str]) -> None:
    _openssl("req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=folder)
    (folder / f"{name}.ext").write_text("\n".join(["basicConstraints=critical,CA:FALSE",
                                                   "keyUsage=critical,digitalSignature,keyEncipherment",
                                                   *extensions]) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", DAYS, "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=folder)


@dataclass(frozen=True)
class Pki:
    folder: Path

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def kubeconfig(self, client: str, server: str, into: Path) -> Path:
        """A kubeconfig for `client` (a key of CLIENTS) that trusts the cluster CA."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": client,
            "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": self.path("ca.crt")}}],
            "users": [{"name": client, "user": {"client-certificate": self.path(f"{client}.crt"),
                                                "client-key": self.path(f"{client}.key")}}],
            "contexts": [{"name": client, "context": {"cluster": "e2e", "user": client}}],
        }
        path = into / f"{client}.kubeconfig"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path


def make(folder: Path, service_cidr: str) -> Pki:
    """Every file the control plane reads, in `folder`. The serving certificate names loopback and the
    in-cluster names of the API (the first address of `service_cidr`, as kubeadm's certificate does)."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca", "kubernetes")
    _ca(folder, "front-proxy-ca", "front-proxy-ca")
    service_ip = next(ipaddress.ip_network(service_cidr).hosts())
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    san = ",".join([*(f"DNS:{n}" for n in names), "IP:127.0.0.1", f"IP:{service_ip}"])
    _signed(folder, "apiserver", "ca", _subject("kube-apiserver"),
            ["extendedKeyUsage=serverAuth", f"subjectAltName={san}"])
    for client, (user, groups) in CLIENTS.items():
        _signed(folder, client, "ca", _subject(user, groups), ["extendedKeyUsage=clientAuth"])
    _signed(folder, "front-proxy-client", "front-proxy-ca", _subject("front-proxy-client"),
            ["extendedKeyUsage=clientAuth"])
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=folder)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)
    return Pki(folder)
