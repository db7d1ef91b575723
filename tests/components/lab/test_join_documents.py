"""What a joining host and the API server receive, checked against upstream definitions:

  - the JoinConfiguration (worker, GPU worker, control plane; filled and as the offline template)
    against kubeadm's v1beta4 types and join validation (tests/components/lab/kubeadm_v1beta4.py);
  - the bootstrap token Secret against Kubernetes' own schema (kubernetes-validate, strict) and the
    rules of kubernetes.io "Authenticating with Bootstrap Tokens";
  - the join token id: the public half, stable per stack.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import kubernetes_validate
import pytest
import yaml

from components import versions
from components.lab import kubeadm
from components.lab.node_join import (
    BOOTSTRAP_TOKEN_PREFIX,
    BOOTSTRAP_TOKEN_TYPE,
    JOIN_TOKEN_TTL,
    bootstrap_token_data,
    join_token_id,
)
from stacks.lab import kubeadm_settings
from tests.components.lab import kubeadm_v1beta4
from tests.conftest import host, lab_config

TOKEN = "q78jfy.0123456789abcdef"
CA_HASH = "sha256:" + "0f" * 32
CERT_KEY = "a1" * 32

CFG = lab_config(
    hosts=[
        host("cp-1", "192.0.2.10", "control-plane"),
        host("gpu-1", "192.0.2.11", gpus=8),
        host("cpu-1", "192.0.2.12"),
        host("cp-2", "192.0.2.20", "control-plane", gpus=1),
        host("cp-3", "192.0.2.30", "control-plane"),
    ],
    controlPlaneEndpoint="k8s-api.lab.example:6443",
)
HOSTS = {h.name: h for h in CFG.hosts}


def _join(name: str) -> dict:
    h = HOSTS[name]
    key = CERT_KEY if h.role.value == "control-plane" else None
    (doc,) = yaml.safe_load_all(kubeadm.join_config(kubeadm_settings(CFG), h, TOKEN, CA_HASH, key))
    return doc


@pytest.mark.parametrize("name", ["gpu-1", "cpu-1", "cp-2"])
def test_join_configuration_is_valid_kubeadm_v1beta4(name):
    doc = _join(name)
    assert kubeadm_v1beta4.join_problems(doc) == []
    bt = doc["discovery"]["bootstrapToken"]
    assert bt == {"apiServerEndpoint": "k8s-api.lab.example:6443", "token": TOKEN, "caCertHashes": [CA_HASH]}
    assert doc["nodeRegistration"]["name"] == name
    assert ("controlPlane" in doc) == (name == "cp-2")
    if name == "cp-2":
        assert doc["controlPlane"] == {"localAPIEndpoint": {"advertiseAddress": "192.0.2.20", "bindPort": 6443},
                                       "certificateKey": CERT_KEY}


@pytest.mark.parametrize("name", ["gpu-1", "cp-2"])
def test_join_template_is_the_same_document_with_placeholders(name):
    h = HOSTS[name]
    (template,) = yaml.safe_load_all(kubeadm.join_config_template(kubeadm_settings(CFG), h))
    filled = _join(name)
    assert template["discovery"]["bootstrapToken"]["token"] == kubeadm.TOKEN_PLACEHOLDER
    assert template["discovery"]["bootstrapToken"]["caCertHashes"] == [kubeadm.CA_HASH_PLACEHOLDER]
    template["discovery"]["bootstrapToken"].update(token=TOKEN, caCertHashes=[CA_HASH])
    if name == "cp-2":
        template["controlPlane"]["certificateKey"] = CERT_KEY
    assert template == filled
    # The schema alone (placeholders are strings) holds for the template too.
    assert not [p for p in kubeadm_v1beta4.join_problems(template) if "unknown field" in p or "expected" in p]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["discovery"]["bootstrapToken"].update(token="abcdef.None"), "not a bootstrap token"),
        (lambda d: d["discovery"]["bootstrapToken"].update(caCertHashes=[]), "without a CA pin"),
        (lambda d: d["discovery"]["bootstrapToken"].update(caCertHashes=["sha256:abc"]), "is not sha256"),
        (lambda d: d["discovery"]["bootstrapToken"].pop("apiServerEndpoint"), "apiServerEndpoint: required"),
        (lambda d: d["discovery"].update(timeout="5m"), "discovery.timeout: unknown field"),  # v1beta3's, moved
        (lambda d: d["nodeRegistration"]["taints"].append({"key": "x", "effect": "Never"}), "effect"),
    ],
    ids=["token", "no-pin", "short-pin", "no-endpoint", "v1beta3-field", "taint-effect"],
)
def test_the_kubeadm_schema_catches_what_kubeadm_refuses(change, problem):
    doc = _join("gpu-1")
    change(doc)
    assert any(problem in p for p in kubeadm_v1beta4.join_problems(doc)), kubeadm_v1beta4.join_problems(doc)


@pytest.mark.parametrize("value", [TOKEN, "abcdef.0123456789abcdef", "ABCDEF.0123456789abcdef", "abcdef0123456789abcdef",
                                   "abcde.0123456789abcdef", CA_HASH, "sha256:" + "0f" * 31, CERT_KEY])
def test_the_programs_patterns_agree_with_kubeadms(value):
    assert bool(kubeadm.TOKEN_PATTERN.fullmatch(value)) == bool(kubeadm_v1beta4.TOKEN.match(value))
    assert bool(kubeadm.CA_HASH_PATTERN.fullmatch(value)) == bool(kubeadm_v1beta4.CA_HASH.match(value))
    assert bool(kubeadm.CERTIFICATE_KEY_PATTERN.fullmatch(value)) == bool(kubeadm_v1beta4.CERTIFICATE_KEY.match(value))


# ---------------------------------------------------------------------------------------------
# the bootstrap token Secret

ISSUED = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)


def _secret(token_id: str = "q78jfy", token_secret: str = "0123456789abcdef") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": BOOTSTRAP_TOKEN_PREFIX + token_id, "namespace": "kube-system"},
        "type": BOOTSTRAP_TOKEN_TYPE,
        "stringData": bootstrap_token_data(token_id, token_secret, ISSUED + JOIN_TOKEN_TTL),
    }


@pytest.mark.parametrize("minor", versions.KUBERNETES_SUPPORTED_MINORS)
def test_token_secret_is_a_valid_secret(minor):
    try:
        used = kubernetes_validate.validate(_secret(), minor, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"bootstrap token Secret invalid for {minor}: {err}")
    # validate() silently falls back to the newest older schema; insist on the exact minor.
    assert used == minor
    # ... and it is a strict check: a misspelt field fails.
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**_secret(), "stringdata": {}}, minor, strict=True)


def test_token_secret_follows_the_bootstrap_token_rules():
    secret = _secret()
    data = secret["stringData"]
    # kubernetes.io, Authenticating with Bootstrap Tokens: "Bootstrap Token Secret Format"
    assert secret["metadata"] == {"name": "bootstrap-token-q78jfy", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert re.fullmatch(r"[a-z0-9]{6}", data["token-id"]) and secret["metadata"]["name"].endswith(data["token-id"])
    assert re.fullmatch(r"[a-z0-9]{16}", data["token-secret"])
    assert kubeadm.TOKEN_PATTERN.fullmatch(f"{data['token-id']}.{data['token-secret']}")
    # "an absolute UTC time using RFC3339"
    assert data["expiration"] == "2026-11-22T12:00:00Z"
    assert datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) == ISSUED + timedelta(hours=2)
    assert data["usage-bootstrap-authentication"] == "true"  # TLS bootstrap of the kubelet
    assert data["usage-bootstrap-signing"] == "true"  # cluster-info is signed for this token's discovery
    # Extra groups must start with system:bootstrappers:; this is the one kubeadm binds node bootstrap to.
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert set(data) == {"token-id", "token-secret", "expiration", "usage-bootstrap-authentication",
                         "usage-bootstrap-signing", "auth-extra-groups", "description"}


def test_token_expiry_is_written_in_utc():
    later = datetime(2026, 11, 22, 19, 0, 0, tzinfo=UTC).astimezone(ZoneInfo("Asia/Tokyo"))
    assert bootstrap_token_data("q78jfy", "0123456789abcdef", later)["expiration"] == "2026-11-22T19:00:00Z"


def test_join_token_id_is_stable_per_stack():
    assert join_token_id("gpu-cluster", "lab") == join_token_id("gpu-cluster", "lab")
    assert join_token_id("gpu-cluster", "lab") != join_token_id("gpu-cluster", "lab-2")
    for stack in ("lab", "prod", "a" * 100, "ünïcode"):
        assert re.fullmatch(r"[a-z0-9]{6}", join_token_id("gpu-cluster", stack))
