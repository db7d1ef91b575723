"""GpuSoftwareStack: what makes GPUs usable in the cluster, by one of two paths (gpu.stack).

device-plugin: drivers live on the hosts (lab node prep, GKE, or the dev cluster's nodes). This
  program's typed device plugin DaemonSet (its config file carries time-slicing, or the MIG
  strategy for GPUs the admin has already partitioned with `nvidia-smi mig`), GPU Feature Discovery
  with Node Feature Discovery from the device plugin's own chart (its device plugin disabled; GFD
  keeps the chart's default node affinity, which already admits only nodes NFD labels
  feature.node.kubernetes.io/pci-10de.present (an NVIDIA PCI device) or nodes labelled
  nvidia.com/gpu.present=true, and gets the same MIG strategy), and the DCGM exporter chart with
  its Service and pod labels on metrics (its ServiceMonitor once a monitoring layer provides the
  prometheus-operator CRDs: `service_monitor`), pinned to GPU nodes by node affinity (the chart
  has none: on a CPU node the exporter finds no GPU and crash-loops).
Both paths: the DCGM ServiceMonitor copies the scraped pod's node name to a `node` label
  (the exporter's own `Hostname` is the node only when the exporter is given NODE_NAME, otherwise
  its pod's host name); the alerts and dashboards use `node`.
operator: the NVIDIA GPU Operator Helm release owns driver (unless the hosts bring one), container
  toolkit, device plugin, DCGM exporter (pod labels; ServiceMonitor as above), GFD and MIG manager.
  In mode mig the MIG manager partitions each GPU node by its nvidia.com/mig.config label, which
  this stack patches onto the named GPU nodes (lab, dev) with gpu.sharing.migProfile; on GKE the
  GPU pools carry it. ClusterPolicy's migManager.config.default stays all-disabled (all its CRD
  admits besides ""): the layout of a MIG-capable node nobody labelled.

On GKE (DriverSource.GKE or OPERATOR_ON_GKE): GKE runs its own device plugin, so the
device-plugin path deploys only GFD and the DCGM exporter, both pointed at the driver in
/home/kubernetes/bin/nvidia (the exporter as
Google's own GKE manifest runs it: privileged, see dcgm_exporter_values); the operator path
follows NVIDIA's "GPU Operator with Google GKE" values; and a ResourceQuota admits the charts'
system-node-critical pods in the namespace (GKE allows them elsewhere than kube-system only so).

Both namespaces are labelled Pod Security `privileged`: GFD reads host PCI/vGPU data and the
operator's driver and toolkit containers load kernel modules and write host paths; neither can run
under a stricter level. Scheduling (config/scheduling_contract.py): node agents (GFD, NFD
worker, DCGM exporter, the operator's operands) tolerate the GPU and the control-plane taint, NFD's
garbage collector (a cluster add-on) the control-plane taint, preferring a node without GPUs.
Everything else keeps the defaults of its chart.

Does not manage: the monitoring stack that scrapes the ServiceMonitors (the observability layer),
MIG partitioning on the device-plugin path (nvidia-smi mig on the hosts; only the operator's MIG
manager partitions, and the config model rejects a migProfile there), whether a migProfile fits
the GPU model of a node (mig-manager reports that in the node's nvidia.com/mig.config.state), and
draining a node before its layout changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import dcgm_metrics, versions
from components.device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs, plugin_config
from components.namespaces import pod_security_namespace
from config.chart_source import ChartSource
from config.gpu import GpuConfig, GpuStack, SharingMode
from config.scheduling_contract import (
    GPU_NODE_SELECTOR_TERMS,
    METRICS_NODE_LABEL,
    MIG_CONFIG_LABEL,
    addon_affinity,
    addon_tolerations,
    gpu_agent_tolerations,
)

GPU_NAMESPACE = "gpu-system"
OPERATOR_NAMESPACE = "gpu-operator"
SHARING_CONFIG_NAME = "gpu-cluster-sharing"


class DriverSource(enum.StrEnum):
    """Where the GPU nodes' NVIDIA driver comes from: each platform's wiring says (stacks/)."""

    HOST = "host"  # on the host's root: lab node prep or nvidiaDriver.preinstalled, a dev cluster's nodes
    GKE = "gke"  # GKE's install or Google's installer DaemonSet (/home/kubernetes/bin/nvidia); GKE
    #              runs its own device plugin there
    OPERATOR = "operator"  # the GPU Operator's driver container (lab hosts without a driver)
    OPERATOR_ON_GKE = "operator-on-gke"  # the GPU Operator's driver container on GKE nodes (pools' driver none)

    @property
    def on_gke(self) -> bool:
        """GKE nodes: the driver root is GKE's, and critical pods outside kube-system need a quota."""
        return self in (DriverSource.GKE, DriverSource.OPERATOR_ON_GKE)

    @property
    def on_host(self) -> bool:
        """The nodes already have a working driver: the operator must not install its own."""
        return self in (DriverSource.HOST, DriverSource.GKE)


@dataclass(frozen=True)
class GpuSoftwareStackArgs:
    gpu: GpuConfig
    driver: DriverSource
    # A ServiceMonitor for the DCGM exporter needs the prometheus-operator CRDs, which only the
    # monitoring layer installs; the dcgm-exporter chart would fail without them.
    service_monitor: bool = False
    # GPU nodes by name (lab hosts with GPUs, dev gpuNodes) and what makes them exist (lab joins):
    # under the operator in mode mig each gets its MIG layout label. GKE's nodes come and go with
    # the autoscaler: their pool carries the label instead (components/gke/gpu_node_pool.py).
    gpu_nodes: tuple[str, ...] = ()
    nodes_ready: tuple[pulumi.Resource, ...] = ()
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the charts come from
    # The device-plugin path's DCGM exporter chart; false where the platform exports the GPUs itself
    # (gke gpuMetrics gkeManaged): one exporter per GPU.
    dcgm_exporter: bool = True


# Where GKE's driver install (and Google's driver-installer DaemonSet) puts the driver on the node.
GKE_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
CRITICAL_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")


# The DCGM ServiceMonitors put the scraped pod's node name in METRICS_NODE_LABEL (alerts, dashboards).
DCGM_NODE_RELABELINGS = [
    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": METRICS_NODE_LABEL, "action": "replace"}
]


# MIG_CONFIG_LABEL is the node label NVIDIA's MIG manager takes a node's MIG layout from: a profile
# of its mig-parted config (all-1g.10gb, all-balanced, ...; generated from the hardware by
# mig-manager, with the operator's default-mig-parted-config as fallback).
MIG_UNLABELLED_LAYOUT = "all-disabled"


def mig_layout(gpu: GpuConfig) -> str | None:
    """The profile GPU nodes are labelled MIG_CONFIG_LABEL with: gpu.sharing.migProfile on the
    operator path in mode mig; None elsewhere (the device-plugin path cannot partition)."""
    if gpu.stack is GpuStack.OPERATOR and gpu.sharing.mode is SharingMode.MIG:
        return gpu.sharing.mig_profile
    return None


def device_plugin_mig_strategy(gpu: GpuConfig) -> str:
    """The device plugin's / GFD's MIG strategy on the device-plugin path (none unless mode mig)."""
    return gpu.sharing.mig_strategy.value if gpu.sharing.mode is SharingMode.MIG else "none"


def gfd_values(gke: bool = False, mig_strategy: str = "none") -> dict[str, Any]:
    # No `affinity`: the chart's default already restricts GFD to NVIDIA nodes (NFD's
    # pci-10de.present, Tegra's cpu vendor, or nvidia.com/gpu.present=true).
    values: dict[str, Any] = {
        "devicePlugin": {"enabled": False},
        "gfd": {"enabled": True},
        # GFD (the chart's top-level tolerations) is a node agent: every GPU node, a GPU control
        # plane included (config/scheduling_contract.py); the chart's CriticalAddonsOnly kept.
        "tolerations": [*gpu_agent_tolerations(gke), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "nfd": {
            # NFD's worker publishes the features file GFD writes on its node: it must run wherever
            # GFD does (the chart's default tolerates the long-gone node-role.kubernetes.io/master).
            "worker": {"tolerations": gpu_agent_tolerations(gke)},
            # A cluster add-on with no tolerations by default: Pending on a lab, where every node is
            # tainted, and the release times out.
            "gc": {"tolerations": addon_tolerations(), "affinity": addon_affinity()},
        },
    }
    if mig_strategy != "none":
        # GFD labels MIG devices (nvidia.com/mig-*.count, gpu.product) by the plugin's strategy.
        values["migStrategy"] = mig_strategy
    if gke:
        values["nvidiaDriverRoot"] = GKE_DRIVER_ROOT
    return values


def dcgm_exporter_values(service_monitor: bool = False, gke: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {
        "serviceMonitor": {"enabled": service_monitor, "relabelings": DCGM_NODE_RELABELINGS},
        # Label metrics with the pod (namespace, pod, container) using the GPU: per-job metrics.
        "kubernetes": {"enablePodLabels": True},
        # GPU nodes only (the chart has no default): elsewhere the exporter finds no GPU and
        # crash-loops, which fails the release's wait (and GKE's system pool is never a GPU node).
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": GPU_NODE_SELECTOR_TERMS}}},
        "tolerations": gpu_agent_tolerations(gke),  # a node agent: a GPU control plane too
        # The default fields plus the GPU health signals (ECC, NVLink errors, throttle time).
        "customMetrics": dcgm_metrics.metrics_csv(),
    }
    if gke:
        # As Google's GKE manifest runs it (GoogleCloudPlatform/prometheus-engine,
        # examples/nvidia-dcgm/exporter.yaml). GKE nodes have no NVIDIA container runtime to inject
        # the GPUs, and GKE's device plugin hands a GPU only to a pod that requests it, exclusively
        # (a request would take a GPU from the workloads it watches). So privileged is unavoidable:
        # it is the only way to the /dev/nvidia* devices; a device hostPath mount is still denied by
        # the device cgroup. The API server rejects privileged with the chart's
        # allowPrivilegeEscalation false.
        values["securityContext"] = {"privileged": True, "allowPrivilegeEscalation": True}
        # The driver's libraries (NVML) from the host.
        values["extraHostVolumes"] = [{"name": "nvidia-install-dir-host", "hostPath": GKE_DRIVER_ROOT}]
        values["extraVolumeMounts"] = [
            # the chart's own mount (a list is replaced, not merged)
            {"name": "exporter-metrics-volume", "mountPath": "/etc/dcgm-exporter/default-counters.csv",
             "subPath": "default-counters.csv"},
            {"name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia", "readOnly": True},
        ]
        values["extraEnv"] = [
            {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
            # GKE's device plugin names GPUs nvidia0, nvidia1, ... (not by UUID) in the kubelet's
            # pod resources: without this the per-pod labels never match a GPU.
            {"name": "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "value": "device-name"},
        ]
    return values


def operator_values(
    gpu: GpuConfig, driver_on_host: bool, service_monitor: bool = False, gke: bool = False
) -> dict[str, Any]:
    sharing = gpu.sharing
    device_plugin: dict[str, Any] = {"enabled": True}
    if sharing.mode is SharingMode.TIME_SLICING:
        device_plugin["config"] = {
            "create": True,
            "name": SHARING_CONFIG_NAME,
            "default": "time-slicing",
            "data": {"time-slicing": plugin_config(sharing.replicas)},
        }
    mig = sharing.mode is SharingMode.MIG
    values: dict[str, Any] = {
        "driver": {"enabled": not driver_on_host, "version": versions.GPU_OPERATOR_DRIVER_VERSION},
        "toolkit": {"enabled": True},
        "devicePlugin": device_plugin,
        "dcgmExporter": {"enabled": True, "enablePodLabels": True,
                         "serviceMonitor": {"enabled": service_monitor, "relabelings": DCGM_NODE_RELABELINGS},
                         # The default fields plus the GPU health signals (components/dcgm_metrics.py).
                         "config": {"name": dcgm_metrics.OPERATOR_CONFIGMAP, "create": True,
                                    "data": dcgm_metrics.metrics_csv()}},
        "gfd": {"enabled": True},
        "mig": {"strategy": sharing.mig_strategy.value if mig else "single"},
        # The layout is per node (MIG_CONFIG_LABEL): ClusterPolicy's config.default admits only
        # all-disabled or "", the layout the operator gives a MIG-capable node it finds unlabelled.
        "migManager": {"enabled": mig, "config": {"default": MIG_UNLABELLED_LAYOUT}},
        # The operands (driver, toolkit, device plugin, DCGM exporter, GFD, MIG manager) are node
        # agents: every GPU node, a GPU control plane included (config/scheduling_contract.py).
        "daemonsets": {"tolerations": gpu_agent_tolerations(gke)},
        # NFD's garbage collector is a cluster add-on with no tolerations by default: Pending on a
        # lab, where every node is tainted. (NFD master and worker already tolerate the control plane.)
        "node-feature-discovery": {"gc": {"tolerations": addon_tolerations(), "affinity": addon_affinity()}},
    }
    if gke:
        # NFD's worker labels the GPU nodes the operands select (pci-10de): on a flex-start pool's
        # nodes too, whose queued taint the chart's default worker tolerations (control plane, GPU) miss.
        values["node-feature-discovery"]["worker"] = {"tolerations": gpu_agent_tolerations(gke)}
        # NVIDIA's "GPU Operator with Google GKE": the container toolkit must take its runtime
        # config from the file on GKE 1.33+ (known issue), and MIG changes need a node reboot there.
        values["toolkit"]["env"] = [{"name": "RUNTIME_CONFIG_SOURCE", "value": "file"}]
        if mig:
            values["migManager"]["env"] = [{"name": "WITH_REBOOT", "value": "true"}]
        if driver_on_host:
            # Google's driver installer: driver and toolkit live in GKE's writable, stateful /home.
            values["hostPaths"] = {"driverInstallDir": GKE_DRIVER_ROOT}
            values["toolkit"]["installDir"] = GKE_DRIVER_ROOT
            values["cdi"] = {"enabled": True}
    return values


def _release(parent: pulumi.Resource, charts: ChartSource, name: str, chart: str, version: str, repo: str,
             namespace: str, values: dict[str, Any], depends_on: list[pulumi.Resource]) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name,
        name=chart,
        **charts.args(chart, version, repo),
        namespace=namespace,
        values=values,
        # The operator's driver container can take 10+ minutes; the ready gate waits for GPUs,
        # the release only for its own pods to be scheduled.
        timeout=900,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )


def mig_layout_labels(parent: pulumi.Resource, name: str, layout: str, nodes: tuple[str, ...],
                      depends_on: list[pulumi.Resource]) -> list[k8s.core.v1.NodePatch]:
    """MIG_CONFIG_LABEL=<layout> on each named node: the MIG manager repartitions on a change.

    A patch, not kubelet --node-labels: those apply only when a node registers, so a new migProfile
    would never reach a joined node (and a changed init config rebuilds the cluster). Forced:
    the operator labels a MIG-capable node it finds unlabelled MIG_UNLABELLED_LAYOUT (its own field
    manager), and on destroy the label goes, which the operator answers with that same default.
    """
    return [
        k8s.core.v1.NodePatch(
            f"{name}-mig-layout-{node}",
            metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                name=node, labels={MIG_CONFIG_LABEL: layout}, annotations={"pulumi.com/patchForce": "true"}
            ),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
        )
        for node in nodes
    ]


class GpuSoftwareStack(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuSoftwareStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gpu:SoftwareStack", name, None, opts)
        self.resources: list[pulumi.Resource] = []
        operator = args.gpu.stack is GpuStack.OPERATOR
        namespace = OPERATOR_NAMESPACE if operator else GPU_NAMESPACE
        # Why privileged: see the module docstring (GFD, driver and toolkit containers).
        ns = pod_security_namespace(f"{name}-ns", namespace, "privileged", pulumi.ResourceOptions(parent=self))
        ready: list[pulumi.Resource] = [ns]
        gke = args.driver.on_gke
        if gke:
            ready.append(k8s.core.v1.ResourceQuota(
                f"{name}-critical-pods",
                metadata=k8s.meta.v1.ObjectMetaArgs(name="gpu-critical-pods", namespace=namespace),
                spec=k8s.core.v1.ResourceQuotaSpecArgs(
                    hard={"pods": "100"},
                    scope_selector=k8s.core.v1.ScopeSelectorArgs(match_expressions=[
                        k8s.core.v1.ScopedResourceSelectorRequirementArgs(
                            scope_name="PriorityClass", operator="In", values=list(CRITICAL_PRIORITY_CLASSES)
                        )
                    ]),
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
            ))
        if operator:
            self.resources.append(
                _release(self, args.charts, f"{name}-operator", versions.GPU_OPERATOR_CHART, versions.GPU_OPERATOR_CHART_VERSION,
                         versions.GPU_OPERATOR_CHART_REPO, namespace,
                         operator_values(args.gpu, args.driver.on_host, args.service_monitor, gke), ready)
            )
            layout = mig_layout(args.gpu)
            if layout is not None:
                self.resources += mig_layout_labels(self, name, layout, args.gpu_nodes, [*ready, *args.nodes_ready])
        else:
            if not gke:  # GKE runs its own device plugin: a second would advertise every GPU twice
                replicas = args.gpu.sharing.replicas if args.gpu.sharing.mode is SharingMode.TIME_SLICING else 1
                self.resources.append(NvidiaDevicePlugin(
                    f"{name}-device-plugin",
                    NvidiaDevicePluginArgs(namespace=namespace, time_slicing_replicas=replicas,
                                           mig_strategy=device_plugin_mig_strategy(args.gpu)),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
                ))
            self.resources += [
                _release(self, args.charts, f"{name}-gfd", versions.NVIDIA_DEVICE_PLUGIN_CHART,
                         versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION, versions.NVIDIA_DEVICE_PLUGIN_CHART_REPO,
                         namespace, gfd_values(gke, device_plugin_mig_strategy(args.gpu)), ready),
            ]
            if args.dcgm_exporter:
                self.resources.append(_release(
                    self, args.charts, f"{name}-dcgm-exporter", versions.DCGM_EXPORTER_CHART,
                    versions.DCGM_EXPORTER_CHART_VERSION, versions.DCGM_EXPORTER_CHART_REPO,
                    namespace, dcgm_exporter_values(args.service_monitor, gke), ready))
        self.register_outputs({"stack": args.gpu.stack.value, "namespace": namespace})
