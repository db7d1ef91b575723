"""What `pulumi up` would do to a stack deployed from an older config or plan, offline.

`python -m render <stack> --against OLD` (OLD: an older Pulumi.<stack>.yaml, rendered here with
today's program, or a plan.json an older `python -m render` wrote). Resources are matched by URN
(type, name and the parent chain); each pair is classified create, update, replace, delete or same
by the engine's rules and the provider's, read from their sources:

  engine      pulumi/pulumi pkg/resource/deploy/step_generator.go (a snapshot after v3.259; the SDK
              pinned is 3.272.0): generateStepsFromDiff, diff, providerChanged, processIgnoreChanges,
              applyReplaceOnChanges, calculateDependentReplacements
  command     pulumi/pulumi-command v1.2.1: provider/pkg/provider/common/inputs.go (ResourceInputs),
              remote/commandController.go (Command.Update), and pulumi/pulumi-go-provider v1.3.0
              infer/resource.go (derivedResourceController.Diff, diff)
  kubernetes  pulumi/pulumi-kubernetes (snapshot after v4.32; 4.34.2 is pinned):
              provider/pkg/provider/provider.go (kubeProvider.Diff, DiffConfig), diff.go (forceNew),
              helm_release.go (helmReleaseProvider.Diff)
  random      hashicorp/terraform-provider-random v3.8.1 internal/provider/resource_password.go

An input whose value comes from a resource created or replaced in the same update is unknown at
preview (step_generator.go: the new resource's outputs are computed), so it counts as changed;
that is how a rebuilt control plane reaches every node's join (its triggers hold the init's id).
Not modelled: live state and drift, provider defaults applied by Check, secrets (never decrypted,
so a changed secret shows as no change), aliases, and the replace rules of providers whose
schema is not available offline (gcp: shown as "update?", the provider decides).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from render import drain_guards, program

COMMAND_TYPES = ("command:remote:Command", "command:local:Command")
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"
# kubernetes types that are bundles expanded by the provider: their children are not in the plan.
K8S_BUNDLES = ("kubernetes:kustomize/", "kubernetes:yaml/", "kubernetes:helm.sh/v4:")

# What a remote command's delete script does to a node, recognised in the script's text.
NODE_EFFECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("resets a node (kubeadm reset)", re.compile(r"\bkubeadm\s+reset\b")),
    ("drains a node (kubectl drain)", re.compile(r"\bkubectl\b[^\n]*\sdrain\s")),
    # the upgrade scripts' helper (scripts._UPGRADE_HELPERS): a call, not its definition `drain_node() {`
    ("drains a node (kubectl drain)", re.compile(r"^\s*drain_node\s", re.MULTILINE)),
    ("deletes a node (kubectl delete node)", re.compile(r"\bkubectl\b[^\n]*\sdelete\s+(?:node|nodes|no)\b")),
    ("removes kubelet or containerd from the host",
     # `apt-get purge kubelet`, the scripts' `apt_unpin_purge containerd.io`
     re.compile(r"(?:purge|remove)\b[^\n]*\b(?:kubelet|containerd(?:\.io)?)\b")),
)
# Steps that manage cluster membership, by name: used only when the delete script is secret.
MEMBERSHIP_SUFFIXES = ("-init", "-join", "-ready")

PathT = tuple[str | int, ...]


class _Unknown:
    """An input computed from a resource created or replaced in this update: unknown at preview."""

    def __repr__(self) -> str:
        return "<unknown>"

    def __copy__(self) -> _Unknown:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Unknown:
        return self


UNKNOWN: Any = _Unknown()
_MISSING: Any = object()


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    SAME = "same"


@dataclass(frozen=True)
class Resource:
    """One plan entry as the update sees it (program.Registration.entry(), or a plan.json entry)."""

    urn: str
    type: str
    name: str
    parent: str = ""
    custom: bool = True
    provider: str = ""  # "<provider urn>::<id>", "" for the default provider
    inputs: dict[str, Any] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    options_recorded: bool = True  # False for a plan.json written before options were recorded

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Resource:
        type_ = entry["type"]
        return cls(
            urn=entry["urn"],
            type=type_,
            name=entry["name"],
            parent=entry.get("parent", ""),
            # Older plan.json entries have no "custom": components are the project's own types.
            custom=entry.get("custom", not type_.startswith("gpucluster:")),
            provider=entry.get("provider", ""),
            inputs=entry.get("inputs") or {},
            dependencies=list(entry.get("dependencies") or []),
            property_dependencies=dict(entry.get("propertyDependencies") or {}),
            options=dict(entry.get("options") or {}),
            options_recorded="options" in entry,
        )

    @classmethod
    def from_plan(cls, plan: program.Plan) -> list[Resource]:
        return [cls.from_entry(r.entry()) for r in plan.resources]

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""

    def option(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


@dataclass(frozen=True)
class Change:
    path: str  # a Pulumi property path: spec.template.spec.containers[0].image
    kind: str  # add | delete | update
    replaces: str = ""  # the rule that makes this change a replacement ("" when it does not)
    unknown: bool = False  # the new value is unknown at preview


@dataclass
class Step:
    action: Action
    old: Resource | None
    new: Resource | None
    changes: list[Change] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    delete_first: bool = False  # replace: the old one is deleted before the new one is created
    modelled: bool = True  # False: the provider decides, its rules are not modelled here
    runs: str = ""  # commands: which scripts run
    loud: list[str] = field(default_factory=list)  # node resets, drains, deletes; protected resources

    @property
    def resource(self) -> Resource:
        r = self.new or self.old
        assert r is not None
        return r

    @property
    def label(self) -> str:
        if self.action is Action.UPDATE and not self.modelled:
            return "update?"
        if self.action is Action.REPLACE:
            return "replace (delete first)" if self.delete_first else "replace (create first)"
        return str(self.action)


@dataclass
class UpdatePlan:
    stack: str
    against: str
    steps: list[Step]
    notes: list[str] = field(default_factory=list)
    # What `pulumi up` refuses, key by key (render/update_risks.py refusals): exit 2.
    refused: list[str] = field(default_factory=list)
    # Whole-cluster changes (CNI, GPU stack, storage backend; update_risks.whole_cluster_changes).
    risks: list[str] = field(default_factory=list)

    def of(self, action: Action) -> list[Step]:
        return [s for s in self.steps if s.action is action]

    @property
    def loud(self) -> list[str]:
        return self.risks + [line for s in self.steps for line in s.loud]

    @property
    def destructive(self) -> bool:
        """A node would be drained, reset or deleted, a protected resource replaced or deleted, or
        the pod network, GPU stack or shared storage swapped."""
        return bool(self.loud)

    def summary_line(self) -> str:
        counts = {a: len(self.of(a)) for a in Action}
        unmodelled = sum(1 for s in self.of(Action.UPDATE) if not s.modelled)
        dbr = sum(1 for s in self.of(Action.REPLACE) if s.delete_first)
        parts = [
            f"{counts[Action.CREATE]} to create",
            f"{counts[Action.UPDATE]} to update" + (f" ({unmodelled} the provider decides)" if unmodelled else ""),
            f"{counts[Action.REPLACE]} to replace" + (f" ({dbr} delete first)" if dbr else ""),
            f"{counts[Action.DELETE]} to delete",
            f"{counts[Action.SAME]} unchanged",
        ]
        tail = f"; {len(self.loud)} loud" if self.loud else ""
        tail += f"; REFUSED by pulumi up ({len(self.refused)})" if self.refused else ""
        return f"update of {self.stack} from {self.against}: " + ", ".join(parts) + tail

    def text(self) -> str:
        out = [self.summary_line()]
        out += [f"REFUSED {line}" for line in self.refused]
        out += [f"!! {line}" for line in self.loud]
        for action in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE):
            steps = self.of(action)
            if not steps:
                continue
            out += ["", f"{action} ({len(steps)}):"]
            width = max(len(s.resource.name) for s in steps)
            for s in steps:
                out.append(f"  {s.resource.name:<{width}}  {s.label:<22}  {s.resource.type}")
                detail = _detail(s)
                if detail:
                    out.append(f"  {'':<{width}}  {detail}")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out) + "\n"

    def markdown(self) -> str:
        out = [f"## Update from `{self.against}`", "", self.summary_line() + ".", ""]
        if self.refused:
            out += [f"- **REFUSED {line}**" for line in self.refused] + [""]
        if self.loud:
            out += [f"- **!! {line}**" for line in self.loud] + [""]
        for action in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE):
            steps = self.of(action)
            if not steps:
                continue
            out += [f"### {action} ({len(steps)})", "", "| resource | type | step | why |", "|---|---|---|---|"]
            for s in steps:
                why = _detail(s).replace("|", "\\|")
                out.append(f"| `{s.resource.name}` | `{s.resource.type}` | {s.label} | {why} |")
            out.append("")
        out += [f"Note: {n}" for n in self.notes]
        return "\n".join(out).rstrip() + "\n"


def _detail(step: Step) -> str:
    parts = []
    if step.runs:
        parts.append(step.runs)
    parts += step.reasons
    if step.action in (Action.UPDATE, Action.REPLACE):
        shown = [c for c in step.changes if c.replaces] if step.action is Action.REPLACE else step.changes
        if shown:
            paths = ", ".join(c.path + (" (unknown)" if c.unknown else "") for c in shown[:6])
            more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
            parts.append(f"changed: {paths}{more}")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------
# property paths and value diffs


_PATH_TOKEN = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+|\*)\]|\.?([^.\[\]]+)')


def parse_path(text: str) -> PathT:
    """A Pulumi property path (`triggers[*]`, `metadata.annotations["a.b/c"]`) or a provider's
    JSONPath (`.spec.containers[*].image`) as a tuple of keys and indices; `*` matches any."""
    out: list[str | int] = []
    pos = 0
    text = text.lstrip(".")
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"bad property path {text!r}")
        quoted, index, key = m.groups()
        if quoted is not None:
            out.append(quoted.replace('\\"', '"'))
        elif index is not None:
            out.append("*" if index == "*" else int(index))
        else:
            out.append(key)
        pos = m.end()
    return tuple(out)


def format_path(path: PathT) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][\w$-]*", part):
            out += f".{part}" if out else part
        else:
            out += '["' + part.replace('"', '\\"') + '"]'
    return out


def contains(pattern: PathT, path: PathT) -> bool:
    """PropertyPath.Contains (sdk/go/common/resource/properties_path.go): `path` is `pattern` or
    under it, `*` matching any key or index."""
    if len(path) < len(pattern):
        return False
    return all(p == "*" or (type(p) is type(q) and p == q) for p, q in zip(pattern, path, strict=False))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _present(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


def leaf_changes(old: Any, new: Any, path: PathT = ()) -> list[tuple[PathT, str]]:
    """Every changed leaf between two input values, as (path, add | delete | update); lists
    element by element, as Pulumi's ObjectDiff and the providers' patch converters do."""
    if new is UNKNOWN:
        return [(path, "update")]
    if isinstance(old, dict) and isinstance(new, dict):
        old, new = _present(old), _present(new)
        out: list[tuple[PathT, str]] = []
        for key in sorted(set(old) | set(new)):
            if key not in new:
                out.append(((*path, key), "delete"))
            elif key not in old:
                out.append(((*path, key), "add"))
            else:
                out += leaf_changes(old[key], new[key], (*path, key))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(new):
                out.append(((*path, i), "delete"))
            elif i >= len(old):
                out.append(((*path, i), "add"))
            else:
                out += leaf_changes(old[i], new[i], (*path, i))
        return out
    return [] if _same(old, new) else [(path, "update")]


def _get(value: Any, path: PathT) -> Any:
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def _expand(pattern: PathT, value: Any, prefix: PathT = ()) -> list[PathT]:
    """The concrete paths a pattern with `*` names in `value`."""
    if not pattern:
        return [prefix]
    head, rest = pattern[0], pattern[1:]
    if head != "*":
        return _expand(rest, _get(value, (head,)), (*prefix, head))
    if isinstance(value, dict):
        keys: Iterable[str | int] = list(value)
    elif isinstance(value, list):
        keys = range(len(value))
    else:
        keys = []
    return [p for k in keys for p in _expand(rest, _get(value, (k,)), (*prefix, k))]


def _reset(old: Any, new: Any, path: PathT) -> None:
    """PropertyPath.Reset: the new value at `path` becomes the old one (removed when old has none)."""
    parent = _get(new, path[:-1])
    last = path[-1]
    before = _get(old, path)
    if isinstance(parent, dict) and isinstance(last, str):
        if before is _MISSING:
            parent.pop(last, None)
        else:
            parent[last] = copy.deepcopy(before)
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent) and before is not _MISSING:
        parent[last] = copy.deepcopy(before)


def ignore_changes(old: dict[str, Any], new: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """processIgnoreChanges (step_generator.go): each ignored path keeps its old value."""
    out = copy.deepcopy(new)
    for text in paths:
        try:
            pattern = parse_path(text)
        except ValueError:
            continue
        if not pattern:
            continue
        for path in _expand(pattern, old) + _expand(pattern, out):
            _reset(old, out, path)
    return out


# ------------------------------------------------------------------------------------------------
# provider rules


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
    if type_.startswith("kubernetes:") and not type_.startswith(K8S_BUNDLES) and not type_.endswith("List"):
        return k8s_object_diff
    return unmodelled_diff


# ------------------------------------------------------------------------------------------------
# the engine


def _classify(old: Resource, new: Resource, replaced: set[str], created: set[str],
              providers: dict[str, Resource], old_providers: dict[str, Resource]) -> Step:
    step = Step(Action.SAME, old, new)
    if not new.custom:
        # A component has no provider: nothing of it changes but its children. One expanded by a
        # provider (remote) has children the plan does not hold.
        if new.option("remote", False) and leaf_changes(old.inputs, new.inputs):
            step.action, step.modelled = Action.UPDATE, False
            step.reasons.append("expanded by its provider: the children it changes are not in the plan")
        return step
    forced = ""
    # providerChanged (step_generator.go diff): another provider instance diffs its config. A
    # plan.json from before options were recorded has no provider either: not compared.
    if old.options_recorded and old.provider_urn != new.provider_urn:
        if old.provider_urn in old_providers and new.provider_urn in providers:
            before, after = old_providers[old.provider_urn], providers[new.provider_urn]
            config = provider_rule(after.type)(before, after, after.inputs, leaf_changes(before.inputs, after.inputs), {})
            if any(c.replaces for c in config.changes) or not config.modelled:
                forced = f"its provider changed to {after.name} (DiffConfig replaces)"
        else:
            forced = "its provider changed (assumed DiffConfig replaces)"
    elif new.provider_urn and new.provider_urn in replaced:
        forced = f"its provider {new.provider_urn.rsplit('::', 1)[-1]} is replaced (a new cluster connection)"
    deleted_with = new.option("deletedWith", "")
    if deleted_with and deleted_with in replaced:
        forced = forced or "the resource it is deletedWith is replaced"
    if any(u in replaced for u in new.option("replaceWith", [])):
        forced = forced or "a resource in its replaceWith is replaced"
    if "replacementTrigger" in new.options or "replacementTrigger" in old.options:
        trigger_old, trigger_new = old.options.get("replacementTrigger"), new.options.get("replacementTrigger")
        if trigger_old is not None and trigger_new is not None and not _same(trigger_old, trigger_new):
            forced = forced or "its replacementTrigger changed"

    inputs = copy.deepcopy(new.inputs)
    from_new = {u for deps in new.property_dependencies.values() for u in deps if u in replaced | created}
    for prop, deps in new.property_dependencies.items():
        if prop in inputs and any(u in replaced | created for u in deps):
            inputs[prop] = UNKNOWN
    inputs = ignore_changes(old.inputs, inputs, new.option("ignoreChanges", []))
    leaves = leaf_changes(old.inputs, inputs)
    diff = provider_rule(new.type)(old, new, inputs, leaves, providers)
    # applyReplaceOnChanges: the replaceOnChanges option turns a change on those paths into a replace.
    patterns = [parse_path(p) for p in new.option("replaceOnChanges", [])]
    changes = [
        c if c.replaces or not any(contains(p, parse_path(c.path)) for p in patterns if c.path)
        else Change(c.path, c.kind, "replaceOnChanges option", c.unknown)
        for c in diff.changes
    ]
    step.changes, step.modelled = changes, diff.modelled
    if from_new and changes:
        names = sorted(u.rsplit("::", 1)[-1] for u in from_new)
        step.reasons.append("inputs from " + ", ".join(names) + " (created or replaced: unknown at preview)")
    if forced or any(c.replaces for c in changes):
        step.action = Action.REPLACE
        step.modelled = True
        step.reasons = ([forced] if forced else []) + step.reasons
        step.reasons += sorted({c.replaces for c in changes if c.replaces})
        # A forced replacement never reaches the provider's Diff, so only the option can ask for
        # delete-before-replace (step_generator.go diff returns early with ReplaceKeys only).
        option = new.options.get("deleteBeforeReplace")
        hint = diff.delete_before_replace and not forced
        step.delete_first = bool(option) if option is not None else hint
        if new.type in COMMAND_TYPES:
            order = "its old delete, then create" if step.delete_first else "create, then its old delete"
            step.runs = "runs " + order if old.inputs.get("delete") else "runs create (the old has no delete)"
    elif changes:
        step.action = Action.UPDATE
        step.runs = diff.runs
        step.reasons += diff.reasons
    return step


def _cascade(steps: dict[str, Step]) -> None:
    """calculateDependentReplacements (step_generator.go): replacing a resource delete-before-replace
    first deletes every dependent that is replaced because of it (its provider, or an input from
    it), in reverse dependency order."""
    roots = [s for s in steps.values() if s.action is Action.REPLACE and s.delete_first]
    taken_by: dict[str, set[str]] = {}
    for root in roots:
        taken = {root.resource.urn}
        changed = True
        while changed:
            changed = False
            for s in steps.values():
                r = s.new
                if r is None or s.action is not Action.REPLACE or r.urn in taken:
                    continue
                inputs_from = {p for p, deps in r.property_dependencies.items() if taken & set(deps)}
                if r.provider_urn in taken or any(c.replaces and _top(c.path) in inputs_from for c in s.changes):
                    taken.add(r.urn)
                    changed = True
        taken_by[root.resource.urn] = taken - {root.resource.urn}
    # Name only the outermost root: the one no other root's replacement takes down.
    outer = [r for r in roots if not any(r.resource.urn in t for t in taken_by.values())]
    for root in outer:
        for urn in sorted(taken_by[root.resource.urn]):
            s = steps[urn]
            s.reasons.append(f"deleted before {root.resource.name} is replaced (its delete-before-replace "
                             "takes its dependents down first)")
            if not s.delete_first:
                s.delete_first = True
                if s.resource.type in COMMAND_TYPES and s.old and s.old.inputs.get("delete"):
                    s.runs = "runs its old delete, then create"


def _top(path: str) -> str:
    """The input property a change path starts in."""
    return path.split(".", 1)[0].split("[", 1)[0]


def node_effects(command: Resource) -> list[str]:
    """What a command's delete script does to a node (drain, reset, delete, removing kubelet)."""
    script = command.inputs.get("delete")
    if script == program.SECRET_MARKER:
        if command.name.endswith(MEMBERSHIP_SUFFIXES):
            return ["may drain, reset or delete a node (its delete script is secret; the step's name says so)"]
        return []
    if not isinstance(script, str):
        return []
    return list(dict.fromkeys(label for label, pattern in NODE_EFFECTS if pattern.search(script)))


def update_effects(command: Resource) -> tuple[str, list[str]]:
    """(which script, what it can do to a node) for a command updated in place: pulumi-command runs
    its `update` script, else `create` again (Command.Update, pulumi-command remote/command.go)."""
    which = "update" if isinstance(command.inputs.get("update"), str) else "create"
    script = command.inputs.get(which)
    if not isinstance(script, str) or script == program.SECRET_MARKER:
        return which, []
    return which, list(dict.fromkeys(label for label, pattern in NODE_EFFECTS if pattern.search(script)))


def _loud(step: Step, deleted_or_replaced: set[str]) -> None:
    old = step.old
    if step.action is Action.UPDATE and step.new is not None and step.new.type in COMMAND_TYPES:
        which, effects = update_effects(step.new)
        if effects:
            host = (step.new.inputs.get("connection") or {}).get("host", "?")
            # What ran on the host before: the older update script, or its create (never updated).
            before = old.inputs.get(which) if old is not None else None
            if old is not None and which == "update" and not isinstance(before, str):
                before = old.inputs.get("create")
            verdict = drain_guards.rerun(before, step.new.inputs.get(which))
            if verdict is not None and not verdict.drains:
                step.reasons.append(verdict.drains_if)
                return
            detail = f": {verdict.drains}" if verdict is not None else ""
            step.loud.append(f"UPDATE {step.new.name}: runs its {which} script again on {host}, a script that "
                             f"{', '.join(effects)}{detail}")
        return
    if old is None or step.action not in (Action.REPLACE, Action.DELETE):
        return
    verb = "REPLACE" if step.action is Action.REPLACE else "DELETE"
    protected = old.option("protect", False) and (step.new is None or step.new.option("protect", False))
    if protected:
        step.loud.append(f"PROTECTED {old.name} ({old.type}) would be {step.action}d: pulumi up stops here "
                         "(remove `protect` first)")
    if old.type not in COMMAND_TYPES:
        return
    if old.option("retainOnDelete", False):
        step.reasons.append("retainOnDelete: its delete does not run")
        return
    deleted_with = old.option("deletedWith", "")
    if deleted_with and deleted_with in deleted_or_replaced:
        step.reasons.append("deletedWith a resource deleted too: its own delete does not run")
        return
    effects = node_effects(old)
    if effects:
        host = (old.inputs.get("connection") or {}).get("host", "?")
        when = ""
        if step.action is Action.REPLACE:
            when = ", before the new one is created" if step.delete_first else ", after the new one is created"
        step.loud.append(f"{verb} {old.name}: its delete {', '.join(effects)} on {host}{when}")


def compare(old: list[Resource], new: list[Resource], stack: str = "", against: str = "") -> UpdatePlan:
    """What an update from `old` to `new` does, resource by resource."""
    olds = {r.urn: r for r in old}
    news = {r.urn: r for r in new}
    providers = {r.urn: r for r in new if r.type.startswith("pulumi:providers:")}
    old_providers = {r.urn: r for r in old if r.type.startswith("pulumi:providers:")}
    created = set(news) - set(olds)
    replaced: set[str] = set()
    steps: dict[str, Step] = {}
    # Replacements reach dependents through unknown inputs; repeat until no new one appears.
    for _ in range(len(news) + 1):
        steps = {urn: _classify(olds[urn], r, replaced, created, providers, old_providers)
                 for urn, r in news.items() if urn in olds}
        now = {urn for urn, s in steps.items() if s.action is Action.REPLACE}
        if now == replaced:
            break
        replaced = now
    _cascade(steps)
    for urn in sorted(created):
        r = news[urn]
        steps[urn] = Step(Action.CREATE, None, r, runs="runs create" if r.type in COMMAND_TYPES else "")
    for urn in sorted(set(olds) - set(news)):
        r = olds[urn]
        runs = ""
        if r.type in COMMAND_TYPES:
            runs = "runs its delete" if r.inputs.get("delete") else "nothing runs (no delete command)"
        steps[urn] = Step(Action.DELETE, r, None, runs=runs)
    gone = {urn for urn, s in steps.items() if s.action in (Action.REPLACE, Action.DELETE)}
    ordered = [steps[urn] for urn in sorted(steps, key=lambda u: (steps[u].resource.name, u))]
    for s in ordered:
        _loud(s, gone)
    notes = []
    if any(not r.options_recorded for r in old):
        notes.append("the older plan records no resource options: protect and retainOnDelete of what it "
                     "deletes are taken as false")
    aliased = [news[u].name for u in sorted(created) if news[u].option("aliases", 0)]
    if aliased and set(olds) - set(news):
        notes.append(f"{', '.join(aliased)} declare aliases: if one names a deleted resource, Pulumi updates it "
                     "instead of a delete and a create (aliases are not modelled)")
    notes.append("secrets are never decrypted: a changed secret shows as no change")
    return UpdatePlan(stack=stack, against=against, steps=ordered, notes=notes)


def older_resources(path: Path, stack: str) -> list[Resource]:
    """The older side's resources (render/update_risks.py older_side: a plan.json as written, or a
    stack file rendered with today's program).

    Raises config.ConfigError for a bad older stack file, ValueError for a plan of another stack.
    """
    from render import update_risks

    return update_risks.older_side(path, stack).resources
