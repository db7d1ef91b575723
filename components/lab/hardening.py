"""The control plane's hardened defaults as documents (config/hardening.py says which are on).

  audit_policy()          the API server's audit policy (audit.k8s.io/v1 Policy)
  encryption_config()     the EncryptionConfiguration of Secrets (apiserver.config.k8s.io/v1)
  api_server()            kubeadm ClusterConfiguration.apiServer: the flags that read both files
                          and write the audit log, and the host paths the static pod mounts
  kubelet_access()        the KubeletConfiguration fields that close the read-only port and refuse
                          anonymous requests

The two files live on every control plane under CONFIG_DIR (written before kubeadm init or join by
components/lab/hardening_files.py); kubeadm puts the flags and mounts into the API server's static
pod on each. Does not manage: a KMS provider (the key is a local one, kept in Pulumi state as a
secret and on the control planes' disks, root only), or shipping the audit log off the host.
"""

from __future__ import annotations

from typing import Any

from config.hardening import Hardening, KubeletAccess

CONFIG_DIR = "/etc/kubernetes/gpu-cluster"
AUDIT_POLICY_FILE = f"{CONFIG_DIR}/audit-policy.yaml"
ENCRYPTION_CONFIG_FILE = f"{CONFIG_DIR}/encryption-config.yaml"
AUDIT_LOG_DIR = "/var/log/kubernetes/audit"
AUDIT_LOG_FILE = f"{AUDIT_LOG_DIR}/audit.log"
# secretbox (XSalsa20 and Poly1305, a 32-byte key): the strongest of the local providers in the
# Kubernetes docs' table ("Encrypting Confidential Data at Rest"): aescbc is rated weak (padding
# oracles), aesgcm must be rotated every 200k writes, which nothing here automates.
ENCRYPTION_PROVIDER = "secretbox"
ENCRYPTION_KEY_BYTES = 32
KUBELET_READ_ONLY_PORT = 10255  # the kubelet's historical read-only port, served only when asked for

# Reads of the health and version endpoints: load balancers and probes call them every few seconds.
_HEALTH_URLS = ["/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*", "/version", "/version/"]
_READ = ["get", "list", "watch"]


def audit_policy() -> dict[str, Any]:
    """The audit policy: the first rule that matches a request sets its level.

    Modelled on the Kubernetes docs' example policy (audit-policy.yaml in "Auditing") and GKE's
    (configure-helper.sh, create-master-audit-policy): Secrets, ConfigMaps and token reviews never
    beyond Metadata (their bodies hold the secrets), the bodies of exec/attach/port-forward and of
    node changes at Request, health reads not at all, everything else at Metadata. The stage
    RequestReceived is dropped: every request also logs ResponseComplete, with more in it.
    """
    rules: list[dict[str, Any]] = [
        {"level": "None", "verbs": ["get"], "nonResourceURLs": _HEALTH_URLS},
        # Events are a stream of their own (kubectl get events); logging their writes doubles it.
        {"level": "None", "resources": [{"group": "", "resources": ["events"]},
                                        {"group": "events.k8s.io", "resources": ["events"]}]},
        {"level": "Metadata", "resources": [
            {"group": "", "resources": ["secrets", "configmaps", "serviceaccounts/token"]},
            {"group": "authentication.k8s.io", "resources": ["tokenreviews"]},
        ]},
        {"level": "Request", "resources": [
            {"group": "", "resources": ["pods/exec", "pods/attach", "pods/portforward", "nodes", "nodes/proxy"]},
        ]},
        {"level": "Metadata"},
    ]
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}


def encryption_config(keys: list[tuple[str, str]], write_unencrypted: bool = False) -> dict[str, Any]:
    """Secrets encrypted with the first of `keys` (name, base64 of 32 bytes); the others, and
    identity last, only read what was written before (plain Secrets from before encryption).

    `write_unencrypted`: identity first, so new writes are plain and the keys only read (the
    Kubernetes docs' "Decrypt all data": the first provider writes, every provider reads)."""
    secretbox = {ENCRYPTION_PROVIDER: {"keys": [{"name": name, "secret": secret} for name, secret in keys]}}
    providers = [{"identity": {}}, secretbox] if write_unencrypted else [secretbox, {"identity": {}}]
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": providers}],
    }


def _arg(name: str, value: str | int) -> dict[str, str]:
    return {"name": name, "value": str(value)}


def api_server(settings: Hardening) -> dict[str, Any]:
    """ClusterConfiguration.apiServer (kubeadm v1beta4: extraArgs a list of {name, value}); {} when
    neither the audit log nor encryption is on."""
    args: list[dict[str, str]] = []
    volumes: list[dict[str, Any]] = []
    audit, encryption = settings.audit_log, settings.secrets_encryption
    if audit.enabled:
        args += [_arg("audit-policy-file", AUDIT_POLICY_FILE), _arg("audit-log-path", AUDIT_LOG_FILE),
                 _arg("audit-log-maxage", audit.max_age_days), _arg("audit-log-maxbackup", audit.max_backups),
                 _arg("audit-log-maxsize", audit.max_size_mb)]
        volumes.append({"name": "audit-log", "hostPath": AUDIT_LOG_DIR, "mountPath": AUDIT_LOG_DIR,
                        "readOnly": False, "pathType": "DirectoryOrCreate"})
    if encryption.enabled:
        # The API server re-reads the file when it changes: a key rotation needs no restart.
        args += [_arg("encryption-provider-config", ENCRYPTION_CONFIG_FILE),
                 _arg("encryption-provider-config-automatic-reload", "true")]
    if not args:
        return {}
    volumes.insert(0, {"name": "gpu-cluster-config", "hostPath": CONFIG_DIR, "mountPath": CONFIG_DIR,
                       "readOnly": True, "pathType": "DirectoryOrCreate"})
    return {"extraArgs": args, "extraVolumes": volumes}


def kubelet_access(access: KubeletAccess) -> dict[str, Any]:
    """KubeletConfiguration fields: set explicitly either way, so neither a kubelet default nor a
    kubeadm default decides. Requests are authenticated by client certificate or, through the API
    server, by bearer token (webhook), and authorised by the API server (Webhook)."""
    return {
        "readOnlyPort": KUBELET_READ_ONLY_PORT if access.read_only_port else 0,
        "authentication": {
            "anonymous": {"enabled": access.anonymous_auth},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
    }
