"""The GPU inventory: what a cluster's GPU nodes are, described once per stack and read as data.

Each platform's stack builds its own (`LabStack.inventory`, `GkeStack.inventory`, `DevStack.inventory`,
from config/inventory_build.py): its GPU node groups (lab: the hosts of one GPU model; gke: one GPU
pool; dev: the gpuNodes), each with its nodes (names where known), GPU model, GPUs and their count in
the quota unit Kueue counts (whole GPUs, MIG slices of one profile, time-sliced replicas:
config/queue_units.py), CPU and memory (None where the config declares none), GPU NICs and labels;
and the topology levels the nodes carry (label names; values known on lab, only "written by Google,
value unknown" on gke). The queues config (flavors, sizes, quotas, topology levels) reads it, never
the platform's name: what differs between platforms is in the data.

Imports nothing of the project: the stacks' models build it, and the readers take it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Protocol

TOPOLOGY_NAME = "gpu-cluster-topology"  # the one Kueue Topology of a cluster, when it has one
HOSTNAME_LABEL = "kubernetes.io/hostname"  # Kueue: only ever the lowest level


class TopologyLevel(enum.StrEnum):
    BLOCK = "block"
    RACK = "rack"
    HOST = "host"


def flavor_name(model: str) -> str:
    """A GPU model as a ResourceFlavor name (an RFC 1123 label): NVIDIA-H100-80GB-HBM3 -> nvidia-h100-80gb-hbm3."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:63].rstrip("-")


@dataclass(frozen=True)
class NodeGroup:
    """GPU nodes of one kind, counted in one ResourceFlavor."""

    name: str  # lab: the GPU model (or "gpu"); gke: the pool; dev: "gpu"
    flavor: str  # the ResourceFlavor its GPUs count in
    node_labels: dict[str, str]  # the labels that flavor selects its nodes by
    nodes: tuple[str, ...]  # node names, where the config knows them (lab hosts, dev gpuNodes)
    node_count: int  # lab: hosts; gke: autoscaling.maxNodes x zones; dev: gpuNodes
    gpu_model: str | None  # lab: hosts[].gpuModel; gke: the accelerator type; dev: not declared
    gpus: int | None  # physical GPUs of the group; None: not every count is declared
    # The GPUs in the quota unit (config/queue_units.py), or why the unit cannot be sized.
    units: int | str
    size_key: str  # the config key the size comes from, for messages
    # (key, message) refusing the sharing mode for this group's GPUs, when units is a reason.
    unit_problem: tuple[str, str] | None = None
    # GPUs of each named node (lab: hosts[].gpus; dev: gpuNodeGpus, where declared); gke: every node
    # of the pool has gpus_per_node.
    node_gpus: dict[str, int] = field(default_factory=dict)
    gpus_per_node: int | None = None  # where every node of the group has the same count
    units_per_gpu: int | None = None  # one GPU in the quota unit (1, the replicas, the MIG slices); None: unknown
    vcpus: int | None = None  # per node, where declared (gke: the machine table)
    memory_gib: float | None = None
    allocatable: tuple[float, float] | None = None  # per node (cores, bytes) left to pods, where known
    gpu_nics: int | None = None
    gpu_memory_gb: int | None = None  # one GPU's memory, where the config names the GPU (gke: its accelerator)
    # MIG instances per GPU of each profile, where the MIG table tells which GPU it is (config/mig_profiles.py).
    mig_slices: dict[str, int] = field(default_factory=dict)
    taints: tuple[str, ...] = ()  # taint keys the nodes carry (gke flex-start: GKE's queued taint)
    in_topology: bool = True  # its flavor names the cluster's Topology (flex-start flavors do not)
    # Google writes its topology labels on these nodes, values unknown offline; `placement` says where.
    topology_labelled: bool = False
    placement: str = ""
    config_index: int = 0  # its place among the config's groups (gke: the pool's index), for messages


@dataclass(frozen=True)
class Inventory:
    """The GPU node groups of a stack, in the order their flavors are tried, and their topology."""

    groups: tuple[NodeGroup, ...]
    unit: str  # what one counted unit is: GPUs, time-sliced GPUs, MIG slices (for messages)
    # The node label of each topology level on this platform (lab: its own labels; gke: Google's).
    level_labels: dict[TopologyLevel, str] = field(default_factory=dict)
    levels_present: frozenset[TopologyLevel] = frozenset()  # the levels every GPU node carries
    # The Kueue Topology's levels above the hostname, when a level is asked for; None: no Topology ever.
    topology_labels: tuple[str, ...] | None = None
    default_level: TopologyLevel | None = None  # queues.rdmaTopologyLevel when unset
    values_known: bool = True  # whether the config knows each node's value of each level
    missing_level: str = ""  # why a level is not there ({level}: the level asked for)
    # The level binds every job across nodes, not only those over a RoCE pod network (gke: its GPU
    # traffic runs over the nodes' own NICs, and there is no network.roce).
    level_binds_multinode_jobs: bool = False
    # Node name -> the labels the program writes on it after it joins (lab: hosts[].block, .rack and
    # .gpuModel, by NodePatch; dev: the GPU label on gpuNodes); gke's pools carry theirs from GKE.
    labels_written: dict[str, dict[str, str]] = field(default_factory=dict)


class QueuesChoice(Protocol):
    """What the queue checks read of `queues` (config/queues.py QueuesConfig)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def rdma_topology_level(self) -> TopologyLevel | None: ...


class Inventoried(Protocol):
    """A stack with its inventory (each platform's stack model)."""

    @property
    def queues(self) -> QueuesChoice: ...
    @property
    def inventory(self) -> Inventory: ...
