"""RdmaNetwork: the secondary RoCE network of training pods (network.rdma with network.roce, lab
and dev; seed 002 did each of these steps by hand).

In the cluster, installed and awaited before any RDMA pod:
- Multus (thick plugin) from upstream's install manifest at the release tag, its image pinned to
  the release (the manifest at the tag still names the moving `snapshot-thick`): it wraps the
  cluster's CNI and adds the networks a pod's `k8s.v1.cni.cncf.io/networks` annotation asks for.
  It brings the NetworkAttachmentDefinition CRD.
- whereabouts IPAM (its chart, images pinned to the release; its reconciler made a cluster add-on
  that tolerates the control plane): cluster-wide address allocation for the secondary network,
  so two pods never get one address.
- The rdma CNI binary (upstream's DaemonSet image copies it to /opt/cni/bin on every RDMA node).
  containernetworking's host-device moves the NIC's netdev into the pod, the rdma CNI chained
  after it moves the NIC's RDMA device there too; that needs the RDMA subsystem in exclusive
  network-namespace mode (lab node prep sets it; on dev it is the node owner's job).
- The RDMA shared device plugin: `rdma/roce` on each RDMA node, one per node (the NIC moves into
  one pod at a time, so the scheduler may place only one), and the /dev/infiniband character
  devices mounted into the pod that gets it: no privileged training pod.
- The NetworkAttachmentDefinition `roce` in the training namespace: host-device with the node's
  `interface` and a whereabouts `range`, then the rdma CNI with the NIC's PCI address.
- With monitoring: the RDMA counter exporter (the workload image's trainer.rdma_exporter) as a
  DaemonSet on the host's network (it sees the devices no pod holds) and a ServiceMonitor; the
  training pods run the same exporter as a sidecar (in exclusive mode the device they hold is
  visible only inside their network namespace) and a PodMonitor scrapes it.

Pods (components/training/job.py applies `PodRdma`): the network annotation, `rdma/roce: 1`,
IPC_LOCK (RDMA memory registration pins pages beyond the default memlock limit) and the NCCL/Gloo
environment on net1 (launch.secondary_network_env). IPC_LOCK is not in Pod Security's baseline
list, so the training namespace is `privileged` with RDMA (the lowest level that admits it) and
`baseline` without.

Which nodes: the GPU nodes (config/scheduling_contract.py); every one must have the NIC under
the same interface name and PCI address, since one NetworkAttachmentDefinition serves them all.

Does not manage: SR-IOV virtual functions, InfiniBand (IPoIB) fabrics, PFC/ECN switch settings
(the link test and the congestion panels show their effect), or GKE's GPUDirect networking.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.cluster_addon import tolerate_control_plane
from components.manifest_resource import manifest_resource, registers_like_typed
from components.storage_contract import TRAINING_NAMESPACE
from components.training import launch
from config.chart_source import MULTUS_DAEMONSET, ChartSource
from config.scheduling_contract import GPU_NODE_SELECTOR_TERMS, JOB_LABEL, METRICS_NODE_LABEL, gpu_tolerations
from config.training import POD_RDMA_INTERFACE, RoceConfig

NETWORK_NAME = "roce"  # the NetworkAttachmentDefinition pods name in their annotation
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RDMA_RESOURCE_PREFIX = "rdma"
RDMA_RESOURCE_NAME = "roce"
RDMA_RESOURCE = f"{RDMA_RESOURCE_PREFIX}/{RDMA_RESOURCE_NAME}"
# One pod per node holds the NIC (host-device moves it): the device plugin advertises one.
RDMA_PODS_PER_NODE = 1
SYSTEM_NAMESPACE = "kube-system"
EXPORTER_PORT = 9879
EXPORTER_PORT_NAME = "rdma-metrics"
EXPORTER_NAME = "rdma-exporter"
DEVICE_PLUGIN_CONFIG = "rdma-devices"
MULTUS_SNAPSHOT_IMAGE = "ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot-thick"
CONFIGFILE_DAEMONSET_TYPE = "kubernetes:apps/v1:DaemonSet"
NODE_RELABELINGS = [
    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": METRICS_NODE_LABEL, "action": "replace"}
]


@dataclass(frozen=True)
class PodRdma:
    """What an RDMA training pod gets (components/training/job.py applies it)."""

    network: str
    resource: str
    env: tuple[tuple[str, str], ...]
    # The counter exporter's image for the pod's sidecar (None: no monitoring, no sidecar).
    exporter_image: str | None = None


def pod_rdma(roce: RoceConfig, exporter_image: str | None) -> PodRdma:
    return PodRdma(
        network=NETWORK_NAME,
        resource=RDMA_RESOURCE,
        env=launch.secondary_network_env(POD_RDMA_INTERFACE, roce.hca, roce.gid_index, tuple(roce.nccl_env.items())),
        exporter_image=exporter_image,
    )


# The DaemonSet's pod is on the host network: its status.hostIP is the node's address, the one the
# Service's endpoints (and so Prometheus) use. Listening there, not on 0.0.0.0, keeps the exporter
# off the node's other networks; kubelet expands $(HOST_IP) in the command from the env below.
HOST_IP_ENV = {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}


def exporter_command(listen_on_host_ip: bool = False) -> list[str]:
    listen = ["--listen-address=$(HOST_IP)"] if listen_on_host_ip else []
    return ["python", "-m", "trainer.rdma_exporter", f"--port={EXPORTER_PORT}", *listen]


def _small(cpu: str = "100m", memory: str = "64Mi") -> dict[str, Any]:
    return {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": cpu, "memory": memory}}


# Not privileged, no capability: it reads sysfs and serves HTTP.
UNPRIVILEGED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def exporter_sidecar(image: str) -> dict[str, Any]:
    """A native sidecar (an init container that keeps running; ended after the trainer exits, so
    the Job still completes) exporting the counters of the RDMA device the pod holds."""
    return {
        "name": EXPORTER_NAME,
        "image": image,
        "restartPolicy": "Always",
        "command": exporter_command(),
        "ports": [{"name": EXPORTER_PORT_NAME, "containerPort": EXPORTER_PORT, "protocol": "TCP"}],
        "resources": _small(),
        "securityContext": dict(UNPRIVILEGED),
    }


def network_attachment(roce: RoceConfig) -> dict[str, Any]:
    """The NetworkAttachmentDefinition: host-device + whereabouts, then the rdma CNI (chained: it
    reads host-device's result and moves the RDMA device of the same PCI function)."""
    config = {
        "cniVersion": "0.3.1",
        "name": NETWORK_NAME,
        "plugins": [
            {"type": "host-device", "device": roce.interface,
             "ipam": {"type": "whereabouts", "range": str(roce.range)}},
            {"type": "rdma", "deviceID": roce.pci_address},
        ],
    }
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": NETWORK_NAME, "namespace": TRAINING_NAMESPACE},
        "spec": {"config": json.dumps(config, sort_keys=True)},
    }


def whereabouts_values() -> dict[str, Any]:
    return {
        # The chart in git says v0.8.0; the release's chart and image are v0.9.4.
        "image": {"repository": versions.WHEREABOUTS_IMAGE_REPOSITORY, "tag": versions.WHEREABOUTS_IMAGE_TAG},
        # Node slices are whereabouts' opt-in "fast IPAM" (a NAD's node_slice_size): not used here.
        "nodeSliceController": {"enabled": False},
    }


def pin_multus(manifest: dict[str, Any]) -> dict[str, Any]:
    """Upstream's DaemonSet with the release's image instead of the moving snapshot tag."""
    manifest = copy.deepcopy(manifest)
    if manifest.get("kind") != "DaemonSet":
        return manifest
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        if c.get("image") == MULTUS_SNAPSHOT_IMAGE:
            c["image"] = versions.MULTUS_IMAGE
    return manifest


def pin_multus_transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Pulumi transform of the manifest's children (yaml/v2 is a provider-side component: only
    `transforms` reach them)."""
    if args.type_ != CONFIGFILE_DAEMONSET_TYPE:
        return None
    return pulumi.ResourceTransformResult(props=pin_multus(dict(args.props)), opts=args.opts)


def _rdma_node_pod(containers: list[dict[str, Any]], volumes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": GPU_NODE_SELECTOR_TERMS}}},
        "tolerations": gpu_tolerations(),
        "priorityClassName": "system-node-critical",
        "containers": containers,
        "volumes": volumes,
        **extra,
    }


def _daemonset(name: str, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "gpu-cluster"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def rdma_cni_daemonset() -> dict[str, Any]:
    """Upstream's rdma-cni DaemonSet (deployment/rdma-cni-daemonset.yaml at v1.6.0) on the RDMA
    nodes only, without `privileged`: its entrypoint copies one file into /opt/cni/bin, which a
    root process may do through the hostPath mount."""
    return _daemonset("rdma-cni", SYSTEM_NAMESPACE, _rdma_node_pod(
        containers=[{
            "name": "rdma-cni",
            "image": versions.RDMA_CNI_IMAGE,
            "resources": _small(cpu="100m", memory="50Mi"),
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "cnibin", "mountPath": "/host/opt/cni/bin"}],
        }],
        volumes=[{"name": "cnibin", "hostPath": {"path": "/opt/cni/bin", "type": "Directory"}}],
        hostNetwork=True,
    ))


def device_plugin_config(roce: RoceConfig) -> dict[str, Any]:
    config = {
        # Re-read the devices every 30 s: a NIC that came back from a finished pod is offered again.
        "periodicUpdateInterval": 30,
        "configList": [{
            "resourcePrefix": RDMA_RESOURCE_PREFIX,
            "resourceName": RDMA_RESOURCE_NAME,
            "rdmaHcaMax": RDMA_PODS_PER_NODE,
            # By driver only, not by interface name or link type (both read from the netdev): in
            # exclusive mode the netdev leaves the host's view while a pod holds it, the PCI
            # function and its driver do not.
            "selectors": {"drivers": [roce.driver]},
        }],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIG, "namespace": SYSTEM_NAMESPACE},
        "data": {"config.json": json.dumps(config, indent=2, sort_keys=True)},
    }


def device_plugin_daemonset() -> dict[str, Any]:
    """Upstream's DaemonSet (deployment/k8s/base/daemonset.yaml at v1.5.3) on the RDMA nodes only.
    Upstream runs it privileged; it needs the kubelet's device-plugin sockets (hostPath, owned by
    root) and to read /dev and sysfs, which root without capabilities may, like the NVIDIA device
    plugin here. Not verified on an RDMA node (none here): if it cannot list the devices, its log
    says so and `rdma/roce` stays 0, which the link test's pods then wait on."""
    return _daemonset("rdma-shared-dp", SYSTEM_NAMESPACE, _rdma_node_pod(
        containers=[{
            "name": "rdma-shared-dp",
            "image": versions.RDMA_SHARED_DEVICE_PLUGIN_IMAGE,
            "resources": _small(),
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [
                {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
                {"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin", "readOnly": True},
                {"name": "devs", "mountPath": "/dev/", "readOnly": True},
            ],
        }],
        volumes=[
            {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
            {"name": "plugins-registry", "hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": "DirectoryOrCreate"}},
            {"name": "config", "configMap": {"name": DEVICE_PLUGIN_CONFIG,
                                             "items": [{"key": "config.json", "path": "config.json"}]}},
            {"name": "devs", "hostPath": {"path": "/dev/", "type": "Directory"}},
        ],
        hostNetwork=True,
    ))


def exporter_daemonset(namespace: str, image: str) -> dict[str, Any]:
    """On the host's network namespace, so its /sys shows the RDMA devices no pod holds."""
    return _daemonset(EXPORTER_NAME, namespace, _rdma_node_pod(
        containers=[{
            "name": EXPORTER_NAME,
            "image": image,
            "command": exporter_command(listen_on_host_ip=True),
            "env": [HOST_IP_ENV],
            "ports": [{"name": EXPORTER_PORT_NAME, "containerPort": EXPORTER_PORT, "protocol": "TCP"}],
            "resources": _small(),
            "securityContext": dict(UNPRIVILEGED),
        }],
        volumes=[],
        hostNetwork=True,
    ))


def exporter_service(namespace: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": EXPORTER_NAME, "app.kubernetes.io/part-of": "gpu-cluster"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": EXPORTER_NAME, "namespace": namespace, "labels": labels},
        "spec": {"clusterIP": "None", "selector": labels,
                 "ports": [{"name": EXPORTER_PORT_NAME, "port": EXPORTER_PORT, "targetPort": EXPORTER_PORT_NAME}]},
    }


def exporter_service_monitor(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": EXPORTER_NAME, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": EXPORTER_NAME}},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": EXPORTER_PORT_NAME, "interval": "15s", "relabelings": NODE_RELABELINGS}],
        },
    }


def sidecar_pod_monitor() -> dict[str, Any]:
    """Scrapes the sidecars of the training namespace's job pods."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": EXPORTER_NAME, "namespace": TRAINING_NAMESPACE},
        "spec": {
            "selector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]},
            "namespaceSelector": {"matchNames": [TRAINING_NAMESPACE]},
            "podMetricsEndpoints": [{"port": EXPORTER_PORT_NAME, "interval": "15s", "relabelings": NODE_RELABELINGS}],
        },
    }


def sidecar_scrape_policy(monitoring_namespace: str) -> dict[str, Any]:
    """The training namespace denies all ingress by default: let Prometheus reach the sidecars."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow-rdma-metrics", "namespace": TRAINING_NAMESPACE},
        "spec": {
            "podSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring_namespace}}}],
                "ports": [{"protocol": "TCP", "port": EXPORTER_PORT}],
            }],
        },
    }


@dataclass(frozen=True)
class RdmaNetworkArgs:
    roce: RoceConfig
    # The workload image (trainer.rdma_exporter); the exporter runs only with monitoring.
    image: str
    # Monitoring's namespace when it is installed (its CRDs then exist), else None.
    monitoring_namespace: str | None = None
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the Multus manifest and whereabouts chart come from


def _typed(name: str, body: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    kind = body["kind"]
    if registers_like_typed(body):  # DaemonSet, NetworkPolicy
        return manifest_resource(name, body, opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=body["metadata"], data=body["data"], opts=opts)
    if kind == "Service":
        return k8s.core.v1.Service(name, metadata=body["metadata"], spec=body["spec"], opts=opts)
    return k8s.apiextensions.CustomResource(
        name, api_version=body["apiVersion"], kind=kind, metadata=body["metadata"], spec=body["spec"], opts=opts
    )


class RdmaNetwork(pulumi.ComponentResource):
    """Multus, whereabouts, the rdma CNI, the RDMA device plugin, the `roce` network and, with
    monitoring, the RDMA counter exporter. `ready`: what RDMA pods wait for."""

    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: RdmaNetworkArgs, training_namespace: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:k8s:RdmaNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        multus = k8s.yaml.v2.ConfigFile(
            f"{name}-multus",
            file=args.charts.manifest(MULTUS_DAEMONSET),
            opts=pulumi.ResourceOptions(parent=self, transforms=[pin_multus_transform]),
        )
        # A helm/v4 Chart, not a Release: the chart's reconciler Deployment takes no tolerations
        # from values, and on lab every node is tainted (control plane, GPU); a Chart's children
        # take a `transforms` callback, a Release's do not. Each child is awaited.
        whereabouts = k8s.helm.v4.Chart(
            f"{name}-whereabouts",
            name="whereabouts",
            **args.charts.args(versions.WHEREABOUTS_CHART, versions.WHEREABOUTS_CHART_VERSION),
            namespace=SYSTEM_NAMESPACE,
            values=whereabouts_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[multus], transforms=[tolerate_control_plane]),
        )
        rdma_cni = _typed(f"{name}-rdma-cni", rdma_cni_daemonset(), child)
        config = _typed(f"{name}-device-plugin-config", device_plugin_config(args.roce), child)
        plugin = _typed(f"{name}-device-plugin", device_plugin_daemonset(),
                        pulumi.ResourceOptions(parent=self, depends_on=[config]))
        nad = _typed(f"{name}-attachment", network_attachment(args.roce),
                     pulumi.ResourceOptions(parent=self, depends_on=[multus, training_namespace]))
        self.ready = [multus, whereabouts, rdma_cni, plugin, nad]
        if args.monitoring_namespace is not None:
            ns = args.monitoring_namespace
            _typed(f"{name}-exporter", exporter_daemonset(ns, args.image), child)
            service = _typed(f"{name}-exporter-service", exporter_service(ns), child)
            _typed(f"{name}-exporter-monitor", exporter_service_monitor(ns),
                   pulumi.ResourceOptions(parent=self, depends_on=[service]))
            _typed(f"{name}-sidecar-monitor", sidecar_pod_monitor(),
                   pulumi.ResourceOptions(parent=self, depends_on=[training_namespace]))
            _typed(f"{name}-sidecar-scrape", sidecar_scrape_policy(ns),
                   pulumi.ResourceOptions(parent=self, depends_on=[training_namespace]))
        self.register_outputs({
            "network": f"{TRAINING_NAMESPACE}/{NETWORK_NAME}",
            "resource": RDMA_RESOURCE,
            "multus": versions.MULTUS_VERSION,
            "whereabouts": versions.WHEREABOUTS_CHART_VERSION,
        })
