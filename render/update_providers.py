"""The providers' rules for an update (render/update.py): update or replace, as each provider's Diff
decides, read from its source (the versions are cited in update.py's docstring and each rule's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from render import program
from render.update_inputs import (
    _MISSING,
    UNKNOWN,
    Change,
    PathT,
    Resource,
    _get,
    _same,
    contains,
    format_path,
    parse_path,
)

COMMAND_TYPES = ("command:remote:Command", "command:local:Command")
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"
RANDOM_BYTES = "random:index/randomBytes:RandomBytes"
# kubernetes types that are bundles expanded by the provider: their children are not in the plan.
K8S_BUNDLES = ("kubernetes:kustomize/", "kubernetes:yaml/", "kubernetes:helm.sh/v4:")


@dataclass
class ProviderDiff:
    changes: list[Change]
    delete_before_replace: bool = False  # the provider's own choice (the option overrides it)
    modelled: bool = True
    reasons: list[str] = field(default_factory=list)
    runs: str = ""


ProviderRule = Callable[[Resource, Resource, dict[str, Any], list[tuple[PathT, str]], dict[str, Resource]], ProviderDiff]


def _changes(leaves: list[tuple[PathT, str]], unknown: set[str], replaces: Callable[[PathT, str], str]) -> list[Change]:
    return [
        Change(format_path(path), kind, replaces(path, kind), unknown=bool(path) and str(path[0]) in unknown)
        for path, kind in leaves
    ]


def command_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                 providers: dict[str, Resource]) -> ProviderDiff:
    """pulumi-command 1.2.1. Command implements infer.CustomUpdate (remote/commandController.go),
    so pulumi-go-provider's derivedResourceController.Diff forces a replacement only for schema
    properties marked replaceOnChanges: `triggers` alone (common/inputs.go, ResourceInputs); the
    generated SDK registers replaceOnChanges ["triggers[*]"] too. Any other change is an update,
    and Command.Update runs `update` when there is one, else `create` again; the old `delete` does
    not run. The provider sets no DeleteBeforeReplace ("TODO" in infer/resource.go diff)."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}

    def rule(path: PathT, _kind: str) -> str:
        return "triggers changed (pulumi-command: triggers is replaceOnChanges)" if path[:1] == ("triggers",) else ""

    changes = _changes(leaves, unknown, rule)
    if any(c.replaces for c in changes):
        return ProviderDiff(changes)
    runs = "runs its update command" if inputs.get("update") else "runs its create command again (no update command)"
    return ProviderDiff(changes, runs=runs)


def _active_cluster(inputs: dict[str, Any]) -> Any:
    """getActiveClusterFromConfig, where the kubeconfig is readable here; _MISSING when it is not."""
    raw = inputs.get("kubeconfig")
    if not isinstance(raw, str) or raw == program.SECRET_MARKER:
        return _MISSING
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError:
        return _MISSING
    if not isinstance(config, dict):
        return _MISSING
    context_name = inputs.get("context") or config.get("current-context")
    context = next((c.get("context") or {} for c in config.get("contexts") or [] if c.get("name") == context_name), {})
    cluster_name = inputs.get("cluster") or context.get("cluster")
    return next((c.get("cluster") for c in config.get("clusters") or [] if c.get("name") == cluster_name), _MISSING)


def k8s_provider_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                      providers: dict[str, Resource]) -> ProviderDiff:
    """kubeProvider.DiffConfig (pulumi-kubernetes provider.go): a computed kubeconfig, context or
    cluster replaces the provider (and so every resource it manages); a known change replaces it
    when the kubeconfig's active cluster changes; renderYamlToDirectory replaces; a changed
    clusterIdentifier replaces, an unchanged one that is set replaces nothing."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}
    keys = {str(p[0]) for p, _ in leaves if p}
    cluster_keys = {"kubeconfig", "context", "cluster"}
    reasons: list[str] = []
    replace_keys: dict[str, str] = {}
    for key in sorted(keys & cluster_keys & unknown):
        replace_keys[key] = f"{key} unknown at preview (kubernetes DiffConfig replaces on a computed {key})"
    if "renderYamlToDirectory" in keys:
        replace_keys["renderYamlToDirectory"] = "renderYamlToDirectory changed (kubernetes DiffConfig)"
    known = (keys & cluster_keys) - unknown
    if known and not unknown & cluster_keys:
        before, after = _active_cluster(old.inputs), _active_cluster(inputs)
        if before is _MISSING or after is _MISSING:
            for key in sorted(known):
                replace_keys[key] = (f"{key} changed: DiffConfig replaces when the active cluster changes; "
                                     "the kubeconfig is not readable here, assumed it does")
        elif before != after:
            for key in sorted(known):
                replace_keys[key] = f"{key} changed the active cluster (kubernetes DiffConfig)"
        else:
            reasons.append("the kubeconfig's active cluster is unchanged: no replacement")
    ident_old, ident_new = old.inputs.get("clusterIdentifier"), inputs.get("clusterIdentifier")
    if ident_old is not None and ident_new is not None:
        if _same(ident_old, ident_new):
            replace_keys = {}  # an unchanged clusterIdentifier suppresses every replacement
            reasons.append("clusterIdentifier unchanged: no replacement")
        else:
            replace_keys["clusterIdentifier"] = "clusterIdentifier changed (kubernetes DiffConfig)"
    changes = _changes(leaves, unknown, lambda path, _k: replace_keys.get(str(path[0]), "") if path else "")
    return ProviderDiff(changes, reasons=reasons)


# pulumi-kubernetes provider/pkg/provider/diff.go: forceNew, by group -> version -> kind.
_LABEL_SELECTOR = (".matchExpressions", ".matchExpressions.key", ".matchExpressions.operator",
                   ".matchExpressions.values", ".matchLabels")


def _selector(prefix: str) -> tuple[str, ...]:
    return tuple(prefix + p for p in _LABEL_SELECTOR)


def _containers(*prefixes: str) -> tuple[str, ...]:
    fields = (".args", ".command", ".env", ".env.value", ".image", ".imagePullPolicy", ".lifecycle",
              ".livenessProbe", ".ports", ".readinessProbe", ".resources", ".securityContext", ".stdin",
              ".stdinOnce", ".terminationMessagePath", ".terminationMessagePolicy", ".tty", ".volumeDevices",
              ".volumeMounts", ".workingDir")
    return tuple(prefix + f for prefix in prefixes for f in fields)


_DAEMONSET = (".spec.selector", *_selector(".spec.selector"))
_JOB = (".spec.completions", ".spec.parallelism", ".spec.selector", ".spec.template", *_selector(".spec.selector"))
_STATEFULSET = (".spec.podManagementPolicy", ".spec.revisionHistoryLimit", ".spec.selector", ".spec.serviceName",
                ".spec.volumeClaimTemplates", *_selector(".spec.selector"))
_ROLE_BINDING = (".roleRef",)
_CORE_V1: dict[str, tuple[str, ...]] = {
    "PersistentVolume": tuple(".spec." + v for v in (
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs", "photonPersistentDisk",
        "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume")),
    "PersistentVolumeClaim": (".spec.accessModes", ".spec.selector", ".spec.storageClassName", ".spec.volumeName",
                              *_selector(".spec.selector")),
    "Pod": tuple(".spec." + v for v in (
        "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
        "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
        "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
        "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "volumes"))
    + _containers(".spec.containers[*]", ".spec.initContainers[*]"),
    "ResourceQuota": (".spec.scopes",),
    "Secret": (".type",),
    "Service": (".spec.clusterIP",),
}
K8S_FORCE_NEW: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "apps": {
        "v1beta1": {"StatefulSet": _STATEFULSET},
        "v1beta2": {"DaemonSet": _DAEMONSET, "Deployment": _DAEMONSET, "StatefulSet": _STATEFULSET},
        "v1": {"DaemonSet": _DAEMONSET, "Deployment": _DAEMONSET, "StatefulSet": _STATEFULSET},
    },
    "core": {"v1": _CORE_V1},
    "": {"v1": _CORE_V1},
    "policy": {"v1beta1": {"PodDisruptionBudget": (".spec",)}},
    "rbac.authorization.k8s.io": {
        v: {"ClusterRoleBinding": _ROLE_BINDING, "RoleBinding": _ROLE_BINDING} for v in ("v1alpha1", "v1beta1", "v1")
    },
    "storage.k8s.io": {"v1": {"StorageClass": (".parameters", ".provisioner")}},
    "batch": {v: {"Job": _JOB} for v in ("v1beta1", "v1", "v2alpha1")},
}


def k8s_force_new(obj: dict[str, Any], type_: str, provider: Resource | None) -> tuple[str, ...]:
    """kubeProvider.forceNewProperties (diff.go) for one object; patch resources (`<Kind>Patch`)
    only on name and namespace (provider.go Diff, kinds.IsPatchResource)."""
    props: tuple[str, ...] = (".metadata.name", ".metadata.namespace")
    kind = str(obj.get("kind", ""))
    if type_.rsplit(":", 1)[-1] == kind + "Patch":
        return props
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    kinds = K8S_FORCE_NEW.get(group, {}).get(version)
    if kinds is None:
        return props
    config = provider.inputs if provider else {}
    immutable = obj.get("immutable") is True
    is_core = group in ("", "core")
    if is_core and kind == "Secret" and (str(config.get("enableSecretMutable")).lower() != "true" or immutable):
        return (*props, ".type", ".stringData", ".data")
    if kind in kinds:
        return (*props, *kinds[kind])
    if is_core and kind == "ConfigMap" and (str(config.get("enableConfigMapMutable")).lower() != "true" or immutable):
        return (*props, ".binaryData", ".data")
    return props


def _resolves(rest: PathT, value: Any) -> bool:
    """A JSONPath's remaining segments find something in `value` (openapi.PatchPropertiesChanged)."""
    if not rest:
        return True
    head = rest[0]
    if head == "*":
        return isinstance(value, list) and any(_resolves(rest[1:], v) for v in value)
    nxt = _get(value, (head,))
    return nxt is not _MISSING and _resolves(rest[1:], nxt)


def _force_new_match(patterns: Iterable[PathT], path: PathT, new_value: Any) -> str:
    for pattern in patterns:
        if contains(pattern, path):
            return format_path(pattern)
        if len(path) < len(pattern) and contains(pattern[: len(path)], path) and new_value not in (_MISSING, UNKNOWN) \
                and _resolves(pattern[len(path):], new_value):
            return format_path(pattern)
    return ""


def k8s_object_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                    providers: dict[str, Resource]) -> ProviderDiff:
    """kubeProvider.Diff (provider.go): a change on a forceNew path replaces (deleting `metadata`
    too); the provider asks for delete-before-replace when the object is named, keeps its name and
    namespace (a second object of that name could not exist beside it)."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}
    force_new = tuple(parse_path(p) for p in k8s_force_new(inputs, new.type, providers.get(new.provider_urn)))

    def rule(path: PathT, kind: str) -> str:
        if path == ("metadata",) and kind == "delete":
            return "metadata removed (kubernetes Diff)"
        match = _force_new_match(force_new, path, _get(inputs, path))
        return f"{match} is immutable (kubernetes forceNew)" if match else ""

    changes = _changes(leaves, unknown, rule)
    old_md, new_md = old.inputs.get("metadata") or {}, inputs.get("metadata") or {}
    named = isinstance(new_md, dict) and bool(new_md.get("name")) and isinstance(old_md, dict)
    dbr = named and new_md.get("name") == old_md.get("name") and new_md.get("namespace") == old_md.get("namespace")
    return ProviderDiff(changes, delete_before_replace=bool(dbr), **_unknown_verdict(changes))


def _unknown_verdict(changes: list[Change]) -> dict[str, Any]:
    """An update whose changes include an unknown value: the provider decides once it is known."""
    if any(c.replaces for c in changes) or not any(c.unknown for c in changes):
        return {}
    return {"modelled": False,
            "reasons": ["the provider decides once the unknown value is known (on an immutable path it replaces)"]}


def helm_release_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                      providers: dict[str, Resource]) -> ProviderDiff:
    """helmReleaseProvider.Diff (helm_release.go): forceNew [.name, .namespace]; everything else
    (chart, version, values) is an in-place upgrade; DeleteBeforeReplace false."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}

    def rule(path: PathT, _kind: str) -> str:
        return f"{path[0]} changed (helm release: name and namespace force a new release)" \
            if path[:1] in (("name",), ("namespace",)) else ""

    changes = _changes(leaves, unknown, rule)
    return ProviderDiff(changes, runs="helm upgrade", **_unknown_verdict(changes))


def random_password_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                         providers: dict[str, Resource]) -> ProviderDiff:
    """terraform-provider-random (resource_password.go): every input attribute is RequiresReplace
    (keepers: when its values are not null; overrideSpecial: except "" -> null)."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}
    return ProviderDiff(_changes(leaves, unknown, lambda p, _k: "random: every input forces a new password"))


def random_bytes_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                      providers: dict[str, Resource]) -> ProviderDiff:
    """terraform-provider-random (resource_bytes.go, bytesSchemaV0): its only inputs, `length` and
    `keepers`, are RequiresReplace (keepers: when its values are not null): new bytes."""
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}
    return ProviderDiff(_changes(leaves, unknown, lambda p, _k: "random: length and keepers force new bytes"))


def unmodelled_diff(old: Resource, new: Resource, inputs: dict[str, Any], leaves: list[tuple[PathT, str]],
                    providers: dict[str, Resource]) -> ProviderDiff:
    unknown = {k for k, v in inputs.items() if v is UNKNOWN}
    package = new.type.split(":", 1)[0]
    return ProviderDiff(_changes(leaves, unknown, lambda p, _k: ""), modelled=False,
                        reasons=[f"the {package} provider decides update or replace: its rules are not modelled"])


def provider_rule(type_: str) -> ProviderRule:
    if type_ in COMMAND_TYPES:
        return command_diff
    if type_ == K8S_PROVIDER:
        return k8s_provider_diff
    if type_ == HELM_RELEASE:
        return helm_release_diff
    if type_ == RANDOM_PASSWORD:
        return random_password_diff
    if type_ == RANDOM_BYTES:
        return random_bytes_diff
    if type_.startswith("kubernetes:") and not type_.startswith(K8S_BUNDLES) and not type_.endswith("List"):
        return k8s_object_diff
    return unmodelled_diff
