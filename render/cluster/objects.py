"""Every Kubernetes object the cluster would receive from a plan: the program's own objects, each
Helm release rendered offline with the pinned upstream chart (CRDs and hooks included), each
kustomize directory expanded and each install manifest read from the pinned upstream copy.

Charts are rendered by Helm's own Go SDK (the PyPI package helm-python-sdk: no helm binary, no
network) with the release's values, name, namespace and the stack's Kubernetes version, as
`helm install` would render them. One render per release, whatever the number of nodes.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import render.cluster.memo as memo
from components import rdma_network, versions
from components.cluster_addon import as_cluster_addon
from config.chart_source import (
    MULTUS_DAEMONSET,
    TRAINING_OPERATOR_OVERLAY,
    chart_folder,
    chart_name,
    is_local_chart,
    pinned_chart_name,
    pinned_manifest,
)
from render import program

# Resource types that are bundles the provider expands, or patches of objects that already exist.
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
CHART_V4_TYPE = "kubernetes:helm.sh/v4:Chart"
KUSTOMIZE_TYPES = ("kubernetes:kustomize/v2:Directory", "kubernetes:kustomize:Directory")
CONFIGFILE_TYPES = ("kubernetes:yaml/v2:ConfigFile",)
NODE_PATCH_TYPE = "kubernetes:core/v1:NodePatch"
HOOK_ANNOTATION = "helm.sh/hook"


class CheckSetupError(Exception):
    """The check cannot run (upstream charts missing, a chart that does not render): not a verdict."""


@dataclass
class Obj:
    """One object as the API server would receive it, and what creates it."""

    body: dict[str, Any]
    source: str  # URN of the plan resource that creates it (the object, its Helm release, its kustomize dir)
    origin: str  # for messages: "plan", "release monitoring (kube-prometheus-stack 88.5.3)", ...
    hook: str | None = None  # the Helm hook it runs as (pre-install, post-install, ...), if any
    crd_dir: bool = False  # from a chart's crds/ directory (installed before the chart's templates)
    # kustomize/v2 and yaml/v2 components order their own children: CRDs and Namespaces first
    # (pulumi-kubernetes #2894), so a CR or a namespaced object may share their source.
    self_ordered: bool = False

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        ns = (self.body.get("metadata") or {}).get("namespace")
        return str(ns) if ns else None

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass
class Collected:
    objects: list[Obj] = field(default_factory=list)
    node_patches: list[dict[str, Any]] = field(default_factory=list)  # NodePatch inputs (dev labels)
    releases: dict[str, str] = field(default_factory=dict)  # release URN -> chart dir used


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """A safe loader that reads a bare `=` as the string "=" (CRD enums contain it)."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def parse_documents(text: str) -> list[dict[str, Any]]:
    """The mapping documents of a YAML stream, with `kind: List` flattened into its items."""
    out: list[dict[str, Any]] = []
    for doc in yaml.load_all(text, Loader=_Loader):  # noqa: S506 (a safe loader subclass)
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out.extend(item for item in doc["items"] if isinstance(item, dict))
        else:
            out.append(doc)
    return out


@functools.lru_cache(maxsize=1024)
def _parsed_once(text: str) -> tuple[dict[str, Any], ...]:
    """parse_documents, kept on disk too (render/cluster/memo.py): a chart's output is the same text
    from one ./plan to the next. Kept only when JSON gives back exactly what YAML gave (a YAML
    timestamp or a non-string key would not survive the round trip: those texts are parsed anew)."""
    name = memo.key("yaml-documents", text)
    cached = memo.load(name)
    if isinstance(cached, list):
        return tuple(cached)
    docs = parse_documents(text)
    try:
        if json.loads(json.dumps(docs)) == docs:
            memo.store(name, docs)
    except (TypeError, ValueError):
        pass
    return tuple(docs)


def _parsed(text: str) -> list[dict[str, Any]]:
    """parse_documents, memoised (the same chart output recurs across a test run); fresh copies."""
    return copy.deepcopy(list(_parsed_once(text)))


def chart_dir(upstream: Path, chart: str, version: str) -> Path:
    """The chart a release installs: its folder when it names one (gpu-cluster:chartsDir, which the
    config checked), else the vendored copy upstream/charts/<chart>-<version> (config/chart_source.py)."""
    path = Path(chart) if is_local_chart(chart) else upstream / "charts" / chart_folder(chart, version)
    if not (path / "Chart.yaml").is_file():
        raise CheckSetupError(
            f"chart {chart_name(chart)} {version}: no pinned copy at {path} (see ../shared/upstream/SOURCES.md)"
        )
    return path


def render_chart(path: Path, values: dict[str, Any], name: str, namespace: str,
                 kube_version: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(template path -> manifest, crds/ files) as Helm renders them for an install."""
    return _render_chart(path, json.dumps(values, sort_keys=True), name, namespace, kube_version)


@functools.lru_cache(maxsize=64)
def _render_chart(path: Path, values_json: str, name: str, namespace: str,
                  kube_version: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    values = json.loads(values_json)
    try:
        import helm_python
        from helm_python import _native  # the SDK's render entry point, which also takes kube_version
        from helm_python.chart import _dumps
    except ImportError as err:  # pragma: no cover - dev requirement
        raise CheckSetupError(f"helm-python-sdk is not installed ({err}); pip install -r requirements-plan.txt") from err
    # Chart.render() does not pass kube_version on; Helm's own options struct does (Capabilities
    # .KubeVersion, which charts compare against), so the native call is made with it directly.
    options = {"name": name, "namespace": namespace, "is_install": True, "kube_version": f"v{kube_version}"}
    try:
        with helm_python.Chart.load(str(path)) as chart:
            rendered = json.loads(_native.call_string("helm_render", chart._raw(), _dumps(values), json.dumps(options)))
            crds = list(chart.crds)
    except helm_python.HelmError as err:
        raise CheckSetupError(f"chart {path.name} does not render with the release's values: {err}") from err
    return rendered, crds


def _enabled_crds(chart_name: str, rendered: dict[str, str], crds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CRD files of the chart and of the subcharts Helm actually enabled (whose templates rendered)."""
    subcharts = {p.split("/charts/", 1)[1].split("/", 1)[0] for p in rendered if "/charts/" in p}
    keep = []
    for crd in crds:
        filename = str(crd.get("filename", ""))
        if "charts/" in filename:
            sub = filename.split("charts/", 1)[1].split("/", 1)[0]
            if sub not in subcharts:
                continue
        keep.append(crd)
    return keep


def _release_objects(r: program.Registration, upstream: Path, kube_version: str) -> list[Obj]:
    inputs = r.inputs
    chart, version = str(inputs.get("chart", "")), str(inputs.get("version", ""))
    name = str(inputs.get("name") or r.name)
    namespace = str(inputs.get("namespace") or "default")
    path = chart_dir(upstream, chart, version)
    rendered, crds = render_chart(path, inputs.get("values") or {}, name, namespace, kube_version)
    origin = f"release {name} ({chart} {version})"
    out: list[Obj] = []
    if not inputs.get("skipCrds"):
        for crd in _enabled_crds(chart, rendered, crds):
            out += [Obj(doc, r.urn, origin, crd_dir=True) for doc in _parsed(str(crd.get("data", "")))]
    for template in sorted(rendered):
        if template.endswith((".txt", ".md")):
            continue
        for doc in _parsed(rendered[template]):
            hook = ((doc.get("metadata") or {}).get("annotations") or {}).get(HOOK_ANNOTATION)
            if hook and "test" in {h.strip() for h in str(hook).split(",")}:
                continue  # `helm test` pods never run on install
            md = doc.setdefault("metadata", {})
            if _namespaced_guess(doc) and not md.get("namespace"):
                md["namespace"] = namespace  # Helm installs un-namespaced templates into the release's
            out.append(Obj(doc, r.urn, origin, hook=str(hook) if hook else None))
    return out


# Kinds that are never namespaced (the API server ignores or rejects a namespace on them).
CLUSTER_SCOPED = {
    "Namespace", "Node", "PersistentVolume", "StorageClass", "CSIDriver", "CSINode", "ClusterRole",
    "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass", "RuntimeClass",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "APIService", "VolumeSnapshotClass", "IngressClass",
    "ClusterPolicy", "NodeFeatureRule", "NVIDIADriver", "GPUCluster", "IPPool", "Installation",
    "APIServer", "Goldmane", "Whisker", "ImageSet", "TigeraStatus", "FelixConfiguration",
    "ClusterIssuer", "ComputeDomain", "DeviceClass", "ResourceSlice",
}


def _namespaced_guess(doc: dict[str, Any]) -> bool:
    return doc.get("kind") not in CLUSTER_SCOPED


# --- kustomize -----------------------------------------------------------------------------------
# The program installs the Kubeflow training operator from its pinned upstream overlay; the check
# expands the vendored copy of that overlay with the few kustomize features it uses (resources,
# namespace, images, labels, secretGenerator, strategic-merge patches of whole objects).

def _addon(d: dict[str, Any]) -> dict[str, Any]:
    return as_cluster_addon(d) if d.get("kind") == "Deployment" else d


def _kustomize_transforms() -> dict[Any, Any]:
    """pinned overlay (its URL or its copy under chartsDir) -> the program's own `transforms`
    function for its children, applied here as Pulumi applies it (a transform's effect is not in the
    plan: only that one is registered)."""
    return {TRAINING_OPERATOR_OVERLAY: _addon}


def _chart_transforms() -> dict[str, Any]:
    """helm/v4 chart -> the program's `transforms` function for its children (as above)."""
    return {chart_name(versions.WHEREABOUTS_CHART): _addon}


KUSTOMIZE_SOURCES = {
    # remote kustomize URL prefix (a repository at the pinned tag) -> vendored directory under upstream/charts
    f"{TRAINING_OPERATOR_OVERLAY.repo}//": f"{TRAINING_OPERATOR_OVERLAY.folder}/",
}


def _kustomize_path(directory: str, upstream: Path, project_dir: Path) -> Path:
    """The folder kustomize expands: a local one as named (chartsDir's copy included), a pinned
    overlay's URL as its vendored copy."""
    base = directory.split("?", 1)[0]
    for prefix, vendored in KUSTOMIZE_SOURCES.items():
        if base.startswith(prefix):
            return upstream / "charts" / (vendored + base[len(prefix):])
    path = Path(base)
    return path if path.is_absolute() else project_dir / path


def _deep_merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _deep_merge(base.get(k), v) if k in base else v
        return out
    return over


def kustomize(path: Path, upstream: Path, project_dir: Path, depth: int = 0) -> list[dict[str, Any]]:
    if depth > 8:
        raise CheckSetupError(f"kustomize: {path}: resources nest too deep")
    kfile = path / "kustomization.yaml"
    if not kfile.is_file():
        raise CheckSetupError(f"kustomize: no kustomization.yaml in {path}")
    k = yaml.safe_load(kfile.read_text()) or {}
    docs: list[dict[str, Any]] = []
    for res in k.get("resources") or []:
        if "://" in res:
            target = _kustomize_path(res, upstream, project_dir)
        else:
            target = (path / res).resolve()
        if target.is_dir():
            docs += kustomize(target, upstream, project_dir, depth + 1)
        elif target.is_file():
            docs += parse_documents(target.read_text())
        else:
            raise CheckSetupError(f"kustomize: {path}: resource {res} not found ({target})")
    for gen in k.get("secretGenerator") or []:
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": gen["name"]},
                     "type": gen.get("type", "Opaque")})
    for patch in k.get("patches") or k.get("patchesStrategicMerge") or []:
        text = (path / patch["path"]).read_text() if isinstance(patch, dict) and "path" in patch else (
            patch.get("patch") if isinstance(patch, dict) else (path / patch).read_text())
        body = yaml.safe_load(text)
        if not isinstance(body, dict):
            continue  # JSON 6902 op lists (the webhook's caBundle patch) do not change what is checked
        for i, doc in enumerate(docs):
            if doc.get("kind") == body.get("kind") and doc.get("metadata", {}).get("name") == body.get("metadata", {}).get("name"):
                docs[i] = _deep_merge(doc, body)
    for label in k.get("labels") or []:
        pairs = label.get("pairs") or {}
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
            if label.get("includeSelectors") and doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
                doc["spec"].setdefault("selector", {}).setdefault("matchLabels", {}).update(pairs)
                doc["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    for image in k.get("images") or []:
        for doc in docs:
            for c in _containers(doc):
                ref = c.get("image", "")
                if ref.split(":", 1)[0] == image["name"]:
                    c["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    if k.get("namespace"):
        for doc in docs:
            if _namespaced_guess(doc):
                doc.setdefault("metadata", {})["namespace"] = k["namespace"]
            if doc.get("kind") in ("ClusterRoleBinding", "RoleBinding"):
                for s in doc.get("subjects") or []:
                    if s.get("kind") == "ServiceAccount":
                        s["namespace"] = k["namespace"]
    return docs


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]


# --- manifest files ------------------------------------------------------------------------------
# Upstream install manifests the program applies from a pinned URL (yaml/v2 ConfigFile): the check
# reads the vendored copy of the same file and applies the program's own transform.

def _configfile_transforms() -> dict[Any, Any]:
    """pinned manifest -> the program's transform of each document."""
    return {MULTUS_DAEMONSET: rdma_network.pin_multus}


def configfile_documents(file: str, upstream: Path, transforms: bool) -> list[dict[str, Any]]:
    """The documents of a ConfigFile's `file`: its URL's vendored copy (upstream/charts is laid out
    as chartsDir is), or the copy under chartsDir that it names."""
    pinned = pinned_manifest(file)
    if pinned is None:
        raise CheckSetupError(f"yaml ConfigFile {file}: no vendored copy known to the check (render/cluster/objects.py)")
    transform = _configfile_transforms()[pinned]
    path = Path(file) if is_local_chart(file) else pinned.local(upstream / "charts")
    if not path.is_file():
        raise CheckSetupError(f"yaml ConfigFile {file}: no pinned copy at {path} (see ../shared/upstream/SOURCES.md)")
    docs = parse_documents(path.read_text())
    return [transform(d) for d in docs] if transforms else docs


# --- the plan ------------------------------------------------------------------------------------

def collect(plan: program.Plan, upstream: Path, kube_version: str,
            project_dir: Path = program.PROJECT_DIR) -> Collected:
    out = Collected()
    for r in plan.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith("pulumi:providers:"):
            continue
        if r.type == CHART_V4_TYPE:
            objs = _release_objects(r, upstream, kube_version)
            if r.transforms:
                transform = _chart_transforms().get(
                    pinned_chart_name(str(r.inputs.get("chart", "")), str(r.inputs.get("version", ""))))
                if transform is None:
                    raise CheckSetupError(f"{r.name}: its children are changed by a transform the check does not know")
                for o in objs:
                    o.body = transform(o.body)
            for o in objs:
                o.self_ordered = True  # a v4 Chart applies its CRDs and namespaces first, like yaml/v2
            out.objects += objs
            out.releases[r.urn] = str(chart_dir(upstream, str(r.inputs.get("chart")), str(r.inputs.get("version"))))
        elif r.type == RELEASE_TYPE:
            out.objects += _release_objects(r, upstream, kube_version)
            out.releases[r.urn] = str(chart_dir(upstream, str(r.inputs.get("chart")), str(r.inputs.get("version"))))
        elif r.type in KUSTOMIZE_TYPES:
            directory = str(r.inputs.get("directory", ""))
            docs = kustomize(_kustomize_path(directory, upstream, project_dir), upstream, project_dir)
            if r.transforms:
                transform = _kustomize_transforms().get(pinned_manifest(directory))
                if transform is None:
                    raise CheckSetupError(f"{r.name}: its children are changed by a transform the check does not know")
                docs = [transform(d) for d in docs]
            out.objects += [Obj(d, r.urn, f"kustomize {r.name}", self_ordered=True) for d in docs]
        elif r.type in CONFIGFILE_TYPES:
            docs = configfile_documents(str(r.inputs.get("file", "")), upstream, bool(r.transforms))
            out.objects += [Obj(d, r.urn, f"manifest {r.name}", self_ordered=True) for d in docs]
        elif r.type == NODE_PATCH_TYPE:
            out.node_patches.append(r.inputs)
        elif r.type.endswith("Patch"):
            continue
        else:
            body = {k: v for k, v in r.inputs.items() if k != "name"}
            body.setdefault("metadata", {}).setdefault("name", r.name)
            for key in ("data", "stringData"):  # a secret map is masked whole in the plan
                if body.get(key) == program.SECRET_MARKER:
                    body[key] = {}
            out.objects.append(Obj(body, r.urn, "plan"))
    return out
