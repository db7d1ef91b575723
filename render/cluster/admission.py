"""Would the API server take each object? Schema, CRDs, namespaces, Pod Security, references.

- Built-in kinds: strictly valid for the stack's Kubernetes minor (kubernetes-validate's offline
  OpenAPI schemas; unknown fields are errors, as with `kubectl apply --validate=strict`).
- Custom resources: valid against the openAPIV3Schema of a CRD that something the object depends
  on installs (the same Helm release's crds/ directory counts: Helm installs those first), with
  unknown fields closed where the CRD does not keep them (the API server would prune them).
- Namespaced objects: their namespace exists (a Namespace the object depends on, or a built-in).
- Jobs and PyTorchJobs: admitted by the plan's ValidatingAdmissionPolicies bound to their namespace
  (admission_policy.py: the team policy's queue and priority rules).
- Pods of every workload: admitted by the Pod Security level their namespace enforces.
- References: ServiceAccounts, Secrets, ConfigMaps and PersistentVolumeClaims a pod uses exist
  (unless marked optional), or are created at run time by a named creator (RUNTIME_CREATED).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import render.cluster.admission_policy as admission_policy
import render.cluster.memo as memo
import render.cluster.pod_security as pod_security
from render.cluster.objects import Obj
from render.cluster.workloads import Workload

BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Objects a pod may reference that no manifest contains, because a controller or a hook creates
# them at run time: (kind, name pattern, who creates it). Each entry is upstream behaviour.
RUNTIME_CREATED: list[tuple[str, re.Pattern[str], str]] = [
    ("ConfigMap", re.compile(r"kube-root-ca\.crt"), "kube-controller-manager's root CA publisher, in every namespace"),
    ("ServiceAccount", re.compile(r"default"), "kube-controller-manager, in every namespace"),
    # kube-prometheus-stack: the admission webhook's pre-install hook Job creates this TLS Secret
    # (templates/prometheus-operator/admission-webhooks/job-patch/job-createSecret.yaml).
    ("Secret", re.compile(r".+-admission"), "kube-prometheus-stack's admission-create hook Job"),
    # prometheus-operator generates the configuration Secrets of every Prometheus / Alertmanager.
    ("Secret", re.compile(r"(prometheus|alertmanager)-.+"), "prometheus-operator, from its custom resource"),
    # NFD's master writes its worker configuration (node-feature-discovery chart, nfd-worker conf).
    ("ConfigMap", re.compile(r".+-node-feature-discovery-worker-conf"), "node-feature-discovery chart"),
]


@dataclass
class Problem:
    subject: str
    reason: str


def is_custom_resource(body: dict[str, Any]) -> bool:
    group = str(body.get("apiVersion", "")).rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def strict_schema(schema: Any) -> Any:
    """Close every object schema that lists its properties, unless the CRD keeps unknown fields."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) for k, v in schema.items()}
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)"):]  # Go's RE2 flag group after '^'
        if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


@functools.cache
def builtin_validator(api_version: str, kind: str, minor: str) -> Any:
    """kubernetes-validate's strict schema of a built-in kind, as a reusable validator (its own
    validate() reads the schema files again on every call); None if the version does not serve it."""
    import jsonschema
    import kubernetes_validate.utils as kv
    from referencing import Registry, Resource

    version = [v for v in kv.all_versions() if kv.major_minor(v) <= minor][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = kv.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", minor)
    except FileNotFoundError:
        return None
    registry = _definitions(folder, minor) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def builtin_served(api_version: str, kind: str, minor: str) -> bool:
    """Whether kubernetes-validate has a schema of `kind` in `api_version` for Kubernetes `minor`."""
    import kubernetes_validate.utils as kv

    version = [v for v in kv.all_versions() if kv.major_minor(v) <= minor][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        kv.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/{kind.lower()}-{group_version}.json", minor)
    except FileNotFoundError:
        return False
    return True


def _first_errors(validator: Callable[[], Any], body: dict[str, Any], *schema_id: str) -> list[tuple[str, str]]:
    """The first three (path, message) errors of `body` against a schema, by path; memoised on disk
    (render/cluster/memo.py) under the body's canonical JSON and `schema_id` (the CRD schema's JSON,
    or the Kubernetes minor, apiVersion and kind of a built-in schema), so the validator is only built
    and run for an object or schema not seen before."""
    import json

    name = memo.key("schema-errors", *schema_id, json.dumps(body, sort_keys=True, default=str))
    cached = memo.load(name)
    if isinstance(cached, list):
        return [(str(where), str(message)) for where, message in cached]
    errors = sorted(validator().iter_errors(body), key=lambda e: [str(p) for p in e.path])[:3]
    found = [(".".join(str(p) for p in err.path) or "(root)", str(err.message)[:200]) for err in errors]
    memo.store(name, found)
    return found


@functools.cache
def _definitions(folder: str, minor: str) -> Any:
    """The shared definitions every kind's schema refers to (several MB: read once)."""
    import kubernetes_validate.utils as kv
    from referencing import Resource

    return Resource.from_contents(kv.schema_contents(f"{folder}/_definitions.json", minor))


@functools.cache
def _crd_validator(crd_key: str, schema_json: str) -> Any:
    import json

    import jsonschema

    return jsonschema.Draft7Validator(json.loads(schema_json))


SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")


def plan_dependencies(plan: Any) -> dict[str, list[str]]:
    """What each resource of a plan (program.Plan) is registered after. A child is registered only
    once its parent is, and a component's registration waits for the component's own depends_on:
    what a parent waits for, its children wait for too."""
    return {r.urn: [*r.dependencies, *([r.parent] if r.parent else [])] for r in plan.resources}


class Ancestry:
    """Every plan resource a urn waits for, directly or through others (memoized)."""

    def __init__(self, dependencies: dict[str, list[str]]):
        self._deps = dependencies
        self._seen: dict[str, set[str]] = {}

    def __call__(self, urn: str) -> set[str]:
        if urn in self._seen:
            return self._seen[urn]
        seen: set[str] = set()
        stack = list(self._deps.get(urn, []))
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            stack.extend(self._deps.get(u, []))
        self._seen[urn] = seen
        return seen


# The source of the CRDs a platform serves itself (Admission's platform_crds).
PLATFORM_SOURCE = "platform"


class Admission:
    def __init__(self, objects: list[Obj], dependencies: dict[str, list[str]], minor: str,
                 platform_crds: list[Obj] | None = None):
        self.objects = objects
        # CRDs the platform itself serves, no plan resource installs them (gke multi-networking's
        # networking.gke.io/v1 Network and GKENetworkParamSet: render/cluster/gpudirect_check.py), their
        # source PLATFORM_SOURCE: there before anything of the plan.
        self.minor = minor
        self.ancestors = Ancestry(dependencies)  # every plan resource a urn waits for
        self.crds: dict[tuple[str, str], tuple[dict[str, Any], Obj]] = {}
        for o in [*objects, *(platform_crds or [])]:
            if o.kind != "CustomResourceDefinition":
                continue
            spec = o.body.get("spec") or {}
            for version in spec.get("versions") or []:
                if not version.get("served", True):
                    continue
                schema = copy.deepcopy(((version.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"})
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                self.crds[(f"{spec.get('group')}/{version.get('name')}", str((spec.get("names") or {}).get("kind")))] = (
                    strict_schema(schema), o)
        self.namespaces = {o.name: o for o in objects if o.kind == "Namespace"}
        self.by_kind_ns: dict[tuple[str, str | None, str], Obj] = {(o.kind, o.namespace, o.name): o for o in objects}

    def _before(self, creator: Obj, user: Obj, same_release_ok: bool) -> bool:
        if creator.source == PLATFORM_SOURCE:
            return True
        if creator.source == user.source:
            return same_release_ok
        return creator.source in self.ancestors(user.source)

    # --- the checks ---
    def schema(self) -> Iterable[Problem]:
        import json

        for o in self.objects:
            if is_custom_resource(o.body):
                found = self.crds.get((o.api_version, o.kind))
                if found is None:
                    yield Problem(o.ref, f"no CRD for {o.api_version} {o.kind} is installed by the plan ({o.origin})")
                    continue
                schema, crd = found
                # Helm installs crds/ before the chart's templates; a CRD among templates is not
                # established when the same release's other templates are built (hooks come later).
                same_release = crd.crd_dir or crd.self_ordered or (o.hook is not None and "post-" in o.hook)
                if not self._before(crd, o, same_release):
                    yield Problem(o.ref, f"its CRD {crd.name} ({crd.origin}) is not installed before it: "
                                         f"{o.origin} does not depend on it")
                schema_json = json.dumps(schema, sort_keys=True)
                found_errors = _first_errors(
                    functools.partial(_crd_validator, f"{crd.origin}/{crd.name}/{o.api_version}", schema_json),
                    o.body, "crd", schema_json)
                for where, message in found_errors:
                    yield Problem(o.ref, f"not valid against CRD {crd.name}: {where}: {message}")
                continue
            if not builtin_served(o.api_version, o.kind, self.minor):
                yield Problem(o.ref, f"{o.api_version} {o.kind} is not served by Kubernetes {self.minor} ({o.origin})")
                continue
            found_errors = _first_errors(functools.partial(builtin_validator, o.api_version, o.kind, self.minor), o.body,
                                         "builtin", self.minor, o.api_version, o.kind)
            for where, message in found_errors:
                yield Problem(o.ref, f"not valid for Kubernetes {self.minor}: {where}: {message} ({o.origin})")

    def namespaces_exist(self) -> Iterable[Problem]:
        for o in self.objects:
            ns = o.namespace
            if ns is None or ns in BUILTIN_NAMESPACES or o.kind == "Namespace":
                continue
            creator = self.namespaces.get(ns)
            if creator is None:
                yield Problem(o.ref, f"namespace {ns} is created by nothing in the plan ({o.origin})")
            # Helm creates a release's Namespaces before its other objects (its install order), and
            # kustomize/v2 components do the same.
            elif not self._before(creator, o, same_release_ok=True):
                yield Problem(o.ref, f"namespace {ns} ({creator.origin}) is not created before it: {o.origin} does not depend on it")

    def policies(self) -> Iterable[Problem]:
        """The plan's own Jobs and PyTorchJobs against the plan's ValidatingAdmissionPolicies bound to
        their namespaces (admission_policy.py: the team policy, in the team namespaces)."""
        for o in self.objects:
            if o.kind in admission_policy.RESOURCES and o.namespace in self.namespaces:
                labels = {**((self.namespaces[o.namespace].body.get("metadata") or {}).get("labels") or {}),
                          "kubernetes.io/metadata.name": o.namespace}
                for reason in admission_policy.refusals(self.objects, labels, o):
                    yield Problem(o.ref, f"{reason} ({o.origin})")

    def level(self, namespace: str) -> str:
        ns = self.namespaces.get(namespace)
        labels = ((ns.body.get("metadata") or {}).get("labels") or {}) if ns else {}
        # kubeadm and GKE Standard clusters enforce no Pod Security level unless a namespace asks.
        return str(labels.get(pod_security.LEVEL_LABEL, "privileged"))

    def pod_security(self, w: Workload) -> list[str]:
        level = self.level(w.namespace)
        found = pod_security.violations(w.spec, w.metadata, level)
        return [f"Pod Security '{level}' of namespace {w.namespace} rejects its pods: {'; '.join(found[:4])}"] if found else []

    def _exists(self, kind: str, namespace: str, name: str, user: Obj) -> str | None:
        o = self.by_kind_ns.get((kind, namespace, name))
        if o is not None:
            if o.source == user.source or self._before(o, user, same_release_ok=True):
                return None
            return f"{kind} {namespace}/{name} ({o.origin}) is not created before it"
        for k, pattern, _who in RUNTIME_CREATED:
            if k == kind and pattern.fullmatch(name):
                return None
        return f"{kind} {namespace}/{name} does not exist: nothing in the plan creates it"

    def references(self, w: Workload) -> list[str]:
        spec, ns, out = w.spec, w.namespace, []
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        refs: list[tuple[str, str]] = [("ServiceAccount", sa)]
        for v in spec.get("volumes") or []:
            if "secret" in v and not v["secret"].get("optional"):
                refs.append(("Secret", v["secret"].get("secretName", "")))
            if "configMap" in v and not v["configMap"].get("optional"):
                refs.append(("ConfigMap", v["configMap"].get("name", "")))
            if "persistentVolumeClaim" in v:
                refs.append(("PersistentVolumeClaim", v["persistentVolumeClaim"].get("claimName", "")))
            for src in (v.get("projected") or {}).get("sources") or []:
                if "secret" in src and not src["secret"].get("optional"):
                    refs.append(("Secret", src["secret"].get("name", "")))
                if "configMap" in src and not src["configMap"].get("optional"):
                    refs.append(("ConfigMap", src["configMap"].get("name", "")))
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                    if key in vf and not vf[key].get("optional"):
                        refs.append((kind, vf[key].get("name", "")))
            for e in c.get("envFrom") or []:
                for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                    if key in e and not e[key].get("optional"):
                        refs.append((kind, e[key].get("name", "")))
        for kind, name in refs:
            problem = self._exists(kind, ns, name, w.obj)
            if problem:
                out.append(problem)
        # The Priority admission plugin rejects a pod naming a PriorityClass that does not exist
        # (the two system classes always do).
        priority = spec.get("priorityClassName")
        if priority and priority not in SYSTEM_PRIORITY_CLASSES:
            o = self.by_kind_ns.get(("PriorityClass", None, priority))
            if o is None:
                out.append(f"PriorityClass {priority} does not exist: nothing in the plan creates it")
            elif o.source != w.obj.source and not self._before(o, w.obj, same_release_ok=True):
                out.append(f"PriorityClass {priority} ({o.origin}) is not created before it")
        return out
