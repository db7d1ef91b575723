"""The documents of the lab's hardened control plane held to the API server's, kubeadm's and the
kubelet's own types and validation, without the binaries (the project copies no upstream source:
each struct below is its JSON field names and enums, transcribed, with where it comes from).

  audit.k8s.io/v1 Policy: kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/apis/audit/v1/types.go
    at commit 0a40c4e8a5678c0e8f4d01291875b754b0fc76fa (Policy, PolicyRule, GroupResources, Level,
    Stage), and what apiserver/pkg/apis/audit/validation/validation.go refuses (a rule with both
    resources and nonResourceURLs, resourceNames without resources, a non-resource URL not starting
    with "/" or with "*" anywhere but at its end, an unknown level or stage).
  apiserver.config.k8s.io/v1 EncryptionConfiguration: k8s.io/apiserver pkg/apis/config/v1/types.go
    (moved to pkg/apis/apiserver/v1/types_encryption.go in 1.28 with the same JSON fields, KMS's
    apiVersion added), and validation_encryption.go: resources and providers not empty, exactly one
    provider type per entry, keys not empty with unique names, secrets base64 of 32 bytes for
    secretbox and aescbc, 16, 24 or 32 for aesgcm.
  kubeadm.k8s.io/v1beta4 ClusterConfiguration.apiServer: cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go
    (APIServer, ControlPlaneComponent, Arg, HostPathMount; name, hostPath and mountPath without
    omitempty) and core/v1 HostPathType's values.
  kubelet.config.k8s.io/v1beta1 KubeletConfiguration: staging/src/k8s.io/kubelet/config/v1beta1/types.go
    (KubeletAuthentication, KubeletAuthorization and their parts; readOnlyPort an int32 that the
    kubelet's validation holds to 0-65535; authorization modes AlwaysAllow and Webhook).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

STRING, BOOL, INT, DURATION, OBJECT = "string", "boolean", "integer", "duration", "object"
REQUIRED = "__required__"  # the struct's fields whose JSON tag has no omitempty / that must be set

AUDIT_LEVELS = ("None", "Metadata", "Request", "RequestResponse")
AUDIT_STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
GROUP_RESOURCES = {"group": STRING, "resources": [STRING], "resourceNames": [STRING]}
POLICY_RULE = {
    REQUIRED: ("level",),
    "level": STRING, "users": [STRING], "userGroups": [STRING], "verbs": [STRING],
    "resources": [GROUP_RESOURCES], "namespaces": [STRING], "nonResourceURLs": [STRING],
    "omitStages": [STRING], "omitManagedFields": BOOL,
}
POLICY = {
    REQUIRED: ("apiVersion", "kind", "rules"),
    "apiVersion": STRING, "kind": STRING, "metadata": OBJECT,
    "rules": [POLICY_RULE], "omitStages": [STRING], "omitManagedFields": BOOL,
}

KEY = {REQUIRED: ("name", "secret"), "name": STRING, "secret": STRING}
KEYS = {REQUIRED: ("keys",), "keys": [KEY]}
KMS = {REQUIRED: ("name",), "apiVersion": STRING, "name": STRING, "cachesize": INT, "endpoint": STRING,
       "timeout": DURATION}
PROVIDER = {"aesgcm": KEYS, "aescbc": KEYS, "secretbox": KEYS, "identity": {}, "kms": KMS}
RESOURCE_CONFIGURATION = {REQUIRED: ("resources", "providers"), "resources": [STRING], "providers": [PROVIDER]}
ENCRYPTION_CONFIGURATION = {
    REQUIRED: ("apiVersion", "kind", "resources"),
    "apiVersion": STRING, "kind": STRING, "resources": [RESOURCE_CONFIGURATION],
}
KEY_BYTES = {"secretbox": (32,), "aescbc": (32,), "aesgcm": (16, 24, 32)}

ARG = {REQUIRED: ("name", "value"), "name": STRING, "value": STRING}
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
HOST_PATH_MOUNT = {REQUIRED: ("name", "hostPath", "mountPath"), "name": STRING, "hostPath": STRING,
                   "mountPath": STRING, "readOnly": BOOL, "pathType": STRING}
ENV_VAR = {REQUIRED: ("name",), "name": STRING, "value": STRING, "valueFrom": OBJECT}
API_SERVER = {"extraArgs": [ARG], "extraVolumes": [HOST_PATH_MOUNT], "extraEnvs": [ENV_VAR], "certSANs": [STRING]}

KUBELET_AUTHENTICATION = {
    "x509": {"clientCAFile": STRING},
    "webhook": {"enabled": BOOL, "cacheTTL": DURATION},
    "anonymous": {"enabled": BOOL},
}
KUBELET_AUTHORIZATION = {"mode": STRING, "webhook": {"cacheAuthorizedTTL": DURATION, "cacheUnauthorizedTTL": DURATION}}
KUBELET_AUTHORIZATION_MODES = ("AlwaysAllow", "Webhook")


def schema_problems(value: Any, schema: Any, path: str) -> list[str]:
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: a list expected, got {type(value).__name__}"]
        return [p for i, v in enumerate(value) for p in schema_problems(v, schema[0], f"{path}[{i}]")]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: an object expected, got {type(value).__name__}"]
        problems = [f"{path}.{k}: unknown field" for k in value if k not in schema or k == REQUIRED]
        problems += [f"{path}.{k}: required" for k in schema.get(REQUIRED, ()) if k not in value]
        return problems + [p for k, v in value.items() if k in schema and k != REQUIRED
                           for p in schema_problems(v, schema[k], f"{path}.{k}")]
    ok = {
        STRING: isinstance(value, str),
        BOOL: isinstance(value, bool),
        INT: isinstance(value, int) and not isinstance(value, bool),
        DURATION: isinstance(value, str),
        OBJECT: isinstance(value, dict),
    }[schema]
    return [] if ok else [f"{path}: {schema} expected, got {value!r}"]


def _url_problem(url: str) -> str | None:
    if url == "*":
        return None
    if not url.startswith("/"):
        return "must start with /"
    if "*" in url[:-1]:
        return "* only as the last character"
    return None


def policy_problems(doc: dict[str, Any]) -> list[str]:
    """What the API server refuses in an audit policy file (empty: it loads)."""
    problems = schema_problems(doc, POLICY, "Policy")
    if (doc.get("apiVersion"), doc.get("kind")) != ("audit.k8s.io/v1", "Policy"):
        problems.append("apiVersion/kind: not audit.k8s.io/v1 Policy")
    problems += [f"omitStages: {s!r}" for s in doc.get("omitStages") or [] if s not in AUDIT_STAGES]
    for i, rule in enumerate(doc.get("rules") or []):
        if not isinstance(rule, dict):
            continue
        if rule.get("level") not in AUDIT_LEVELS:
            problems.append(f"rules[{i}].level: {rule.get('level')!r} is not one of {AUDIT_LEVELS}")
        problems += [f"rules[{i}].omitStages: {s!r}" for s in rule.get("omitStages") or [] if s not in AUDIT_STAGES]
        if rule.get("resources") and rule.get("nonResourceURLs"):
            problems.append(f"rules[{i}]: rules cannot apply to both regular resources and non-resource URLs")
        for url in rule.get("nonResourceURLs") or []:
            if why := _url_problem(str(url)):
                problems.append(f"rules[{i}].nonResourceURLs: {url!r}: {why}")
        for j, group in enumerate(rule.get("resources") or []):
            if isinstance(group, dict) and group.get("resourceNames") and not group.get("resources"):
                problems.append(f"rules[{i}].resources[{j}]: resourceNames without resources")
    return problems


def _key_length(secret: str) -> int | None:
    try:
        return len(base64.b64decode(secret, validate=True))
    except (binascii.Error, ValueError):
        return None


def encryption_problems(doc: dict[str, Any]) -> list[str]:
    """What the API server refuses in an --encryption-provider-config file (empty: it loads)."""
    problems = schema_problems(doc, ENCRYPTION_CONFIGURATION, "EncryptionConfiguration")
    if (doc.get("apiVersion"), doc.get("kind")) != ("apiserver.config.k8s.io/v1", "EncryptionConfiguration"):
        problems.append("apiVersion/kind: not apiserver.config.k8s.io/v1 EncryptionConfiguration")
    if not doc.get("resources"):
        problems.append("resources: at least one")
    for i, entry in enumerate(doc.get("resources") or []):
        if not entry.get("resources"):
            problems.append(f"resources[{i}].resources: at least one")
        if not entry.get("providers"):
            problems.append(f"resources[{i}].providers: at least one")
        for j, provider in enumerate(entry.get("providers") or []):
            if len(provider) != 1:
                problems.append(f"resources[{i}].providers[{j}]: exactly one provider type, got {sorted(provider)}")
            for kind, body in provider.items():
                if kind not in KEY_BYTES:
                    continue
                keys = (body or {}).get("keys") or []
                if not keys:
                    problems.append(f"resources[{i}].providers[{j}].{kind}.keys: at least one")
                names = [k.get("name") for k in keys]
                if len(set(names)) != len(names) or not all(names):
                    problems.append(f"resources[{i}].providers[{j}].{kind}.keys: names must be set and unique")
                for k in keys:
                    if _key_length(str(k.get("secret"))) not in KEY_BYTES[kind]:
                        problems.append(f"{kind} key {k.get('name')!r}: not base64 of {KEY_BYTES[kind]} bytes")
    return problems


def api_server_problems(api_server: dict[str, Any]) -> list[str]:
    """kubeadm v1beta4's checks of ClusterConfiguration.apiServer that these fields reach."""
    problems = schema_problems(api_server, API_SERVER, "apiServer")
    names = [a.get("name") for a in api_server.get("extraArgs") or []]
    problems += [f"extraArgs: {n!r} twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for v in api_server.get("extraVolumes") or []:
        if v.get("pathType", "") not in HOST_PATH_TYPES:
            problems.append(f"extraVolumes {v.get('name')}: pathType {v.get('pathType')!r}")
        if not str(v.get("hostPath", "")).startswith("/") or not str(v.get("mountPath", "")).startswith("/"):
            problems.append(f"extraVolumes {v.get('name')}: paths must be absolute")
    return problems


def kubelet_problems(doc: dict[str, Any]) -> list[str]:
    """The kubelet's types and validation for the access fields of a KubeletConfiguration."""
    problems = schema_problems(doc.get("authentication", {}), KUBELET_AUTHENTICATION, "authentication")
    problems += schema_problems(doc.get("authorization", {}), KUBELET_AUTHORIZATION, "authorization")
    port = doc.get("readOnlyPort", 0)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        problems.append(f"readOnlyPort: {port!r} is not 0-65535")
    mode = (doc.get("authorization") or {}).get("mode", "Webhook")
    if mode not in KUBELET_AUTHORIZATION_MODES:
        problems.append(f"authorization.mode: {mode!r}")
    return problems
