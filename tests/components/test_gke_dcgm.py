"""The DCGM exporter on GKE (gpu.stack device-plugin): the dcgm-exporter chart rendered with our
gke values gives the DaemonSet Google's own GKE manifest describes.

Google's reference for a self-managed dcgm-exporter on GKE, GoogleCloudPlatform/prometheus-engine
examples/nvidia-dcgm/exporter.yaml (linked from
https://cloud.google.com/stackdriver/docs/managed-prometheus/exporters/nvidia-dcgm): GKE nodes have
no NVIDIA container runtime, so the exporter container is `privileged: true` (the GPU device nodes),
mounts the driver from hostPath /home/kubernetes/bin/nvidia at /usr/local/nvidia with
LD_LIBRARY_PATH=/usr/local/nvidia/lib64 (NVML), mounts the kubelet's pod-resources socket, sets
DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE=device-name (GKE's device plugin names GPUs nvidia0, nvidia1,
..., not by UUID), requests no nvidia.com/gpu, and runs on nodes labelled
cloud.google.com/gke-accelerator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import gpu_stack, versions
from tests.components.test_helm_values import ALLOWED, _defaults, undeclared_paths

GOOGLE_DRIVER_DIR = "/home/kubernetes/bin/nvidia"


def render_daemonset(upstream_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
    import helm_python
    from helm_python import _native
    from helm_python.chart import _dumps

    chart_dir = upstream_dir / "charts" / f"dcgm-exporter-{versions.DCGM_EXPORTER_CHART_VERSION}"
    options = {"name": "dcgm-exporter", "namespace": gpu_stack.GPU_NAMESPACE,
               "kube_version": f"v{versions.KUBERNETES_DEFAULT}", "is_install": True,
               "api_versions": ["monitoring.coreos.com/v1"]}
    with helm_python.Chart.load(str(chart_dir)) as chart:
        rendered = json.loads(_native.call_string("helm_render", chart._raw(), _dumps(values), json.dumps(options)))
    (ds,) = [doc for text in rendered.values() for doc in yaml.safe_load_all(text)
             if isinstance(doc, dict) and doc.get("kind") == "DaemonSet"]
    return ds


def exporter(ds: dict[str, Any]) -> dict[str, Any]:
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return container


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.fixture(params=[False, True], ids=["no-servicemonitor", "servicemonitor"])
def gke_ds(request: pytest.FixtureRequest, upstream_dir: Path) -> dict[str, Any]:
    return render_daemonset(upstream_dir, gpu_stack.dcgm_exporter_values(service_monitor=request.param, gke=True))


def test_sees_the_gpus_without_a_container_runtime(gke_ds: dict[str, Any]) -> None:
    container = exporter(gke_ds)
    sc = container["securityContext"]
    assert sc["privileged"] is True
    # The API server rejects privileged with allowPrivilegeEscalation false (the chart's default).
    assert sc.get("allowPrivilegeEscalation") is not False


def test_loads_nvml_from_googles_driver_dir(gke_ds: dict[str, Any]) -> None:
    pod = gke_ds["spec"]["template"]["spec"]
    container = exporter(gke_ds)
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert host_paths[mounts["/usr/local/nvidia"]] == GOOGLE_DRIVER_DIR
    assert env(container)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    # the chart's own mounts are kept: its counters file and the kubelet's pod-resources socket
    assert mounts["/etc/dcgm-exporter/default-counters.csv"] == "exporter-metrics-volume"
    assert host_paths[mounts["/var/lib/kubelet/pod-resources"]] == "/var/lib/kubelet/pod-resources"


def test_maps_gpus_to_pods_by_gke_device_name(gke_ds: dict[str, Any]) -> None:
    values = env(exporter(gke_ds))
    assert values["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert values["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert values["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"] == "device-name"


def test_takes_no_gpu_from_the_workloads(gke_ds: dict[str, Any]) -> None:
    resources = exporter(gke_ds).get("resources", {})
    for part in ("requests", "limits"):
        assert not any(k.startswith("nvidia.com/") for k in resources.get(part, {}))


def test_runs_on_every_gke_gpu_node(gke_ds: dict[str, Any]) -> None:
    pod = gke_ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]} in terms
    assert any(t.get("key") == "nvidia.com/gpu" and t.get("operator") == "Exists" for t in pod["tolerations"])
    # system-node-critical, which GKE admits outside kube-system only under the stack's ResourceQuota
    assert pod["priorityClassName"] in gpu_stack.CRITICAL_PRIORITY_CLASSES


def test_lab_and_dev_keep_the_charts_unprivileged_default(upstream_dir: Path) -> None:
    """Elsewhere the NVIDIA container runtime injects the GPUs: no privileged container."""
    container = exporter(render_daemonset(upstream_dir, gpu_stack.dcgm_exporter_values(service_monitor=True)))
    assert not container["securityContext"].get("privileged")
    assert "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE" not in env(container)


def test_gke_values_declared_upstream(upstream_dir: Path) -> None:
    chart = versions.DCGM_EXPORTER_CHART
    values = gpu_stack.dcgm_exporter_values(service_monitor=True, gke=True)
    assert undeclared_paths(values, _defaults(upstream_dir, chart), ALLOWED.get(chart, {})) == []
