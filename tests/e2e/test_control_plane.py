"""The control plane on loopback is the one a lab cluster runs: the pinned version, and the lab
stack's own hardening taking effect in the real API server (its rendered audit policy and
EncryptionConfiguration, e2e/lab_stack.py), and the program's own ValidatingAdmissionPolicy compiled and enforced."""

from __future__ import annotations

import base64
import json
import time
import uuid

from components.lab import hardening
from components.queues import team_admission
from components.toolchain_versions import KUBERNETES
from config.queues import QUEUE_LABEL, QueuePriority

VAP = "/apis/admissionregistration.k8s.io/v1"
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


def _job(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "registry.example.com/trainer:0"}]}}}}


def test_the_programs_team_queue_policy_is_type_checked_and_enforced(client, namespace):
    """The program's own ValidatingAdmissionPolicy (components/queues/team_admission.py), compiled and
    type-checked by the real API server's CEL against batch/v1 Job, and enforced in a team namespace:
    a Job without the queue label, or naming another queue, is refused with the policy's message;
    one naming the namespace's own LocalQueue is created."""
    queue = "team-a-queue"
    client.must("PATCH", f"/api/v1/namespaces/{namespace}",
                {"metadata": {"labels": team_admission.team_namespace_labels(queue, QueuePriority.BATCH)}}, "application/merge-patch+json")
    client.create(f"{VAP}/validatingadmissionpolicies", team_admission.queue_policy())
    client.create(f"{VAP}/validatingadmissionpolicybindings", team_admission.queue_policy_binding([namespace]))
    policy = client.wait_for("the policy type-checked", f"{VAP}/validatingadmissionpolicies/{team_admission.POLICY_NAME}",
                             lambda p: "typeChecking" in (p.get("status") or {}), VAP_TIMEOUT)
    assert policy["status"]["typeChecking"].get("expressionWarnings") is None, policy["status"]
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    refused = None
    for attempt in range(VAP_TIMEOUT * 2):  # the binding takes effect within a moment
        response = client.request("POST", jobs, _job(f"unlabelled-{attempt}", {}))
        if response.status != 201:
            refused = response
            break
        time.sleep(0.5)
    # the messageExpression, naming the namespace's queue, is what the API server answers
    says = f"in namespace {namespace} must carry the label {QUEUE_LABEL}: {queue} (its LocalQueue)"
    assert refused is not None and refused.status == 403 and says in refused.body["message"], refused
    other = client.request("POST", jobs, _job("other-queue", {QUEUE_LABEL: "team-b-queue"}))
    assert other.status == 403 and says in other.body["message"], other
    own = client.request("POST", jobs, _job("own-queue", {QUEUE_LABEL: queue}))
    assert own.status == 201, own.body
