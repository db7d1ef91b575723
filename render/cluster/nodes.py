"""The nodes a stack will have, modelled from the stack config and the plan, as the scheduler sees
them: labels, taints and allocatable resources.

- lab: one node per host. The first control plane's registration (labels, taints) is read from
  the kubeadm InitConfiguration the plan sends to it; every other host's, the other control planes
  of an HA lab (1, 3 or 5) included, from the JoinConfiguration the program sends on its join step
  (kubeadm.join_config_template: the same document with the token, CA pin and certificate key left
  as placeholders, since the plan holds the real ones as secrets): each control plane carries the
  node-role.kubernetes.io/control-plane:NoSchedule taint, so what tolerates it may land on any of
  them. kubeadm adds the node-role.kubernetes.io/control-plane label to control planes. CPU and
  memory are not declared in config, so they are not checked.
- gke: one node shape per node pool in the plan (gcp NodePool inputs: labels, taints, machine type,
  accelerators, autoscaling), with what GKE adds itself: cloud.google.com/gke-nodepool,
  cloud.google.com/gke-accelerator, cloud.google.com/gke-spot, and the nvidia.com/gpu=present
  taint on GPU pools, the cloud.google.com/gke-queued NoSchedule taint on queued-provisioning pools
  (the label of that key only where the pool sets it: GKE does not), cloud.google.com/gke-flex-start
  on flex-start VMs; allocatable CPU and memory from the machine type minus GKE's reservations; a
  time-shared (or MPS) pool's GPU counts maxSharedClientsPerGpu times, as GKE's device plugin
  advertises it. On an A4 or A3 Ultra pool consuming a specific reservation, Google's topology labels (cloud.google.com/
  gce-topology-block, -subblock, -host) are known to be there but not their values (which block a
  VM lands in is Google's placement): the node lists them in `unvalued`, with no invented value.
- dev: the listed GPU nodes, with the labels the plan's NodePatch gives them. Their GPUs are the
  count gpuNodeGpus declares; where it declares none, at least one GPU is assumed (not bounded).
  CPU and memory are not declared, so they are not checked.

Labels set at run time by what the plan installs are added where the installer lands: NFD's
feature.node.kubernetes.io/pci-10de.present on GPU nodes, GFD's nvidia.com/gpu.present, the GPU
Operator's nvidia.com/gpu.deploy.* (scheduling.py applies them once it knows where each DaemonSet
runs).

What GKE and NVIDIA's add-ons set is spelled out here, not imported from
config/scheduling_contract.py: the model is the world that contract is checked against
(tests/config/test_scheduling_contract.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from components.lab import kubeadm  # the JoinConfiguration each worker receives
from config import DevStack, LabStack, StackConfig
from config.gcp.machine_shapes import gke_allocatable, machine_shape
from config.gcp.machines import TOPOLOGY_LABELLED
from config.scheduling_contract import GKE_BLOCK_LABEL, GKE_HOST_LABEL, GKE_SUBBLOCK_LABEL

GIB = 1024**3
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


@dataclass
class Node:
    name: str
    group: str  # lab: role; gke: node pool; dev: "listed"
    labels: dict[str, str]
    taints: list[dict[str, str]]
    # allocatable: cpu in cores, memory in bytes; None where the config does not say
    cpu: float | None = None
    memory: float | None = None
    gpus: int = 0  # physical GPUs (before sharing); the device plugin advertises them
    gpus_known: bool = True  # dev: gpuNodeGpus does not declare the count (at least 1 is assumed)
    max_count: int = 1  # gke: nodes of this shape the pool can scale to
    min_count: int = 1  # gke: nodes of this shape that exist after `up`
    extended: dict[str, float] = field(default_factory=dict)  # advertised extended resources
    # Labels the node carries whose values are not known offline (gke: Google's topology labels).
    unvalued: tuple[str, ...] = ()
    # gke: containers sharing each GPU (a pool's time-sharing or MPS, maxSharedClientsPerGpu): GKE's
    # device plugin advertises that many nvidia.com/gpu per physical GPU.
    gpu_shares: int = 1

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0


def _registration_of(doc: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    reg = doc.get("nodeRegistration") or {}
    labels: dict[str, str] = {}
    for arg in reg.get("kubeletExtraArgs") or []:
        if arg.get("name") == "node-labels":
            for pair in str(arg.get("value", "")).split(","):
                if pair:
                    k, _, v = pair.partition("=")
                    labels[k] = v
    taints = [{"key": t["key"], "value": str(t.get("value", "")), "effect": t["effect"]} for t in reg.get("taints") or []]
    return labels, taints


def _base_labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


# safe_load_all's loader with libyaml's parser (the same constructors and resolver): one document
# per worker at 128 workers was ~1 s of the check with the Python parser.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def lab_nodes(cfg: LabStack, init_stdin: str | None, node_patches: Sequence[dict[str, Any]] = ()) -> list[Node]:
    init_reg: tuple[dict[str, str], list[dict[str, str]]] | None = None
    if init_stdin:
        for doc in yaml.load_all(init_stdin, Loader=_SAFE_LOADER):  # noqa: S506 (a safe loader)
            if isinstance(doc, dict) and doc.get("kind") == "InitConfiguration":
                init_reg = _registration_of(doc)
    first = cfg.entry_point  # where the init step runs (its InitConfiguration registers it)
    cluster = kubeadm.KubeadmSettings.of(cfg)  # the settings the program builds (stacks/lab.py), alike
    nodes = []
    for h in cfg.hosts:
        if h is first and init_reg is not None:
            labels, taints = init_reg
        else:
            docs = list(yaml.load_all(kubeadm.join_config_template(cluster, h), Loader=_SAFE_LOADER))  # noqa: S506
            labels, taints = _registration_of(docs[0])
        labels = {**_base_labels(h.name), **labels, **_patched_labels(h.name, node_patches)}
        if h.role.value == "control-plane":
            labels[CONTROL_PLANE_ROLE] = ""
            labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
        nodes.append(Node(h.name, h.role.value, labels, taints, gpus=h.gpus))
    return nodes


# --- gke ---
# Machine shapes and GKE's allocatable: config/gcp/machines.py and machine_shapes.py (the config checks
# quotas on them). Which machine types carry Google's topology labels: the same table's rows.
# Google, "Schedule GKE workloads with Topology Aware Scheduling" (cloud.google.com/ai-hypercomputer/
# docs/workloads/schedule-gke-workloads-tas), "Topology of GKE nodes on A4 and A3 Ultra VMs": the
# labels of a node's physical place, on those machine types; the block is "the organization-specific
# ID of the reserved block in which the VM is located", so capacity of a reservation.
GOOGLE_TOPOLOGY_LABELS = (GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL)
GOOGLE_TOPOLOGY_MACHINES = TOPOLOGY_LABELLED


def google_topology(node_config: dict[str, Any]) -> tuple[str, ...]:
    """The topology labels Google writes on a pool's nodes (values unknown offline), or ()."""
    affinity = node_config.get("reservationAffinity") or {}
    if str(node_config.get("machineType")) in GOOGLE_TOPOLOGY_MACHINES \
            and affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
        return GOOGLE_TOPOLOGY_LABELS
    return ()


_GKE_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def gke_nodes(node_pools: list[dict[str, Any]]) -> list[Node]:
    nodes = []
    for pool in node_pools:
        nc = pool.get("nodeConfig") or {}
        name = str(pool.get("name"))
        labels = {**_base_labels(f"{name}-node"), **(nc.get("labels") or {}),
                  "cloud.google.com/gke-nodepool": name,
                  "node.kubernetes.io/instance-type": str(nc.get("machineType", "")),
                  "cloud.google.com/gke-os-distribution": "cos" if "COS" in str(nc.get("imageType", "COS")) else "ubuntu"}
        taints = [{"key": t["key"], "value": str(t.get("value", "")), "effect": _GKE_EFFECT.get(t["effect"], t["effect"])}
                  for t in nc.get("taints") or []]
        gpus, shares = 0, 1
        for acc in nc.get("guestAccelerators") or []:
            gpus += int(acc.get("count", 0))
            shares = int((acc.get("gpuSharingConfig") or {}).get("maxSharedClientsPerGpu") or 1)
            labels["cloud.google.com/gke-accelerator"] = str(acc.get("type"))
            labels["cloud.google.com/gke-gpu"] = "true"
        if gpus and not any(t["key"] == "nvidia.com/gpu" for t in taints):
            # GKE taints every GPU node pool itself (GKE docs, "About GPUs": node taints).
            taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
        if nc.get("spot"):
            labels["cloud.google.com/gke-spot"] = "true"
        if (pool.get("queuedProvisioning") or {}).get("enabled"):
            # Queued provisioning: GKE taints the nodes it creates for a ProvisioningRequest; the label
            # of the same key is not GKE's (Cluster Toolkit, modules/compute/gke-node-pool/main.tf adds
            # it to the pool), only what the pool's nodeConfig.labels say.
            taints.append({"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"})
        if nc.get("flexStart"):
            # Flex-start VMs: GKE labels them (Cluster Toolkit's examples/gke-consumption-options select it).
            labels["cloud.google.com/gke-flex-start"] = "true"
        zones = len(pool.get("nodeLocations") or [pool.get("location")])
        auto = pool.get("autoscaling") or {}
        if auto:
            min_count, max_count = int(auto.get("minNodeCount", 0)) * zones, int(auto.get("maxNodeCount", 0)) * zones
        else:
            min_count = max_count = int(pool.get("nodeCount", pool.get("initialNodeCount", 1))) * zones
        shape = machine_shape(str(nc.get("machineType", "")))
        cpu = memory = None
        if shape:
            cpu, memory = gke_allocatable(*shape)
        nodes.append(Node(f"{name}-node", name, labels, taints, cpu=cpu, memory=memory, gpus=gpus, gpu_shares=shares,
                          max_count=max_count, min_count=min_count, unvalued=google_topology(nc)))
    return nodes


def _patched_labels(name: str, node_patches: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The labels the plan's NodePatches give node `name` (dev's GPU labels, lab's racks)."""
    labels: dict[str, str] = {}
    for patch in node_patches:
        if (patch.get("metadata") or {}).get("name") == name:
            labels.update((patch.get("metadata") or {}).get("labels") or {})
    return labels


def dev_nodes(cfg: DevStack, node_patches: list[dict[str, Any]]) -> list[Node]:
    nodes = []
    counts = cfg.gpu_counts  # the device plugin advertises a node's GPUs: as many as gpuNodeGpus says
    for name in cfg.gpu_nodes:
        labels = {**_base_labels(name), **_patched_labels(name, node_patches)}
        nodes.append(Node(name, "listed", labels, [], gpus=counts.get(name, 1), gpus_known=name in counts))
    if not nodes:  # the existing cluster has nodes, only none was named: one plain node stands for them
        nodes.append(Node("existing-node", "unlisted", _base_labels("existing-node"), []))
    return nodes


def model(cfg: StackConfig, plan_inputs: dict[str, list[dict[str, Any]]], node_patches: list[dict[str, Any]]) -> list[Node]:
    """`plan_inputs`: resource type -> inputs of every resource of that type in the plan."""
    if isinstance(cfg, LabStack):
        init = next((i.get("stdin") for i in plan_inputs.get("command:remote:Command", [])
                     if "InitConfiguration" in str(i.get("stdin", ""))), None)
        return lab_nodes(cfg, init, node_patches)
    if isinstance(cfg, DevStack):
        return dev_nodes(cfg, node_patches)
    return gke_nodes(plan_inputs.get("gcp:container/nodePool:NodePool", []))
