"""No pod of `pulumi up -s lab` stays Pending on the taints lab puts on its nodes (issue 11).

lab keeps kubeadm's node-role.kubernetes.io/control-plane:NoSchedule on the control plane and taints
GPU workers nvidia.com/gpu=present:NoSchedule (gpuTaint), so no node is untainted. The nodes here
are built from the kubeadm configs the program sends (taints, kubelet --node-labels) plus the
labels kubeadm and the kubelet add themselves; every pod template is the real one: the Helm charts
rendered offline from the pinned upstream chart with the values of the lab plan, the typed
manifests of the plan, and the upstream training-operator Deployment through the program's
transform. A small predicate (taints with NoSchedule/NoExecute tolerated, required node affinity
and nodeSelector matched) says where each pod may run:

  - cluster add-ons (Deployments, StatefulSets, Jobs, Prometheus/Alertmanager): on some node;
  - GPU node agents (DaemonSets of the GPU charts, the device plugin, the operator's operands) and
    the GPU-ready gate: on every GPU node, a control plane with `gpus: 1` included;
  - the training and acceptance Jobs: on as many GPU nodes as `training.nodes`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components import versions
from components.lab import kubeadm
from config import LabStack, parse
from config.lab import Role
from config.scheduling_contract import CONTROL_PLANE_TAINT, GPU_TAINT, addon_affinity, addon_tolerations
from render import program
from render.__main__ import kubernetes_objects
from stacks.addons import ACCEPTANCE_JOB, TRAINING_JOB
from stacks.lab import kubeadm_settings

RELEASE = "kubernetes:helm.sh/v3:Release"
POD_OWNERS = ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet")
# The prometheus-operator copies these custom resources' spec (tolerations, affinity, nodeSelector)
# into the StatefulSets it creates.
POD_CRS = ("Prometheus", "Alertmanager", "ThanosRuler")
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
GPU_CHARTS = (versions.NVIDIA_DEVICE_PLUGIN_CHART, versions.DCGM_EXPORTER_CHART, versions.GPU_OPERATOR_CHART)


# ------------------------------------------------------------------------------------------------
# a scheduler's two filters: taints and required node affinity


def tolerates(tolerations: list[dict[str, Any]] | None, taint: dict[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint` (Kubernetes' matching rules)."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        operator = t.get("operator", "Equal")
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if operator == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def fits(pod: dict[str, Any], node: Node) -> bool:
    """Whether the scheduler's taint and node-affinity filters admit `pod` (a pod spec) on `node`."""
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerates(pod.get("tolerations"), taint):
            return False
    if any(node.labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        return any(all(_expression_matches(e, node.labels) for e in term.get("matchExpressions") or [])
                   for term in required["nodeSelectorTerms"])
    return True


class Node:
    def __init__(self, name: str, labels: dict[str, str], taints: list[dict[str, Any]], gpu: bool):
        self.name, self.labels, self.taints, self.gpu = name, labels, taints, gpu

    def __repr__(self) -> str:
        return f"Node({self.name}, taints={[t['key'] for t in self.taints]})"


def lab_nodes(cfg: LabStack) -> list[Node]:
    """The nodes kubeadm registers for this config: taints and --node-labels from the program's
    kubeadm files; the role label kubeadm adds to control planes; the kubelet's os/hostname labels."""
    first, cluster = cfg.control_planes[0], kubeadm_settings(cfg)
    nodes = []
    for host in cfg.hosts:
        if host is first:
            docs = list(yaml.safe_load_all(kubeadm.init_config(cluster, first)))
        else:
            docs = list(yaml.safe_load_all(kubeadm.join_config_template(cluster, host)))
        registration = next(d for d in docs if d and d.get("kind") in ("InitConfiguration", "JoinConfiguration"))[
            "nodeRegistration"]
        labels = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": host.name}
        for arg in registration.get("kubeletExtraArgs") or []:
            if arg["name"] == "node-labels":
                labels.update(dict(pair.split("=", 1) for pair in arg["value"].split(",")))
        if host.role is Role.CONTROL_PLANE:
            labels[CONTROL_PLANE_LABEL] = ""
        nodes.append(Node(host.name, labels, list(registration.get("taints") or []), host.is_gpu))
    return nodes


def test_the_predicate_models_kubernetes() -> None:
    cp = Node("cp", {CONTROL_PLANE_LABEL: ""}, [CONTROL_PLANE_TAINT.as_kubernetes()], gpu=False)
    gpu = Node("gpu", {"nvidia.com/gpu.present": "true"}, [GPU_TAINT.as_kubernetes()], gpu=True)
    assert not fits({}, cp) and not fits({}, gpu)
    assert fits({"tolerations": [{"operator": "Exists"}]}, cp)
    assert fits({"tolerations": [{"key": CONTROL_PLANE_LABEL, "operator": "Equal", "value": "", "effect": "NoSchedule"}]}, cp)
    assert not fits({"tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}, cp)
    assert fits({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]}, gpu)
    assert not fits({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "x"}]}, gpu)
    assert not fits({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]}, gpu)
    gpu_only = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}
    anywhere = [{"operator": "Exists"}]
    assert fits({"tolerations": anywhere, "affinity": gpu_only}, gpu)
    assert not fits({"tolerations": anywhere, "affinity": gpu_only}, cp)
    assert not fits({"tolerations": anywhere, "nodeSelector": {"kubernetes.io/os": "linux"}}, cp)


# ------------------------------------------------------------------------------------------------
# plans and their pods


def _lab_config(overrides: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("lab")
    return {**values, **{f"gpu-cluster:{k}": json.dumps(v) for k, v in overrides.items()}}, secret_keys


def _parse_stack_values(stack_config: tuple[dict[str, str], list[str]]) -> LabStack:
    """The validated model of a stack config map (what __main__.py parses)."""
    values, secret_full_keys = stack_config
    secrets = {k.split(":", 1)[1] for k in secret_full_keys}
    raw: dict[str, Any] = {}
    for full_key, value in values.items():
        key = full_key.split(":", 1)[1]
        if full_key.startswith("gpu-cluster:") and key not in secrets:
            try:
                raw[key] = json.loads(value)
            except ValueError:
                raw[key] = value
    cfg = parse(raw, secrets)
    assert isinstance(cfg, LabStack)
    return cfg


def _gpu_control_plane_hosts() -> list[dict[str, Any]]:
    """The committed lab's hosts with a GPU in the control plane too (seed 000: a GPU in every node)."""
    hosts = json.loads(program.stack_config("lab")[0]["gpu-cluster:hosts"])
    return [{**h, "gpus": 1} if h["role"] == "control-plane" else h for h in hosts]


# variant -> config keys replaced in the committed lab stack
VARIANTS: dict[str, dict[str, Any]] = {
    "lab": {},
    "lab-operator": {"gpu": {"stack": "operator", "sharing": {"mode": "none"}}},
    "lab-pytorchjob": {"training": {**json.loads(program.stack_config("lab")[0]["gpu-cluster:training"]),
                                    "launcher": "pytorchjob"}, "acceptance": {"nccl": False}},
    # B: a GPU on the control plane, every GPU node in the training run
    "lab-gpu-control-plane": {"hosts": _gpu_control_plane_hosts(),
                              "training": {**json.loads(program.stack_config("lab")[0]["gpu-cluster:training"]),
                                           "nodes": 3}},
    "lab-gpu-control-plane-operator": {"hosts": _gpu_control_plane_hosts(),
                                       "gpu": {"stack": "operator", "sharing": {"mode": "none"}}},
}


@functools.cache
def plan(variant: str) -> program.Plan:
    return program.run("lab", config=_lab_config(VARIANTS[variant]))


@functools.cache
def config(variant: str) -> LabStack:
    return _parse_stack_values(_lab_config(VARIANTS[variant]))


def nodes(variant: str) -> list[Node]:
    return lab_nodes(config(variant))


def releases(variant: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan(variant).of_type(RELEASE)]


@functools.cache
def _render(upstream_dir: Path, chart: str, version: str, name: str, namespace: str, values_json: str) -> tuple[Any, ...]:
    helm_python = pytest.importorskip("helm_python")
    from helm_python import _native
    from helm_python.chart import _dumps

    chart_dir = upstream_dir / "charts" / f"{chart}-{version}"
    assert chart_dir.is_dir(), f"no vendored chart {chart_dir.name} under {upstream_dir / 'charts'}"
    with helm_python.Chart.load(str(chart_dir)) as c:
        rendered = json.loads(_native.call_string("helm_render", c._raw(), _dumps(json.loads(values_json)), json.dumps(
            {"name": name, "namespace": namespace, "kube_version": "v1.34.2", "is_install": True})))
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    return tuple(docs)


def rendered(upstream_dir: Path, release: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart of a Release of the plan, rendered offline with the values the plan gives it."""
    return list(_render(upstream_dir, release["chart"], release["version"], release["name"], release["namespace"],
                        json.dumps(release.get("values") or {}, sort_keys=True)))


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs an object makes (a workload's template, a PyTorchJob's replicas, a CR's spec)."""
    if obj["kind"] in POD_OWNERS:
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] in POD_CRS:
        return [obj["spec"]]
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    return []


def where(pod: dict[str, Any], variant: str) -> list[str]:
    return [n.name for n in nodes(variant) if fits(pod, n)]


def gpu_nodes(variant: str) -> list[str]:
    return [n.name for n in nodes(variant) if n.gpu]


def _chart_params() -> list[Any]:
    return [pytest.param(v, r["chart"], id=f"{v}-{r['chart']}") for v in VARIANTS for r in releases(v)]


# ------------------------------------------------------------------------------------------------
# A: cluster add-ons


def test_lab_taints_every_node_as_the_issue_says() -> None:
    assert all(n.taints for n in nodes("lab"))
    (cp,) = [n for n in nodes("lab") if CONTROL_PLANE_LABEL in n.labels]
    assert cp.taints == [CONTROL_PLANE_TAINT.as_kubernetes()] and not cp.gpu


@pytest.mark.parametrize(("variant", "chart"), _chart_params())
def test_every_chart_pod_has_a_node(upstream_dir: Path, variant: str, chart: str) -> None:
    """Each Deployment, StatefulSet, Job (hooks included) and Prometheus/Alertmanager of the chart
    fits some node; each DaemonSet of a GPU chart fits every GPU node."""
    (release,) = [r for r in releases(variant) if r["chart"] == chart]
    checked = 0
    for obj in rendered(upstream_dir, release):
        for pod in pod_specs(obj):
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            if obj["kind"] == "DaemonSet":
                if chart in GPU_CHARTS:
                    assert set(gpu_nodes(variant)) <= set(where(pod, variant)), (name, where(pod, variant))
                continue
            checked += 1
            assert where(pod, variant), f"{name} fits no node of {nodes(variant)}: tolerations {pod.get('tolerations')}"
    if chart == versions.KUBE_PROMETHEUS_STACK_CHART:
        assert checked >= 7  # grafana, kube-state-metrics, operator, 2 webhook Jobs, Prometheus, Alertmanager


def test_monitoring_pods_tolerate_the_control_plane_and_prefer_it(upstream_dir: Path) -> None:
    (release,) = [r for r in releases("lab") if r["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART]
    cp_taint = CONTROL_PLANE_TAINT.as_kubernetes()
    names = set()
    for obj in rendered(upstream_dir, release):
        if obj["kind"] in ("Deployment", "Job", *POD_CRS):
            (pod,) = pod_specs(obj)
            names.add(obj["metadata"]["name"])
            assert tolerates(pod.get("tolerations"), cp_taint), obj["metadata"]["name"]
            preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            keys = {e["key"] for term in preferred for e in term["preference"]["matchExpressions"]}
            assert CONTROL_PLANE_LABEL in keys and "nvidia.com/gpu.present" in keys
            assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["nodeAffinity"]
    assert {"monitoring-grafana", "monitoring-kube-state-metrics", "monitoring-kube-prometheus-operator",
            "monitoring-kube-prometheus-admission-create", "monitoring-kube-prometheus-admission-patch",
            "monitoring-kube-prometheus-prometheus", "monitoring-kube-prometheus-alertmanager"} <= names


def test_add_on_preference_picks_the_cpu_control_plane() -> None:
    def score(node: Node) -> int:
        terms = addon_affinity()["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        return sum(t["weight"] for t in terms
                   if all(_expression_matches(e, node.labels) for e in t["preference"]["matchExpressions"]))

    pod = {"tolerations": addon_tolerations(), "affinity": addon_affinity()}
    lab = {n.name: n for n in nodes("lab") if fits(pod, n)}
    assert list(lab) == ["cp-1"]
    # without the GPU taint the GPU workers are feasible too, but the control plane scores highest
    untainted = lab_nodes(_parse_stack_values(_lab_config({"gpuTaint": False})))
    best = max((n for n in untainted if fits(pod, n)), key=score)
    assert best.name == "cp-1" and all(score(n) < score(best) for n in untainted if n is not best)


def test_training_operator_deployment_fits_a_lab_node(upstream_dir: Path, mocks: Any, monkeypatch: Any) -> None:
    """The upstream kustomize Deployment through the transform TrainingOperator applies to it."""
    from components import cluster_addon
    from components.training import job as training_job

    manifests = upstream_dir / "charts" / f"training-operator-{versions.TRAINING_OPERATOR_VERSION}" / "manifests"
    deployments = [d for p in sorted(manifests.rglob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
                   if isinstance(d, dict) and d.get("kind") == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == ["training-operator"]
    (upstream,) = deployments
    assert not where(upstream["spec"]["template"]["spec"], "lab")  # why the issue exists
    args = pulumi.ResourceTransformArgs(custom=True, type_=cluster_addon.DEPLOYMENT_TYPE, name="training-operator",
                                        props=upstream, opts=pulumi.ResourceOptions())
    result = training_job.tolerate_control_plane(args)
    assert result is not None
    assert where(result.props["spec"]["template"]["spec"], "lab") == ["cp-1"]
    assert result.props["spec"]["template"]["spec"]["containers"] == upstream["spec"]["template"]["spec"]["containers"]
    assert "tolerations" not in upstream["spec"]["template"]["spec"]  # the input is not modified
    other = pulumi.ResourceTransformArgs(custom=True, type_="kubernetes:core/v1:Service", name="svc",
                                         props={"spec": {}}, opts=pulumi.ResourceOptions())
    assert training_job.tolerate_control_plane(other) is None

    # ...and TrainingOperator hands that transform to its kustomize Directory
    seen: dict[str, Any] = {}

    class FakeDirectory:
        def __init__(self, name: str, directory: str, opts: pulumi.ResourceOptions) -> None:
            seen.update(directory=directory, transforms=list(opts.transforms or []))

    monkeypatch.setattr(training_job.k8s.kustomize.v2, "Directory", FakeDirectory)
    training_job.TrainingOperator("training-operator")
    assert seen == {"directory": versions.TRAINING_OPERATOR_KUSTOMIZE,
                    "transforms": [training_job.tolerate_control_plane]}


def test_nfs_csi_controller_fits_a_lab_node(upstream_dir: Path) -> None:
    (release,) = [r for r in releases("lab") if r["chart"] == versions.CSI_DRIVER_NFS_CHART]
    (controller,) = [o for o in rendered(upstream_dir, release) if o["kind"] == "Deployment"]
    assert "cp-1" in where(controller["spec"]["template"]["spec"], "lab")


# ------------------------------------------------------------------------------------------------
# B: a GPU on the control plane


def test_the_gpu_control_plane_is_a_gpu_node_the_gate_counts() -> None:
    cfg = config("lab-gpu-control-plane")
    assert cfg.gpu_node_count == 3 and gpu_nodes("lab-gpu-control-plane") == ["cp-1", "gpu-1", "gpu-2"]
    (cp,) = [n for n in nodes("lab-gpu-control-plane") if n.name == "cp-1"]
    assert cp.taints == [CONTROL_PLANE_TAINT.as_kubernetes()] and cp.labels["nvidia.com/gpu.present"] == "true"


@pytest.mark.parametrize("variant", ["lab", "lab-gpu-control-plane"])
def test_device_plugin_runs_on_every_gpu_node(variant: str) -> None:
    (ds,) = [o for o in kubernetes_objects(plan(variant)) if o["kind"] == "DaemonSet"]
    assert where(pod_specs(ds)[0], variant) == gpu_nodes(variant)


@pytest.mark.parametrize("variant", ["lab", "lab-gpu-control-plane", "lab-gpu-control-plane-operator"])
def test_ready_gate_reaches_every_gpu_node(variant: str) -> None:
    (gate,) = [o for o in kubernetes_objects(plan(variant)) if o["kind"] == "Job" and o["metadata"]["name"] == "gpu-ready"]
    assert gate["spec"]["completions"] == len(gpu_nodes(variant))
    # required anti-affinity: one pod per node, so it completes only if every GPU node admits one
    assert where(pod_specs(gate)[0], variant) == gpu_nodes(variant)


@pytest.mark.parametrize("variant", ["lab", "lab-pytorchjob", "lab-gpu-control-plane"])
def test_training_and_acceptance_pods_find_their_nodes(variant: str) -> None:
    cfg = config(variant)
    jobs = [o for o in kubernetes_objects(plan(variant))
            if o["kind"] in ("Job", "PyTorchJob") and o["metadata"]["name"] in (TRAINING_JOB, ACCEPTANCE_JOB)]
    assert jobs
    for job in jobs:
        for pod in pod_specs(job):
            assert len(where(pod, variant)) >= cfg.training.nodes, (job["metadata"]["name"], where(pod, variant))
            assert set(where(pod, variant)) <= set(gpu_nodes(variant))
            # workers first: the control plane's GPU only when the run needs that node
            preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            assert {"key": CONTROL_PLANE_LABEL, "operator": "DoesNotExist"} in [
                e for term in preferred for e in term["preference"]["matchExpressions"]]


def test_operator_operands_tolerate_every_gpu_node(upstream_dir: Path) -> None:
    (release,) = [r for r in releases("lab-gpu-control-plane-operator") if r["chart"] == versions.GPU_OPERATOR_CHART]
    (policy,) = [o for o in rendered(upstream_dir, release) if o["kind"] == "ClusterPolicy"]
    tolerations = policy["spec"]["daemonsets"]["tolerations"]
    for node in nodes("lab-gpu-control-plane-operator"):
        if node.gpu:
            assert all(tolerates(tolerations, t) for t in node.taints), node
