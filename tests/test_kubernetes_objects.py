"""Every Kubernetes object a stack applies is valid for the Kubernetes minor it targets, and the
device plugin DaemonSet stays what upstream ships where it matters.

Objects come from `render.__main__.kubernetes_objects(plan)`, i.e. exactly what `python -m render`
writes to kubernetes/*.yaml. They are validated with kubernetes-validate in strict mode (unknown
fields are errors) against the stack's own configured minor; the device plugin DaemonSet, which
every stack deploys, is validated against every supported minor too.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components import versions
from render import program
from render.__main__ import kubernetes_objects

DAEMONSET_TYPE = "kubernetes:apps/v1:DaemonSet"
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"


def _lab_with_cni(cni: str) -> tuple[dict[str, str], list[str]]:
    """The lab stack's config as `pulumi up -s lab` would pass it, with gpu-cluster:cni replaced."""
    values, secret_keys = program.stack_config("lab")
    return {**values, "gpu-cluster:cni": cni}, secret_keys


# case id -> (stack, config override or None for the committed stack file)
CASES: dict[str, tuple[str, Any]] = {
    "lab": ("lab", None),
    "dev": ("dev", None),
    "lab-calico": ("lab", lambda: _lab_with_cni("calico")),
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


def _device_plugin_daemonset(case: str = "lab") -> dict[str, Any]:
    found = [
        obj
        for obj in kubernetes_objects(_plan(case))
        if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == DEVICE_PLUGIN_NAME
    ]
    assert len(found) == 1, f"{case}: expected one {DEVICE_PLUGIN_NAME} DaemonSet, got {len(found)}"
    return found[0]


def _validate(obj: dict[str, Any], minor: str) -> None:
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
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("DaemonSet", DEVICE_PLUGIN_NAME) in kinds


@pytest.mark.parametrize("case", list(CASES))
def test_configured_minor_is_supported(case: str) -> None:
    assert _minor(case) in versions.KUBERNETES_SUPPORTED_MINORS


@pytest.mark.parametrize(("case", "index"), _object_params())
def test_object_is_valid_for_stack_minor(case: str, index: int) -> None:
    obj = kubernetes_objects(_plan(case))[index]
    _validate(obj, _minor(case))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("minor", versions.KUBERNETES_SUPPORTED_MINORS)
def test_device_plugin_daemonset_valid_for_every_supported_minor(case: str, minor: str) -> None:
    _validate(_device_plugin_daemonset(case), minor)


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


def test_device_plugin_same_in_every_stack() -> None:
    """lab, dev and the calico variant deploy the same DaemonSet."""
    lab = _device_plugin_daemonset("lab")
    for case in CASES:
        assert _device_plugin_daemonset(case) == lab, case
