"""Each platform's GPU inventory (config/inventory.py), built from its own keys: the stack models
call these (LabStack.inventory from hosts[], GkeStack.inventory from gke.gpuPools and the machine
table, DevStack.inventory from gpuNodes and gpuNodeGpus), so what differs between platforms is
decided here, once, and read by everything else as data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from config.gcp.accelerators import ACCELERATORS
from config.gcp.machine_shapes import gke_allocatable, machine_shape
from config.gcp.machines import GPU_MACHINES, TOPOLOGY_LABELLED
from config.gke_pools import GpuPool
from config.gke_provisioning import GKE_QUEUED_LABEL, GkeProvisioning, flex_start_flavor_name
from config.gpu import GpuConfig, GpuStack
from config.inventory import HOSTNAME_LABEL, Inventory, NodeGroup, TopologyLevel, flavor_name
from config.lab_hosts import Host
from config.queue_units import (
    describe,
    gke_mig_model,
    gke_units_per_node,
    sharing_key,
    slices_by_profile,
    units_per_gpu,
)
from config.scheduling_contract import (
    BLOCK_LABEL,
    GKE_ACCELERATOR_LABEL,
    GKE_BLOCK_LABEL,
    GKE_HOST_LABEL,
    GKE_POOL_LABEL,
    GKE_QUEUED_TAINT,
    GKE_SUBBLOCK_LABEL,
    GPU_MODEL_LABEL,
    GPU_NODE_LABEL,
    RACK_LABEL,
)


def _lab_unit_problem(gpu: GpuConfig, model: str | None, first: int, per_gpu: int | str) -> tuple[str, str] | None:
    """Why the lab hosts of `model` (the first at hosts[first]) cannot be counted in the quota unit."""
    if not isinstance(per_gpu, str):
        return None
    if gpu.stack is GpuStack.DEVICE_PLUGIN or gpu.sharing.mig_profile == "all-balanced":
        return sharing_key(gpu), per_gpu
    if model is not None:  # a profile of several counts, and a model the table does not tell apart
        return (f"hosts[{first}].gpuModel", f"{per_gpu}: name the GPU as GFD does, with its memory "
                                            "(e.g. NVIDIA-A100-SXM4-40GB)")
    return sharing_key(gpu), f"{per_gpu}; name the GPU in hosts[].gpuModel (e.g. NVIDIA-H100-80GB-HBM3)"


def _same(counts: set[int]) -> int | None:
    return next(iter(counts)) if len(counts) == 1 else None


def placement_labels(h: Host) -> dict[str, str]:
    """The node labels of a host's place (block, rack) and GPU model, those it names."""
    named = ((BLOCK_LABEL, h.block), (RACK_LABEL, h.rack), (GPU_MODEL_LABEL, h.gpu_model))
    return {label: value for label, value in named if value}


def lab_inventory(hosts: Sequence[Host], gpu: GpuConfig) -> Inventory:
    """One group per hosts[].gpuModel in the order the hosts first name them (one `gpu` group without
    models), labelled as node prep's NodePatch labels them; racks and blocks as the hosts name them."""
    gpu_hosts = [(i, h) for i, h in enumerate(hosts) if h.is_gpu]
    models: list[str | None] = list(dict.fromkeys(h.gpu_model for _, h in gpu_hosts if h.gpu_model))
    groups = []
    for model in models or [None]:
        members = [(i, h) for i, h in gpu_hosts if h.gpu_model == model]
        per_gpu = units_per_gpu(gpu, model)
        gpus = sum(h.gpus for _, h in members)
        first = members[0][0] if members else 0
        groups.append(NodeGroup(
            name=model or "gpu", flavor=flavor_name(model) if model else "gpu",
            node_labels={GPU_MODEL_LABEL: model} if model else {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]},
            nodes=tuple(h.name for _, h in members), node_count=len(members), gpu_model=model, gpus=gpus,
            units=per_gpu if isinstance(per_gpu, str) else gpus * per_gpu,
            size_key=f"hosts[].gpus of the {model} hosts" if model else "hosts[].gpus",
            unit_problem=_lab_unit_problem(gpu, model, first, per_gpu), mig_slices=slices_by_profile(model),
            node_gpus={h.name: h.gpus for _, h in members}, gpus_per_node=_same({h.gpus for _, h in members}),
            units_per_gpu=None if isinstance(per_gpu, str) else per_gpu))
    named = [(level, label) for level, field, label in ((TopologyLevel.BLOCK, "block", BLOCK_LABEL),
                                                        (TopologyLevel.RACK, "rack", RACK_LABEL))
             if gpu_hosts and all(getattr(h, field) for _, h in gpu_hosts)]
    present = [level for level, _ in named] + [TopologyLevel.HOST]
    default = (TopologyLevel.RACK if TopologyLevel.RACK in present
               else TopologyLevel.BLOCK if TopologyLevel.BLOCK in present else None)
    written = {h.name: labels for h in hosts if (labels := placement_labels(h))}
    return Inventory(
        groups=tuple(groups), unit=describe(gpu), labels_written=written,
        level_labels={TopologyLevel.BLOCK: BLOCK_LABEL, TopologyLevel.RACK: RACK_LABEL,
                      TopologyLevel.HOST: HOSTNAME_LABEL},
        levels_present=frozenset(present), topology_labels=tuple(label for _, label in named),
        default_level=default,
        missing_level=("{level}: no GPU host names its {level} (hosts[].{level}); the levels this lab has: "
                       + ", ".join(level.value for level in present)))


def _gke_group(i: int, pool: GpuPool, gpu: GpuConfig) -> NodeGroup:
    per_node = gke_units_per_node(pool, gpu)
    nodes = pool.autoscaling.max_nodes * len(pool.zones)
    flex = pool.provisioning is GkeProvisioning.FLEX_START
    shape = machine_shape(pool.machine_type)
    row = GPU_MACHINES.get(pool.machine_type)
    return NodeGroup(
        name=pool.name, flavor=flex_start_flavor_name(pool.name) if flex else pool.accelerator.type,
        node_labels=({GKE_ACCELERATOR_LABEL: pool.accelerator.type, GKE_POOL_LABEL: pool.name,
                      GKE_QUEUED_LABEL: "true"} if flex else {GKE_ACCELERATOR_LABEL: pool.accelerator.type}),
        nodes=(), node_count=nodes, gpu_model=pool.accelerator.type, gpus=nodes * pool.accelerator.count,
        units=per_node if isinstance(per_node, str) else nodes * per_node, size_key="gke.gpuPools",
        unit_problem=(sharing_key(gpu), per_node) if isinstance(per_node, str) else None,
        gpus_per_node=pool.accelerator.count,
        units_per_gpu=None if isinstance(per_node, str) else per_node // pool.accelerator.count,
        vcpus=shape[0] if shape else None, memory_gib=shape[1] if shape else None,
        allocatable=gke_allocatable(*shape) if shape else None, gpu_nics=row.gpu_nics if row else None,
        gpu_memory_gb=ACCELERATORS[pool.accelerator.type].memory_gb if pool.accelerator.type in ACCELERATORS else None,
        mig_slices=slices_by_profile(None, gke_mig_model(pool.accelerator.type)),
        taints=(GKE_QUEUED_TAINT.key,) if flex else (), in_topology=not flex,
        topology_labelled=(pool.machine_type in TOPOLOGY_LABELLED
                           and pool.provisioning is GkeProvisioning.RESERVATION),
        config_index=i, placement=f"gke.gpuPools[{i}] ({pool.name}, {pool.machine_type}, reservation {pool.reservation})")


def gke_inventory(pools: Sequence[GpuPool], gpu: GpuConfig) -> Inventory:
    """One group per GPU pool: the on-demand and reservation pools by accelerator type (one flavor
    each type), then each flexStart pool (a flavor of its own); Google's topology levels, written
    (values unknown offline) on A4 and A3 Ultra nodes of a reservation."""
    indexed = list(enumerate(pools))
    ordered = (sorted((ip for ip in indexed if ip[1].provisioning is not GkeProvisioning.FLEX_START),
                      key=lambda ip: ip[1].accelerator.type)
               + [ip for ip in indexed if ip[1].provisioning is GkeProvisioning.FLEX_START])
    groups = tuple(_gke_group(i, p, gpu) for i, p in ordered)
    described = ", ".join(f"{p.name} ({p.machine_type}, {p.provisioning.value})" for p in pools)
    labelled = any(g.topology_labelled for g in groups)
    return Inventory(
        groups=groups, unit=describe(gpu),
        level_labels={TopologyLevel.BLOCK: GKE_BLOCK_LABEL, TopologyLevel.RACK: GKE_SUBBLOCK_LABEL,
                      TopologyLevel.HOST: GKE_HOST_LABEL},
        levels_present=frozenset(TopologyLevel) if labelled else frozenset(),
        topology_labels=(GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL), values_known=False,
        level_binds_multinode_jobs=True,
        missing_level=("{level}: no GPU pool carries Google's topology labels, so Kueue would leave every GPU node "
                       f"out of the flavors and admit no job that requires the level (gke.gpuPools: "
                       f"{described or 'none'}); Google writes cloud.google.com/gce-topology-* on "
                       f"{' and '.join(TOPOLOGY_LABELLED)} nodes of a reservation (its block is 'the reserved "
                       "block in which the VM is located'): add such a pool with provisioning reservation, or "
                       "leave the level unset"))


def dev_inventory(gpu_nodes: Sequence[str], counts: Mapping[str, int], gpu: GpuConfig) -> Inventory:
    """One group, the gpuNodes (nvidia.com/gpu.present=true), sized when every node's count is declared."""
    per_gpu = units_per_gpu(gpu)
    known = bool(gpu_nodes) and len(counts) == len(gpu_nodes)
    gpus = sum(counts.values()) if known else None
    return Inventory(
        groups=(NodeGroup(name="gpu", flavor="gpu", node_labels={GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]},
                          nodes=tuple(gpu_nodes), node_count=len(gpu_nodes), gpu_model=None, gpus=gpus,
                          units=("not every gpuNodeGpus count is declared" if gpus is None
                                 else per_gpu if isinstance(per_gpu, str) else gpus * per_gpu),
                          size_key="gpuNodeGpus", node_gpus=dict(counts),
                          gpus_per_node=_same(set(counts.values())) if known else None,
                          units_per_gpu=None if isinstance(per_gpu, str) else per_gpu,
                          unit_problem=(sharing_key(gpu), per_gpu) if known and isinstance(per_gpu, str) else None),),
        unit=describe(gpu), missing_level="dev's nodes have no topology levels: leave it unset",
        labels_written={node: {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]} for node in gpu_nodes})
