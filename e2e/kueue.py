"""The real Kueue manager (the toolchain's `kueue`, built from sigs.k8s.io/kueue at the release the
program installs) running against the e2e control plane, set up from a stack's own plan:

  CRDs, webhook configurations  the plan's Kueue chart, as rendered; every webhook's and every CRD
                                conversion's clientConfig.service becomes a url on 127.0.0.1 (nothing
                                routes a Service's address to loopback here)
  manager Configuration         the plan's ConfigMap kueue-manager-config, with only where it listens
                                changed (webhook, health and metrics on free loopback ports, the
                                cert dir in the folder) and leader election off (one replica)
  serving certificate           internalCertManagement stays on: Kueue's cert rotator
                                (open-policy-agent/cert-controller) keeps a Secret whose CA and
                                certificate are valid for its DNS name, so the Secret is seeded with a
                                CA and a certificate for that name and for 127.0.0.1, the address the
                                API server dials, and its keys are written to the cert dir as the
                                chart's Secret volume would hold them (the rotator waits for
                                tls.crt there); the rotator injects the CA into the webhooks and CRDs

Kueue runs with the admin kubeconfig (system:masters): the chart's RBAC is not what is checked here.
The visibility API server is turned off (feature gate VisibilityOnDemand): it would listen on a fixed
port of every interface and write to /visibility, and its APIService would need a Service too.
"""

from __future__ import annotations

import base64
import copy
import socket
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.toolchain_versions import KUEUE, binary_path
from e2e import api, dry_run, processes
from render.cluster.objects import Obj

NAMESPACE = "kueue-system"
MANAGER_CONFIG = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
START_TIMEOUT = 120  # s until the manager's readyz answers (its certs are in place then)
OPENSSL_TIMEOUT = 30
CERT_DAYS = "365"  # the rotator renews a certificate with less than 90 days left
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                            timeout=OPENSSL_TIMEOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def seed_certificates(folder: Path, service_dns: str) -> dict[str, bytes]:
    """The Secret's data as cert-controller writes it: an RSA CA (PKCS#1 key, it parses no other)
    named kueue-ca, and a serving certificate for `service_dns` and 127.0.0.1 signed by it."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-traditional", "-out", "ca.key", "2048", cwd=folder)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", CERT_DAYS,
             "-subj", "/O=kueue/CN=kueue-ca", "-addext", "subjectAltName=DNS:kueue-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign", cwd=folder)
    _openssl("genrsa", "-traditional", "-out", "tls.key", "2048", cwd=folder)
    _openssl("req", "-new", "-key", "tls.key", "-out", "tls.csr", "-subj", f"/CN={service_dns}", cwd=folder)
    (folder / "tls.ext").write_text("basicConstraints=critical,CA:FALSE\n"
                                    "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                    "extendedKeyUsage=serverAuth\n"
                                    f"subjectAltName=DNS:{service_dns},IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", CERT_DAYS, "-out", "tls.crt", "-extfile", "tls.ext", cwd=folder)
    return {name: (folder / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}


def _to_loopback(client_config: dict[str, Any], port: int, ca: bytes) -> dict[str, Any]:
    service = client_config.get("service") or {}
    return {"url": f"https://127.0.0.1:{port}{service.get('path') or '/'}", "caBundle": base64.b64encode(ca).decode()}


def manager_config(doc: dict[str, Any], folder: Path, ports: dict[str, int]) -> dict[str, Any]:
    """The program's Configuration with only where the manager listens and its cert dir changed."""
    out = copy.deepcopy(doc)
    out["namespace"] = NAMESPACE
    out.setdefault("webhook", {}).update(host="127.0.0.1", port=ports["webhook"], certDir=str(folder / "certs"))
    out.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{ports['health']}"
    out.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{ports['metrics']}"
    out.setdefault("leaderElection", {})["leaderElect"] = False
    # The visibility API server listens on a fixed port (8082) on every interface and writes its
    # certificate to /visibility on the host; its APIService is not registered here, so it is off.
    out.setdefault("featureGates", {})["VisibilityOnDemand"] = False
    return out


@dataclass
class RealKueue:
    client: api.Client
    kubeconfig: Path
    folder: Path
    made: dry_run.Made = field(default_factory=dry_run.Made)
    component: processes.Component | None = None
    ports: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def start(self, objs: list[Obj]) -> RealKueue:
        """Kueue's CRDs, Secret and webhooks from the plan, then the manager, until it is ready."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ports = {name: processes.free_port() for name in ("webhook", "health", "metrics")}
        by_kind = {(o.kind, o.name): o.body for o in objs}
        cm = by_kind[("ConfigMap", MANAGER_CONFIG)]
        self.config = manager_config(yaml.safe_load(cm["data"][CONFIG_KEY]), self.folder, self.ports)
        certs = self.config["internalCertManagement"]
        service_dns = f"{certs['webhookServiceName']}.{NAMESPACE}.svc"
        data = seed_certificates(self.folder / "seed", service_dns)
        ca = data["ca.crt"]
        dry_run.create_or_replace(self.client, "/api/v1/namespaces", by_kind[("Namespace", NAMESPACE)], self.made)
        crds = []
        for o in objs:
            if o.kind == "CustomResourceDefinition" and o.body["spec"]["group"] == "kueue.x-k8s.io":
                crd = copy.deepcopy(o.body)
                webhook = ((crd["spec"].get("conversion") or {}).get("webhook") or {})
                if "clientConfig" in webhook:
                    webhook["clientConfig"] = _to_loopback(webhook["clientConfig"], self.ports["webhook"], ca)
                crds.append(crd)
        refused = dry_run.establish(self.client, crds, self.made)
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": certs["webhookSecretName"], "namespace": NAMESPACE},
                  "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        response = dry_run.create_or_replace(self.client, f"/api/v1/namespaces/{NAMESPACE}/secrets", secret, self.made)
        if not response.ok:
            refused.append(dry_run.refusal("the webhook Secret", response))
        if refused:
            raise RuntimeError("Kueue's objects were refused: " + "; ".join(refused))
        mounted = Path(self.config["webhook"]["certDir"])
        mounted.mkdir(parents=True, exist_ok=True)
        for name, value in data.items():
            (mounted / name).write_bytes(value)
        self.folder.joinpath("config.yaml").write_text(yaml.safe_dump(self.config))
        self.component = processes.start("kueue", [str(binary_path(KUEUE, "kueue")),
                                                   f"--config={self.folder / 'config.yaml'}",
                                                   f"--kubeconfig={self.kubeconfig}"], self.folder)
        processes.wait_until("the Kueue manager ready", self._ready, START_TIMEOUT, self.component)
        for o in objs:  # after the manager: failurePolicy Fail, and nothing answers before it
            if o.kind in WEBHOOK_KINDS:
                self._webhooks(o.body, ca)
        return self

    def _webhooks(self, body: dict[str, Any], ca: bytes) -> None:
        config = copy.deepcopy(body)
        config["metadata"].pop("namespace", None)
        for hook in config.get("webhooks") or []:
            hook["clientConfig"] = _to_loopback(hook["clientConfig"], self.ports["webhook"], ca)
        plural = body["kind"][0].lower() + body["kind"][1:] + "s"
        response = dry_run.create_or_replace(self.client, f"{ADMISSION}/{plural.lower()}", config, self.made)
        if not response.ok:
            raise RuntimeError(dry_run.refusal(f"{body['kind']} {body['metadata']['name']}", response))

    def _ready(self) -> bool:
        """readyz, and the webhook server listening: the bootstrap manager that makes the certs
        answers readyz on the same port before the real one starts."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['health']}/readyz", timeout=5) as resp:
            if resp.status != 200:
                return False
        with socket.create_connection(("127.0.0.1", self.ports["webhook"]), timeout=5):
            return True

    @property
    def log(self) -> Path:
        return self.folder / "kueue.log"

    def stop(self) -> list[str]:
        """The webhooks first (nothing else in the session may call a stopped server), then the
        manager, then the CRDs and the rest; what is still there after the bounded wait."""
        webhooks = [u for u in self.made.urls if "webhookconfigurations/" in u]
        for url in webhooks:
            self.client.request("DELETE", url)
        if self.component is not None:
            processes.stop(self.component)
            self.component = None
        return self.made.remove(self.client)
