"""The control plane on loopback is the one a lab cluster runs: the pinned version, and the lab
stack's own hardening taking effect in the real API server (its rendered audit policy and
EncryptionConfiguration, e2e/lab_stack.py), and a ValidatingAdmissionPolicy enforced."""

from __future__ import annotations

import base64
import json
import time
import uuid

from components.lab import hardening
from components.toolchain_versions import KUBERNETES

VAP_TIMEOUT = 60  # a new policy is enforced once the API server has compiled it


def test_every_component_is_healthy_at_the_pinned_version(control_plane, client):
    assert set(control_plane.started) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    assert all(c.alive() for c in control_plane.components)
    assert client.request("GET", "/readyz").body == "ok"
    assert client.get("/version")["gitVersion"] == KUBERNETES.version


def _secret(client, namespace: str, value: str) -> str:
    name = f"s-{uuid.uuid4().hex[:6]}"
    client.create(f"/api/v1/namespaces/{namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {"token": base64.b64encode(value.encode()).decode()}})
    return name


def test_secrets_are_encrypted_in_etcd_with_the_stacks_provider_and_first_key(control_plane, client, namespace):
    """What reaches etcd is the EncryptionConfiguration's first provider (secretbox) under its first
    key's name, never the plain value; the API still reads it back."""
    value = f"plain-{uuid.uuid4().hex}"
    name = _secret(client, namespace, value)
    raw = control_plane.etcd_value(f"/registry/secrets/{namespace}/{name}")
    first_key = control_plane.lab.encryption_key_names[0]
    assert raw.startswith(f"k8s:enc:{hardening.ENCRYPTION_PROVIDER}:v1:{first_key}:".encode()), raw[:60]
    assert value.encode() not in raw
    read = client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    assert base64.b64decode(read["data"]["token"]).decode() == value


def test_config_maps_are_not_encrypted(control_plane, client, namespace):
    """The EncryptionConfiguration names Secrets only: a ConfigMap is stored as it is sent (which
    shows the prefix above comes from the configuration, not from etcd or the store)."""
    client.create(f"/api/v1/namespaces/{namespace}/configmaps",
                  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"k": "v"}})
    assert not control_plane.etcd_value(f"/registry/configmaps/{namespace}/plain").startswith(b"k8s:enc:")


def _audit_events(control_plane) -> list[dict]:
    return [json.loads(line) for line in control_plane.audit_log.read_text().splitlines() if line.strip()]


def test_the_audit_policy_sets_each_requests_level(control_plane, client, namespace):
    """The lab's policy at work: a Secret's create at Metadata (no body: it holds the secret), a
    Node's at Request (with its body), health reads not logged, RequestReceived omitted."""
    name = _secret(client, namespace, "audited")
    deadline = time.monotonic() + 30  # the log backend writes as it goes; bounded in case it does not
    secret_events: list[dict] = []
    while time.monotonic() < deadline and not secret_events:
        events = _audit_events(control_plane)
        secret_events = [e for e in events if e.get("verb") == "create"
                         and (e.get("objectRef") or {}).get("resource") == "secrets"
                         and (e.get("objectRef") or {}).get("name") == name]
        time.sleep(0.5)
    assert secret_events, "no audit event for the Secret's create"
    assert {e["level"] for e in secret_events} == {"Metadata"}
    assert all("requestObject" not in e for e in secret_events)
    node_creates = [e for e in events if e.get("verb") == "create" and (e.get("objectRef") or {}).get("resource") == "nodes"]
    assert node_creates and {e["level"] for e in node_creates} == {"Request"}
    assert all("requestObject" in e for e in node_creates)
    assert not [e for e in events if e.get("requestURI", "").startswith(("/readyz", "/healthz", "/livez"))]
    assert {e["stage"] for e in events} <= {"ResponseStarted", "ResponseComplete", "Panic"}


def test_a_validating_admission_policy_is_enforced(client, namespace):
    """ValidatingAdmissionPolicy is served and enforced (GA, on by default in 1.34): a policy with a
    Deny binding refuses what its CEL expression rejects, and lets the rest through."""
    policy = f"no-forbidden-{namespace}"
    client.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "validations": [{"expression": "!has(object.data) || !('forbidden' in object.data)",
                                  "message": "forbidden key"}]}})
    client.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    deadline = time.monotonic() + VAP_TIMEOUT
    refused = None
    for attempt in range(VAP_TIMEOUT * 2):
        response = client.request("POST", path, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": f"bad-{attempt}"}, "data": {"forbidden": "x"}})
        if response.status == 422:
            refused = response
            break
        assert response.status == 201, response.body
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert refused is not None, "the policy was never enforced"
    assert "forbidden key" in refused.body["message"] and policy in refused.body["message"]
    ok = client.request("POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"},
                                       "data": {"allowed": "x"}})
    assert ok.status == 201, ok.body
