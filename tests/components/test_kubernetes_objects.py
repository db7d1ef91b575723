"""Every Kubernetes object a stack applies is valid for the Kubernetes minor it targets, and the
device plugin DaemonSet stays what upstream ships where it matters.

Objects come from `render.__main__.kubernetes_objects(plan)`, i.e. exactly what `python -m render`
writes to kubernetes/*.yaml. They are validated with kubernetes-validate in strict mode (unknown
fields are errors) against the stack's own configured minor; the device plugin DaemonSet and the
GPU layers' objects (namespaces, time-slicing ConfigMap, GPU-ready gate Job) are validated against
every supported minor too.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components import versions
from render import program
from render.__main__ import kubernetes_objects
from tests.monitoring_crd_schema import is_custom_resource, validate_custom_resource

DAEMONSET_TYPE = "kubernetes:apps/v1:DaemonSet"
DEVICE_PLUGIN_NAME = "gpu-device-plugin"
GPU_NAMESPACE = "gpu-system"
OPERATOR_NAMESPACE = "gpu-operator"
GATE_NAMESPACE = "gpu-cluster-system"
GATE_JOB = "gpu-ready"
SHARING_CONFIGMAP = f"{DEVICE_PLUGIN_NAME}-config"
TIME_SLICING = {"stack": "device-plugin", "sharing": {"mode": "time-slicing", "replicas": 4}}
OPERATOR_TIME_SLICING = {"stack": "operator", "sharing": {"mode": "time-slicing", "replicas": 4}}


def _with(stack: str, **overrides: str) -> tuple[dict[str, str], list[str]]:
    """The stack's config as `pulumi up -s <stack>` would pass it, with some gpu-cluster: keys replaced."""
    values, secret_keys = program.stack_config(stack)
    return {**values, **{f"gpu-cluster:{k}": v for k, v in overrides.items()}}, secret_keys


# case id -> (stack, config override or None for the committed stack file)
CASES: dict[str, tuple[str, Any]] = {
    "lab": ("lab", None),
    "dev": ("dev", None),
    "lab-flannel": ("lab", lambda: _with("lab", cni="flannel")),
    "lab-time-slicing": ("lab", lambda: _with("lab", gpu=json.dumps(TIME_SLICING))),
    "lab-operator-time-slicing": ("lab", lambda: _with("lab", gpu=json.dumps(OPERATOR_TIME_SLICING))),
    "dev-operator": ("dev", lambda: _with("dev", gpu=json.dumps({"stack": "operator"}))),
}
# cases with the device-plugin path (a typed DaemonSet) and their time-slicing replicas
DEVICE_PLUGIN_CASES = {"lab": 1, "dev": 1, "lab-flannel": 1, "lab-time-slicing": 4}
OPERATOR_CASES = ("lab-operator-time-slicing", "dev-operator")
# every (kind, namespace, name) of the GPU layers, per case: nothing more, nothing less
GATE_OBJECTS = {("Namespace", None, GATE_NAMESPACE), ("Job", GATE_NAMESPACE, GATE_JOB)}
GPU_OBJECTS = {
    case: GATE_OBJECTS
    | (
        {("Namespace", None, OPERATOR_NAMESPACE)}
        if case in OPERATOR_CASES
        else {("Namespace", None, GPU_NAMESPACE), ("DaemonSet", GPU_NAMESPACE, DEVICE_PLUGIN_NAME)}
        | ({("ConfigMap", GPU_NAMESPACE, SHARING_CONFIGMAP)} if DEVICE_PLUGIN_CASES[case] > 1 else set())
    )
    for case in CASES
}


def _config(case: str) -> tuple[dict[str, str], list[str]]:
    stack, override = CASES[case]
    return override() if override is not None else program.stack_config(stack)


@functools.cache
def _plan(case: str) -> program.Plan:
    stack, _ = CASES[case]
    return program.run(stack, config=_config(case))


def _minor(case: str) -> str:
    """The Kubernetes minor the case's config targets (what StackConfig.kubernetes_minor gives)."""
    version = _config(case)[0]["gpu-cluster:kubernetesVersion"].lstrip("v")
    return ".".join(version.split(".")[:2])


def _object_id(obj: dict[str, Any]) -> str:
    md = obj["metadata"]
    return f"{obj['kind']}-{md.get('namespace', 'cluster')}-{md['name']}"


def _object_params() -> list[Any]:
    params = []
    for case in CASES:
        for index, obj in enumerate(kubernetes_objects(_plan(case))):
            params.append(pytest.param(case, index, id=f"{case}-{_object_id(obj)}"))
    return params


def _key(obj: dict[str, Any]) -> tuple[str, str | None, str]:
    md = obj["metadata"]
    return obj["kind"], md.get("namespace"), md["name"]


def _find(case: str, kind: str, name: str) -> dict[str, Any]:
    found = [
        obj
        for obj in kubernetes_objects(_plan(case))
        if obj["kind"] == kind and obj["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"{case}: expected one {kind} {name}, got {len(found)}"
    return found[0]


def _device_plugin_daemonset(case: str = "lab") -> dict[str, Any]:
    ds = _find(case, "DaemonSet", DEVICE_PLUGIN_NAME)
    assert ds["metadata"]["namespace"] == GPU_NAMESPACE
    return ds


def _gpu_objects(case: str) -> list[dict[str, Any]]:
    return [o for o in kubernetes_objects(_plan(case)) if _key(o) in GPU_OBJECTS[case]]


def _validate(obj: dict[str, Any], minor: str) -> None:
    # The SDK makes a Secret's whole data/stringData map secret, so the plan shows "[secret]" in
    # its place; validate the rest of the object around an empty map.
    if obj.get("kind") == "Secret":
        obj = {**obj, **{k: {} for k in ("data", "stringData") if obj.get(k) == program.SECRET_MARKER}}
    try:
        used = kubernetes_validate.validate(obj, minor, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{_object_id(obj)} is invalid for Kubernetes {minor}: {err}")
    # validate() silently falls back to the newest older schema; insist on the exact minor.
    assert used == minor, f"validated against the {used} schema instead of {minor}"


@pytest.mark.parametrize("case", list(CASES))
def test_case_has_kubernetes_objects(case: str) -> None:
    objects = kubernetes_objects(_plan(case))
    assert objects, f"{case}: no Kubernetes objects rendered"
    keys = [_key(o) for o in objects]
    assert len(keys) == len(set(keys)), f"{case}: an object is rendered twice"
    # every GPU-layer object is there (so test_object_is_valid_for_stack_minor validates it) ...
    missing = GPU_OBJECTS[case] - set(keys)
    assert not missing, f"{case}: missing {sorted(missing, key=str)}"
    # ... and nothing else lands in the GPU namespaces
    gpu_namespaces = {GPU_NAMESPACE, OPERATOR_NAMESPACE, GATE_NAMESPACE}
    extra = {k for k in keys if (k[1] in gpu_namespaces or k[2] in gpu_namespaces) and k not in GPU_OBJECTS[case]}
    assert not extra, f"{case}: unexpected {sorted(extra, key=str)}"
    assert sum(k[0] == "DaemonSet" and k[2] == DEVICE_PLUGIN_NAME for k in keys) == (case in DEVICE_PLUGIN_CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_configured_minor_is_supported(case: str) -> None:
    assert _minor(case) in versions.KUBERNETES_SUPPORTED_MINORS


@pytest.mark.parametrize(("case", "index"), _object_params())
def test_object_is_valid_for_stack_minor(case: str, index: int, request: pytest.FixtureRequest) -> None:
    obj = kubernetes_objects(_plan(case))[index]
    if is_custom_resource(obj):
        # kubernetes-validate knows no CRDs: strict check against the upstream CRD's schema.
        validate_custom_resource(obj, request.getfixturevalue("upstream_dir"))
        return
    _validate(obj, _minor(case))


@pytest.mark.parametrize("case", list(DEVICE_PLUGIN_CASES))
@pytest.mark.parametrize("minor", versions.KUBERNETES_SUPPORTED_MINORS)
def test_device_plugin_daemonset_valid_for_every_supported_minor(case: str, minor: str) -> None:
    _validate(_device_plugin_daemonset(case), minor)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("minor", versions.KUBERNETES_SUPPORTED_MINORS)
def test_gpu_layer_objects_valid_for_every_supported_minor(case: str, minor: str) -> None:
    objects = _gpu_objects(case)
    assert {_key(o) for o in objects} == GPU_OBJECTS[case]
    for obj in objects:
        _validate(obj, minor)


def test_strict_validation_rejects_an_unknown_job_field() -> None:
    """The Job is really checked field by field: a misplaced key fails."""
    job = json.loads(json.dumps(_find("lab", "Job", GATE_JOB)))
    job["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, _minor("lab"), strict=True)


# --- the GPU layers' objects -------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_namespaces_pod_security(case: str) -> None:
    gpu_ns = OPERATOR_NAMESPACE if case in OPERATOR_CASES else GPU_NAMESPACE
    levels = {
        o["metadata"]["name"]: o["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
        for o in _gpu_objects(case)
        if o["kind"] == "Namespace"
    }
    # GFD and the operator's driver/toolkit need privileged; the gate's check needs nothing.
    assert levels == {gpu_ns: "privileged", GATE_NAMESPACE: "restricted"}


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_ready_gate_job(case: str) -> None:
    job = _find(case, "Job", GATE_JOB)
    assert job["metadata"]["namespace"] == GATE_NAMESPACE
    gpu_nodes = 1 if case.startswith("dev") else 2  # Pulumi.dev.yaml: minikube; Pulumi.lab.yaml: gpu-1, gpu-2
    spec = job["spec"]
    assert spec["completions"] == spec["parallelism"] == gpu_nodes
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    (container,) = pod["containers"]
    assert container["image"] == versions.CUDA_VECTORADD_IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # one pod per GPU node
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]


def test_time_slicing_config_map_is_mounted() -> None:
    ds = _device_plugin_daemonset("lab-time-slicing")
    cm = _find("lab-time-slicing", "ConfigMap", SHARING_CONFIGMAP)
    assert cm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["version"] == "v1"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = pod["containers"]
    (config_file,) = [e["value"] for e in container["env"] if e["name"] == "CONFIG_FILE"]
    mounts = [m for m in container["volumeMounts"] if volumes[m["name"]].get("configMap")]
    assert [volumes[m["name"]]["configMap"]["name"] for m in mounts] == [SHARING_CONFIGMAP]
    assert config_file == f"{mounts[0]['mountPath']}/config.yaml"
    assert mounts[0].get("readOnly") is True


# --- the device plugin DaemonSet against upstream's static manifest ---------------------------


@pytest.fixture(scope="module")
def upstream_daemonset(upstream_dir: Path) -> dict[str, Any]:
    path = upstream_dir / "nvidia-device-plugin" / "nvidia-device-plugin.yml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    found = [d for d in docs if d.get("kind") == "DaemonSet"]
    assert len(found) == 1, f"{path}: expected one DaemonSet"
    return found[0]


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return _device_plugin_daemonset("lab")


def _only_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec["containers"]
    assert len(containers) == 1, "the device plugin pod has one container"
    return containers[0]


def _host_path_mounts(pod_spec: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    """(mountPath, hostPath.path, hostPath.type) of every hostPath volume the container mounts."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    out = set()
    for mount in _only_container(pod_spec).get("volumeMounts", []):
        host_path = volumes[mount["name"]].get("hostPath")
        if host_path:
            out.add((mount["mountPath"], host_path["path"], host_path.get("type")))
    return out


def test_device_plugin_image_is_upstreams(ours: dict[str, Any], upstream_daemonset: dict[str, Any]) -> None:
    upstream_image = _only_container(upstream_daemonset["spec"]["template"]["spec"])["image"]
    assert versions.NVIDIA_DEVICE_PLUGIN_IMAGE == upstream_image
    assert _only_container(ours["spec"]["template"]["spec"])["image"] == upstream_image


def test_device_plugin_host_path_mount_is_upstreams(
    ours: dict[str, Any], upstream_daemonset: dict[str, Any]
) -> None:
    upstream_mounts = _host_path_mounts(upstream_daemonset["spec"]["template"]["spec"])
    assert upstream_mounts == {("/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins", "Directory")}
    assert _host_path_mounts(ours["spec"]["template"]["spec"]) == upstream_mounts


def test_device_plugin_keeps_upstream_tolerations(
    ours: dict[str, Any], upstream_daemonset: dict[str, Any]
) -> None:
    upstream = upstream_daemonset["spec"]["template"]["spec"]["tolerations"]
    assert upstream, "upstream manifest has tolerations"
    mine = ours["spec"]["template"]["spec"].get("tolerations", [])
    missing = [t for t in upstream if t not in mine]
    assert not missing, f"upstream tolerations dropped: {missing}"


def test_device_plugin_priority_class(ours: dict[str, Any], upstream_daemonset: dict[str, Any]) -> None:
    assert upstream_daemonset["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
    assert ours["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


def test_device_plugin_security_context_is_upstreams(
    ours: dict[str, Any], upstream_daemonset: dict[str, Any]
) -> None:
    upstream = _only_container(upstream_daemonset["spec"]["template"]["spec"])["securityContext"]
    mine = _only_container(ours["spec"]["template"]["spec"]).get("securityContext")
    assert mine == upstream
    assert not ours["spec"]["template"]["spec"].get("hostNetwork"), "not on the host network"
    assert not (mine or {}).get("privileged"), "not privileged"


def _without_sharing_config(ds: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet minus what time-slicing adds: CONFIG_FILE and the ConfigMap volume."""
    ds = json.loads(json.dumps(ds))
    pod = ds["spec"]["template"]["spec"]
    config_volumes = {v["name"] for v in pod["volumes"] if "configMap" in v}
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in config_volumes]
    for c in pod["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] not in config_volumes]
        env = [e for e in c.get("env", []) if e["name"] != "CONFIG_FILE"]
        c.pop("env", None)
        if env:
            c["env"] = env
    return ds


def test_device_plugin_same_in_every_stack() -> None:
    """Every device-plugin case deploys the same DaemonSet; time-slicing only adds its config."""
    lab = _device_plugin_daemonset("lab")
    assert _without_sharing_config(lab) == lab
    for case, replicas in DEVICE_PLUGIN_CASES.items():
        ds = _device_plugin_daemonset(case)
        if replicas == 1:
            assert ds == lab, case
        else:
            assert ds != lab, case
            assert _without_sharing_config(ds) == lab, case
