"""kubeadm's JoinConfiguration (kubeadm.k8s.io/v1beta4) as a field schema, for checking the join
documents the program sends without a kubeadm binary.

Transcribed from kubernetes/kubernetes, cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go at commit
1329935739c3aa007d23cb9a4dadfee9d59ff79b (Apache-2.0): every struct a JoinConfiguration reaches,
by its JSON field names; a field without `omitempty` is listed in REQUIRED. The checks after the
schema are kubeadm's own validation of a join (cmd/kubeadm/app/apis/kubeadm/validation/validation.go:
ValidateDiscovery, ValidateDiscoveryBootstrapToken, ValidateToken) and of the pins
(cmd/kubeadm/app/util/pubkeypin: "sha256:" + hex of a SHA-256), plus the Taint effects of core/v1.
"""

from __future__ import annotations

import re
from typing import Any

STRING, BOOL, INT, DURATION = "string", "boolean", "integer", "duration"

ARG = {"name": STRING, "value": STRING}  # Arg
TAINT = {"key": STRING, "value": STRING, "effect": STRING, "timeAdded": STRING}  # corev1.Taint
API_ENDPOINT = {"advertiseAddress": STRING, "bindPort": INT}  # APIEndpoint
NODE_REGISTRATION = {  # NodeRegistrationOptions
    "name": STRING,
    "criSocket": STRING,
    "taints": [TAINT],
    "kubeletExtraArgs": [ARG],
    "ignorePreflightErrors": [STRING],
    "imagePullPolicy": STRING,
}
BOOTSTRAP_TOKEN_DISCOVERY = {  # BootstrapTokenDiscovery
    "token": STRING,
    "apiServerEndpoint": STRING,
    "caCertHashes": [STRING],
    "unsafeSkipCAVerification": BOOL,
}
DISCOVERY = {  # Discovery
    "bootstrapToken": BOOTSTRAP_TOKEN_DISCOVERY,
    "file": {"kubeConfigPath": STRING},  # FileDiscovery
    "tlsBootstrapToken": STRING,
}
JOIN_CONTROL_PLANE = {"localAPIEndpoint": API_ENDPOINT, "certificateKey": STRING}  # JoinControlPlane
TIMEOUTS = {  # Timeouts
    "controlPlaneComponentHealthCheck": DURATION,
    "kubeletHealthCheck": DURATION,
    "kubernetesAPICall": DURATION,
    "etcdAPICall": DURATION,
    "tlsBootstrap": DURATION,
    "discovery": DURATION,
    "upgradeManifests": DURATION,
}
JOIN_CONFIGURATION = {
    "apiVersion": STRING,
    "kind": STRING,
    "dryRun": BOOL,
    "nodeRegistration": NODE_REGISTRATION,
    "caCertPath": STRING,
    "discovery": DISCOVERY,
    "controlPlane": JOIN_CONTROL_PLANE,
    "skipPhases": [STRING],
    "patches": {"directory": STRING},  # Patches
    "timeouts": TIMEOUTS,
}
# Fields whose JSON tag has no omitempty, by the struct that holds them.
REQUIRED: dict[int, tuple[str, ...]] = {
    id(JOIN_CONFIGURATION): ("discovery",),
    id(BOOTSTRAP_TOKEN_DISCOVERY): ("token",),
    id(ARG): ("name", "value"),
    id(TAINT): ("key", "effect"),  # corev1.Taint: value and timeAdded are optional
    id(DISCOVERY["file"]): ("kubeConfigPath",),
}

# bootstraputil.BootstrapTokenRegexp (k8s.io/cluster-bootstrap/token/util)
TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
CERTIFICATE_KEY = re.compile(r"^[0-9a-f]{64}$")  # "a hex encoded string that is an AES key of size 32 bytes"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def _schema_problems(value: Any, schema: Any, path: str) -> list[str]:
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: a list expected, got {type(value).__name__}"]
        return [p for i, v in enumerate(value) for p in _schema_problems(v, schema[0], f"{path}[{i}]")]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: an object expected, got {type(value).__name__}"]
        problems = [f"{path}.{k}: unknown field" for k in value if k not in schema]
        problems += [f"{path}.{k}: required" for k in REQUIRED.get(id(schema), ()) if k not in value]
        return problems + [p for k, v in value.items() if k in schema for p in _schema_problems(v, schema[k], f"{path}.{k}")]
    ok = {
        STRING: isinstance(value, str),
        BOOL: isinstance(value, bool),
        INT: isinstance(value, int) and not isinstance(value, bool),
        DURATION: isinstance(value, str) and bool(_DURATION.fullmatch(value)),
    }[schema]
    return [] if ok else [f"{path}: {schema} expected, got {value!r}"]


def join_problems(doc: dict[str, Any]) -> list[str]:
    """What kubeadm would refuse in a JoinConfiguration, as a list of messages (empty: valid)."""
    problems = _schema_problems(doc, JOIN_CONFIGURATION, "JoinConfiguration")
    if doc.get("apiVersion") != "kubeadm.k8s.io/v1beta4" or doc.get("kind") != "JoinConfiguration":
        problems.append("apiVersion/kind: not kubeadm.k8s.io/v1beta4 JoinConfiguration")
    discovery = doc.get("discovery") or {}
    if ("bootstrapToken" in discovery) == ("file" in discovery):
        problems.append("discovery: exactly one of bootstrapToken and file")
    bt = discovery.get("bootstrapToken")
    if isinstance(bt, dict):
        if not bt.get("apiServerEndpoint"):
            problems.append("discovery.bootstrapToken.apiServerEndpoint: required")
        if not bt.get("caCertHashes") and not bt.get("unsafeSkipCAVerification"):
            problems.append("discovery.bootstrapToken.caCertHashes: token discovery without a CA pin")
        if not TOKEN.match(str(bt.get("token", ""))):
            problems.append("discovery.bootstrapToken.token: not a bootstrap token")
        for pin in bt.get("caCertHashes") or []:
            if not CA_HASH.match(str(pin)):
                problems.append(f"discovery.bootstrapToken.caCertHashes: {pin!r} is not sha256:<64 hex>")
    tls = discovery.get("tlsBootstrapToken")
    if tls is not None and not TOKEN.match(str(tls)):
        problems.append("discovery.tlsBootstrapToken: not a bootstrap token")
    for i, taint in enumerate((doc.get("nodeRegistration") or {}).get("taints") or []):
        if isinstance(taint, dict) and taint.get("effect") not in TAINT_EFFECTS:
            problems.append(f"nodeRegistration.taints[{i}].effect: {taint.get('effect')!r}")
    cp = doc.get("controlPlane")
    if isinstance(cp, dict) and "certificateKey" in cp and not CERTIFICATE_KEY.match(str(cp["certificateKey"])):
        problems.append("controlPlane.certificateKey: not 32 bytes in hex")
    return problems
