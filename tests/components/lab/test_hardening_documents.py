"""The hardened control plane's documents (components/lab/hardening.py, kubeadm.init_config) against
the API server's, kubeadm's and the kubelet's own types (tests/components/lab/apiserver_types.py),
and the audit policy evaluated the way the API server evaluates it on the requests that matter."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.lab import hardening, kubeadm
from components.monitoring import prometheus_stack_values
from stacks.lab import kubeadm_settings
from tests.components.lab import apiserver_types
from tests.conftest import lab_config

REPO = Path(__file__).resolve().parents[3]
KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes(range(32, 64))).decode()


def _init_docs(**hardening_keys: Any) -> dict[str, dict[str, Any]]:
    cfg = lab_config(hardening=hardening_keys) if hardening_keys else lab_config()
    text = kubeadm.init_config(kubeadm_settings(cfg), cfg.control_planes[0])
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


# ---------------------------------------------------------------------------------------------
# the audit policy


def _level(policy: dict[str, Any], verb: str, *, resource: str = "", subresource: str = "", group: str = "",
           path: str = "", user: str = "alice") -> str:
    """The level of a request: the first rule that matches (apiserver/pkg/audit/policy/checker.go,
    ruleMatches), None when no rule does."""
    for rule in policy["rules"]:
        if rule.get("users") and user not in rule["users"]:
            continue
        if rule.get("verbs") and verb not in rule["verbs"]:
            continue
        if rule.get("resources") or rule.get("namespaces"):
            if not resource or not _resource_matches(rule.get("resources") or [], group, resource, subresource):
                continue
        if rule.get("nonResourceURLs"):
            if resource or not any(spec == "*" or spec == path or (spec.endswith("*") and path.startswith(spec[:-1]))
                                   for spec in rule["nonResourceURLs"]):
                continue
        return str(rule["level"])
    return "None"


def _resource_matches(groups: list[dict[str, Any]], group: str, resource: str, subresource: str) -> bool:
    if not groups:
        return True
    combined = f"{resource}/{subresource}" if subresource else resource
    for gr in groups:
        if gr.get("group", "") != group:
            continue
        names = gr.get("resources") or []
        if not names or any(r in (combined, "*") or (subresource and r in (f"*/{subresource}", f"{resource}/*"))
                            for r in names):
            return True
    return False


def test_the_audit_policy_loads() -> None:
    assert apiserver_types.policy_problems(hardening.audit_policy()) == []


def test_the_policy_checker_refuses_what_the_api_server_refuses() -> None:
    """The checks above can fail: each broken copy of the policy is refused."""
    policy = hardening.audit_policy()
    broken = [
        {**policy, "rules": [{**policy["rules"][0], "level": "Everything"}]},
        {**policy, "omitStages": ["Received"]},
        {**policy, "rules": [{"level": "None", "nonResourceURLs": ["/health*z"]}]},
        {**policy, "rules": [{"level": "None", "nonResourceURLs": ["/healthz"],
                              "resources": [{"group": "", "resources": ["pods"]}]}]},
        {**policy, "rules": [{"level": "None", "resource": "pods"}]},
    ]
    for doc in broken:
        assert apiserver_types.policy_problems(doc), doc


SECRET_LIKE = [("", "secrets"), ("", "configmaps"), ("", "serviceaccounts", "token"),
               ("authentication.k8s.io", "tokenreviews")]
WRITES = ["create", "update", "patch", "delete", "deletecollection"]


@pytest.mark.parametrize("verb", ["get", "list", "watch", *WRITES])
@pytest.mark.parametrize("target", SECRET_LIKE, ids=lambda t: "/".join(x for x in t if x))
def test_secrets_and_configmaps_never_beyond_metadata(verb: str, target: tuple[str, ...]) -> None:
    group, resource, *sub = target
    for user in ("alice", "system:kube-controller-manager", "system:serviceaccount:kube-system:generic"):
        level = _level(hardening.audit_policy(), verb, group=group, resource=resource,
                       subresource=sub[0] if sub else "", user=user)
        assert level == "Metadata", (verb, target, user, level)


@pytest.mark.parametrize(("verb", "resource", "subresource"), [
    ("create", "pods", "exec"), ("get", "pods", "exec"), ("create", "pods", "attach"),
    ("create", "pods", "portforward"), ("create", "nodes", ""), ("patch", "nodes", ""), ("delete", "nodes", ""),
    ("get", "nodes", "proxy"),
])
def test_exec_attach_portforward_and_node_changes_log_their_request_bodies(verb, resource, subresource) -> None:
    assert _level(hardening.audit_policy(), verb, resource=resource, subresource=subresource) == "Request"


@pytest.mark.parametrize("path", ["/healthz", "/healthz/etcd", "/livez", "/livez/ping", "/readyz",
                                  "/readyz/informer-sync", "/version"])
def test_health_reads_are_not_logged(path: str) -> None:
    assert _level(hardening.audit_policy(), "get", path=path) == "None"


def test_everything_else_at_metadata() -> None:
    policy = hardening.audit_policy()
    assert _level(policy, "post", path="/healthz") == "Metadata"  # only reads of health are dropped
    assert _level(policy, "get", path="/metrics") == "Metadata"
    assert _level(policy, "create", resource="pods") == "Metadata"
    assert _level(policy, "create", group="apps", resource="deployments") == "Metadata"
    assert _level(policy, "create", group="example.com", resource="widgets") == "Metadata"
    assert _level(policy, "create", resource="events") == "None"
    assert "RequestResponse" not in {r["level"] for r in policy["rules"]}, "no response bodies anywhere"
    assert policy["omitStages"] == ["RequestReceived"]


# ---------------------------------------------------------------------------------------------
# the EncryptionConfiguration


def test_the_encryption_config_loads_with_one_and_with_two_keys() -> None:
    for keys in ([("key-1", KEY_A)], [("key-2", KEY_B), ("key-1", KEY_A)]):
        doc = hardening.encryption_config(keys)
        assert apiserver_types.encryption_problems(doc) == []
        assert doc["resources"][0]["resources"] == ["secrets"]
        providers = doc["resources"][0]["providers"]
        # The first key of the first provider encrypts; identity last reads what was stored before.
        assert [next(iter(p)) for p in providers] == ["secretbox", "identity"]
        assert [k["name"] for k in providers[0]["secretbox"]["keys"]] == [name for name, _ in keys]


def test_write_unencrypted_puts_identity_first_and_keeps_every_key_for_reading() -> None:
    """The Kubernetes docs' "Decrypt all data": identity first writes plain, the keys after it
    still read; one identity provider only."""
    keys = [("key-2", KEY_B), ("key-1", KEY_A)]
    doc = hardening.encryption_config(keys, write_unencrypted=True)
    assert apiserver_types.encryption_problems(doc) == []
    providers = doc["resources"][0]["providers"]
    assert [next(iter(p)) for p in providers] == ["identity", "secretbox"]
    assert [k["name"] for k in providers[1]["secretbox"]["keys"]] == ["key-2", "key-1"]


def test_the_encryption_checker_refuses_what_the_api_server_refuses() -> None:
    short = base64.b64encode(bytes(16)).decode()
    for doc in (hardening.encryption_config([("key-1", short)]),
                hardening.encryption_config([("key-1", KEY_A), ("key-1", KEY_B)]),
                hardening.encryption_config([("key-1", "not base64!")]),
                hardening.encryption_config([])):
        assert apiserver_types.encryption_problems(doc), doc
    assert hardening.ENCRYPTION_KEY_BYTES in apiserver_types.KEY_BYTES[hardening.ENCRYPTION_PROVIDER]


# ---------------------------------------------------------------------------------------------
# kubeadm's ClusterConfiguration and KubeletConfiguration


def _args(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    api_server = docs["ClusterConfiguration"].get("apiServer", {})
    return {a["name"]: a["value"] for a in api_server.get("extraArgs", [])}


def test_the_api_server_reads_both_files_and_rotates_its_log() -> None:
    docs = _init_docs(auditLog={"maxAgeDays": 7, "maxBackups": 3, "maxSizeMb": 50})
    api_server = docs["ClusterConfiguration"]["apiServer"]
    assert apiserver_types.api_server_problems(api_server) == []
    assert _args(docs) == {
        "audit-policy-file": hardening.AUDIT_POLICY_FILE, "audit-log-path": hardening.AUDIT_LOG_FILE,
        "audit-log-maxage": "7", "audit-log-maxbackup": "3", "audit-log-maxsize": "50",
        "encryption-provider-config": hardening.ENCRYPTION_CONFIG_FILE,
        "encryption-provider-config-automatic-reload": "true",
    }
    # Every file a flag names lies in a host path the static pod mounts; the log's is writable.
    mounts = {v["mountPath"]: v for v in api_server["extraVolumes"]}
    for path in (hardening.AUDIT_POLICY_FILE, hardening.ENCRYPTION_CONFIG_FILE, hardening.AUDIT_LOG_FILE):
        mount = next(m for p, m in mounts.items() if path.startswith(p + "/"))
        assert mount["hostPath"] == mount["mountPath"]
        assert mount["readOnly"] is (path != hardening.AUDIT_LOG_FILE), path


def test_each_feature_turns_off_alone() -> None:
    assert "apiServer" not in _init_docs(auditLog={"enabled": False},
                                         secretsEncryption={"enabled": False})["ClusterConfiguration"]
    no_audit = _args(_init_docs(auditLog={"enabled": False}))
    assert "encryption-provider-config" in no_audit and not any(k.startswith("audit-") for k in no_audit)
    no_encryption = _args(_init_docs(secretsEncryption={"enabled": False}))
    assert "audit-policy-file" in no_encryption and "encryption-provider-config" not in no_encryption


def test_the_kubelet_serves_nothing_without_credentials() -> None:
    kubelet = _init_docs()["KubeletConfiguration"]
    assert apiserver_types.kubelet_problems(kubelet) == []
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["authentication"]["anonymous"] == {"enabled": False}
    assert kubelet["authentication"]["webhook"] == {"enabled": True}
    assert kubelet["authorization"]["mode"] == "Webhook"
    assert kubelet["cgroupDriver"] == "systemd"


def test_the_kubelet_keys_open_what_they_name() -> None:
    kubelet = _init_docs(kubelet={"readOnlyPort": True, "anonymousAuth": True})["KubeletConfiguration"]
    assert apiserver_types.kubelet_problems(kubelet) == []
    assert kubelet["readOnlyPort"] == 10255
    assert kubelet["authentication"]["anonymous"] == {"enabled": True}
    assert kubelet["authorization"]["mode"] == "Webhook", "anonymous requests are still authorised"


def test_nothing_in_the_program_uses_the_read_only_port(upstream_dir: Path) -> None:
    """Prometheus scrapes the kubelet over HTTPS (10250) with its ServiceAccount token: the
    kube-prometheus-stack default, which the program's values leave alone; no file names 10255."""
    upstream = yaml.safe_load((upstream_dir / "kube-prometheus-stack" / "values.yaml").read_text())
    assert upstream["kubelet"]["serviceMonitor"]["https"] is True
    ours = prometheus_stack_values(lab_config().monitoring)
    assert ours.get("kubelet", {}).get("serviceMonitor", {}).get("https", True) is True
    mentions = []
    for folder in ("components", "stacks", "render", "workloads"):
        for dirpath, _dirs, files in os.walk(REPO / folder):
            for name in files:
                path = Path(dirpath, name)
                if path.suffix in (".py", ".sh", ".yaml", ".json") and path.name != "hardening.py" \
                        and "10255" in path.read_text(errors="replace"):
                    mentions.append(str(path.relative_to(REPO)))
    assert mentions == []
