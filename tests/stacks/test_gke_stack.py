"""The gke stack end to end under mocks: the committed Pulumi.gke.yaml through the real
__main__.py, driver and GPU-stack variants, strict schemas of every Kubernetes object, Helm values
against upstream chart defaults, and `python -m render gke` offline."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys

import pytest
import yaml

from components import versions
from components.gpu_stack import GKE_DRIVER_ROOT
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE
from config import ConfigError
from render import program
from render.__main__ import kubernetes_objects
from render.program import SECRET_MARKER, Plan
from tests.components.test_helm_values import ALLOWED, _defaults, undeclared_paths
from tests.components.test_kubernetes_objects import _validate
from tests.conftest import PROJECT_DIR
from tests.monitoring_crd_schema import is_custom_resource, validate_custom_resource

RELEASE = "kubernetes:helm.sh/v3:Release"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
NODE_POOL = "gcp:container/nodePool:NodePool"


def _committed_gke() -> dict:
    return json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])


def _with(gke: dict | None = None, gpu: dict | None = None, drop: tuple[str, ...] = ()) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("gke")
    if gke is not None:
        values["gpu-cluster:gke"] = json.dumps(gke)
    if gpu is not None:
        values["gpu-cluster:gpu"] = json.dumps(gpu)
    return {k: v for k, v in values.items() if k not in drop}, secret_keys


def _drivers(*drivers: str) -> dict:
    gke = copy.deepcopy(_committed_gke())
    for pool, driver in zip(gke["gpuPools"], drivers, strict=True):
        pool["driver"] = driver
    return gke


# case -> config (None: the committed stack file)
CASES = {
    "committed": None,
    "installers": lambda: _with(_drivers("installer-cos", "installer-ubuntu")),
    "operator-installer": lambda: _with(_drivers("installer-cos", "installer-cos"), {"stack": "operator"}),
    "operator-none": lambda: _with(_drivers("none", "none"), {"stack": "operator"}),
}


@functools.cache
def plan(case: str) -> Plan:
    cfg = CASES[case]
    return program.run("gke", config=cfg() if cfg else None)


def releases(p: Plan, chart: str) -> list[dict]:
    return [r.inputs for r in p.of_type(RELEASE) if r.inputs.get("chart") == chart]


# ---------------------------------------------------------------------------------------------
# the committed stack


def test_committed_stack_smoke():
    p = plan("committed")
    (cluster,) = p.of_type("gcp:container/cluster:Cluster")
    pools = {r.inputs["name"]: r for r in p.of_type(NODE_POOL)}
    assert set(pools) == {"system", "l4-spot", "a100"}
    assert cluster.inputs["project"] == "my-gpu-project"
    accelerators = {n: r.inputs["nodeConfig"]["guestAccelerators"][0] for n, r in pools.items() if n != "system"}
    assert accelerators["l4-spot"]["type"] == "nvidia-l4"
    assert accelerators["a100"]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "DEFAULT"}
    assert len(p.of_type("gpucluster:gke:GpuNodePool")) == 2
    assert len(p.of_type("gcp:serviceaccount/account:Account")) == 3  # system + one per GPU pool
    # GKE runs the device plugin: no DaemonSet of ours, but GFD and DCGM exporter with GKE's driver path.
    assert p.of_type(DAEMONSET) == []
    (gfd,) = releases(p, versions.NVIDIA_DEVICE_PLUGIN_CHART)
    assert gfd["values"]["nvidiaDriverRoot"] == GKE_DRIVER_ROOT
    (dcgm,) = releases(p, versions.DCGM_EXPORTER_CHART)
    assert dcgm["values"]["extraHostVolumes"] == [{"name": "nvidia-install-dir-host", "hostPath": GKE_DRIVER_ROOT}]
    quotas = [r for r in p.of_type("kubernetes:core/v1:ResourceQuota")]
    assert [q.inputs["metadata"]["namespace"] for q in quotas] == ["gpu-system"]
    # The gate checks the A100 node kept up (min 1); it waits for the GPU pools.
    (job,) = [j for j in p.of_type("kubernetes:batch/v1:Job") if j.inputs["metadata"]["name"] == "gpu-ready"]
    assert job.inputs["spec"]["completions"] == 1
    # The training Job runs on gke as on lab and dev, on the Filestore claim.
    (train,) = [j for j in p.of_type("kubernetes:batch/v1:Job") if j.inputs["metadata"]["name"] == "train"]
    volumes = train.inputs["spec"]["template"]["spec"]["volumes"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v] == ["shared-data"]
    assert p.outputs["training"]["job"] == "training/train"
    (gate,) = p.of_type("gpucluster:gpu:ReadyGate")
    gpu_pool_urns = {r.urn for r in p.of_type(NODE_POOL) if r.inputs["name"] != "system"}
    assert len(gpu_pool_urns) == 2 and gpu_pool_urns <= set(gate.dependencies)
    # Shared storage: Filestore-backed claim of the storage contract.
    (pvc,) = p.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert (pvc.inputs["metadata"]["name"], pvc.inputs["metadata"]["namespace"]) == (CLAIM_NAME, TRAINING_NAMESPACE)
    assert p.outputs["sharedStorage"]["claim"] == f"{TRAINING_NAMESPACE}/{CLAIM_NAME}"
    assert p.outputs["gpuPools"]["a100"] == {
        "machineType": "a2-highgpu-1g", "accelerator": "nvidia-tesla-a100", "gpusPerNode": 1,
        "zones": ["us-central1-a"], "minNodesPerZone": 1, "maxNodesPerZone": 2, "spot": False, "driver": "gke-default",
    }


def test_kubeconfig_output_is_secret():
    p = plan("committed")
    assert p.outputs["kubeconfig"] == SECRET_MARKER
    (provider,) = p.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == SECRET_MARKER
    # every in-cluster object goes through the cluster's provider
    for r in p.resources:
        if r.type.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn), r.name


def test_missing_gcp_project_is_a_config_error():
    with pytest.raises(ConfigError, match="gcp:project: is required"):
        program.run("gke", config=_with(drop=("gcp:project",)))


# ---------------------------------------------------------------------------------------------
# drivers and the GPU stack


def test_installer_daemonsets_per_os():
    p = plan("installers")
    names = sorted(r.inputs["metadata"]["name"] for r in p.of_type(DAEMONSET))
    assert names == ["nvidia-driver-installer-cos", "nvidia-driver-installer-ubuntu"]
    images = {r.inputs["name"]: r.inputs["nodeConfig"]["imageType"] for r in p.of_type(NODE_POOL)}
    assert images == {"system": "COS_CONTAINERD", "l4-spot": "COS_CONTAINERD", "a100": "UBUNTU_CONTAINERD"}
    (gate,) = p.of_type("gpucluster:gpu:ReadyGate")
    installers = {r.urn for r in p.of_type(DAEMONSET)}
    assert len(installers) == 2 and installers <= set(gate.dependencies)


def test_operator_with_google_installer_follows_nvidia_gke_guide():
    p = plan("operator-installer")
    (values,) = [r["values"] for r in releases(p, versions.GPU_OPERATOR_CHART)]
    assert values["driver"]["enabled"] is False
    assert values["hostPaths"] == {"driverInstallDir": GKE_DRIVER_ROOT}
    assert values["toolkit"]["installDir"] == GKE_DRIVER_ROOT
    assert values["cdi"] == {"enabled": True}
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in values["toolkit"]["env"]
    labels = [r.inputs["nodeConfig"]["labels"] for r in p.of_type(NODE_POOL) if r.inputs["name"] != "system"]
    assert all(lb["gke-no-default-nvidia-gpu-device-plugin"] == "true" for lb in labels)
    assert [r.inputs["metadata"]["name"] for r in p.of_type(DAEMONSET)] == ["nvidia-driver-installer-cos"]
    quotas = [q.inputs["metadata"]["namespace"] for q in p.of_type("kubernetes:core/v1:ResourceQuota")]
    assert quotas == ["gpu-operator"]


def test_operator_owning_drivers():
    p = plan("operator-none")
    (values,) = [r["values"] for r in releases(p, versions.GPU_OPERATOR_CHART)]
    assert values["driver"]["enabled"] is True
    assert "hostPaths" not in values and "installDir" not in values["toolkit"]
    assert p.of_type(DAEMONSET) == []
    images = {r.inputs["nodeConfig"]["imageType"] for r in p.of_type(NODE_POOL) if r.inputs["name"] != "system"}
    assert images == {"UBUNTU_CONTAINERD"}


# ---------------------------------------------------------------------------------------------
# schemas and chart values


def _objects():
    return [pytest.param(case, i, id=f"{case}-{o['kind']}-{o['metadata']['name']}")
            for case in CASES for i, o in enumerate(kubernetes_objects(plan(case)))]


@pytest.mark.parametrize("case, index", _objects())
def test_every_object_is_valid(case, index, request):
    obj = kubernetes_objects(plan(case))[index]
    if is_custom_resource(obj):  # strict, against the upstream CRD's schema
        validate_custom_resource(obj, request.getfixturevalue("upstream_dir"))
        return
    _validate(obj, versions.KUBERNETES_DEFAULT.rsplit(".", 1)[0])  # strict, exact minor (Secrets' data masked)


@pytest.mark.parametrize("case", list(CASES))
def test_release_values_declared_upstream(upstream_dir, case):
    gpu_charts = (versions.GPU_OPERATOR_CHART, versions.NVIDIA_DEVICE_PLUGIN_CHART, versions.DCGM_EXPORTER_CHART)
    checked = 0
    for r in plan(case).of_type(RELEASE):
        chart = r.inputs["chart"]
        if chart in gpu_charts:
            assert undeclared_paths(r.inputs["values"], _defaults(upstream_dir, chart), ALLOWED.get(chart)) == [], chart
            checked += 1
    assert checked >= 1


# ---------------------------------------------------------------------------------------------
# python -m render gke


def test_render_gke_offline(tmp_path):
    out = tmp_path / "gke"
    result = subprocess.run([sys.executable, "-m", "render", "gke", "--out", str(out)], cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = (out / "summary.md").read_text()
    for text in ("gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool", "gcp:filestore/instance:Instance",
                 "l4-spot", "a100", "nvidia-tesla-a100", "gke-latest", f"PersistentVolumeClaim `{TRAINING_NAMESPACE}/{CLAIM_NAME}`"):
        assert text in summary, text
    assert '"kubeconfig": "[secret]"' in (out / "plan.json").read_text() or "[secret]" in summary
    for f in (out / "kubernetes").glob("*.yaml"):
        yaml.safe_load(f.read_text())
