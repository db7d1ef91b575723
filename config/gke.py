"""gke: a GKE Standard cluster this program creates. `GkeStack` holds the shared keys
(addons.Addons), the `gke` section (cluster, system pool, GPU node pools, Filestore) and the Google
Cloud provider's own `gcp:project` and `gcp:region`, read from the `gcp:` namespace and shown as
they are in every message. GPU pools are checked against the accelerator table, drivers against
gpu.stack, every zone against gcp:region. The pool model itself is config/gke_pools.py; how a pool
gets its GPUs (onDemand, flexStart, reservation) is checked by config/gke_provisioning.py.

The GCP tables (config/gcp/: locations, machine types, accelerators) import nothing else of the
project; the labels a pool may not set are the scheduling contract's (config/scheduling_contract.py).
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

import config.mig_profiles as mig_profiles
from config.addons import Addons, Platform
from config.errors import Problems
from config.fields import Model, check_display_name, empty_to_none
from config.gcp import accelerators, locations, machine_types
from config.gcp.managed_namespaces import team_namespace_problems
from config.gke_egress import EGRESS_DESCRIPTION, GkeEgress, egress_problems, egress_warning
from config.gke_gcs_data import GkeGcsData, gcs_data_problems
from config.gke_gpudirect import acceptance_link_gbps, gpudirect_problems
from config.gke_metrics import GPU_METRICS_DESCRIPTION, GkeGpuMetrics, gpu_metrics_problems
from config.gke_pool_hardware import hardware_problems
from config.gke_pools import (  # the pool model, re-exported: components and tests import it from here
    GkeAccelerator,
    GkeAutoscaling,
    GkeDriver,
    GkeGpuSharing,
    GkeSharingStrategy,
    GpuPool,
    _check_gce_name,
    _check_zone,
    gke_gpus_per_node,
    provisioning_problems,
    reservation_value,
)
from config.gke_provisioning import GkeProvisioning
from config.gke_upgrades import GkeMaintenance, maintenance_problems
from config.gpu import GpuStack, SharingMode
from config.inert_keys import inert_gke_problems
from config.inventory import Inventory
from config.inventory_build import gke_inventory
from config.network_policy_enforcement import GKE_DATAPLANE_DESCRIPTION, GkeDataplane, gke_unenforced_warning
from config.scheduling_contract import GKE_POOL_OWN_LABELS, NO_GKE_DEVICE_PLUGIN_LABEL

__all__ = ["GkeAccelerator", "GkeAutoscaling", "GkeConfig", "GkeDriver", "GkeGpuSharing", "GkeSharingStrategy",
           "GkeStack", "GpuPool", "gke_gpus_per_node"]


class GkeLocation(enum.StrEnum):
    ZONAL = "zonal"  # control plane in gke.zone
    REGIONAL = "regional"  # control plane replicated across the zones of gcp:region


class ReleaseChannel(enum.StrEnum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


# VPC networks and subnetworks: at most 63 characters.
_GCE_NETWORK_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_GCE_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
_PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")


def _check_gce_network(v: str, kind: str) -> str:
    """A VPC network or subnetwork: its name, or its path in another project (Shared VPC)."""
    where = "global/networks" if kind == "network" else r"regions/[a-z]+-[a-z]+[0-9]+/subnetworks"
    if not re.fullmatch(rf"(projects/{_GCE_PROJECT}/{where}/)?{_GCE_NETWORK_NAME}", v):
        example = "projects/<host-project>/global/networks/<name>" if kind == "network" else \
            "projects/<host-project>/regions/<region>/subnetworks/<name>"
        raise ValueError(f"must be a {kind} name (a letter, then a-z, 0-9 and '-', ending alphanumeric, at most "
                         f"63 characters) or its path '{example}'")
    return v


class GkeSystemPool(Model):
    """The small CPU pool for cluster add-ons (DNS, metrics, the GPU stack's controllers)."""

    machine_type: str = Field(default="e2-standard-4", description="A general-purpose machine type.")
    nodes_per_zone: int = Field(default=1, ge=1, le=10, description="Nodes in each zone of the cluster.")
    disk_size_gb: int = Field(default=100, ge=50, le=65536, description="Boot disk size in GB.")

    @field_validator("machine_type")
    @classmethod
    def _machine_type(cls, v: str) -> str:
        problem = machine_types.check_general_purpose(v)
        if problem:
            raise ValueError(problem)
        return v


class GkePrivateNodes(Model):
    enabled: bool = Field(default=False, description="Nodes without public IPs (egress: privateNodes.egress).")
    master_cidr: ipaddress.IPv4Network = Field(default=ipaddress.IPv4Network("172.16.0.0/28"), description="The control plane's /28.")
    # How private nodes reach the charts' public registries (config/gke_egress.py).
    egress: GkeEgress = Field(default=GkeEgress.CLOUD_NAT, description=EGRESS_DESCRIPTION)


class AuthorizedNetwork(Model):
    cidr: ipaddress.IPv4Network = Field(description="A network allowed to reach the API server.")
    name: str = Field(default="", description="Display name of the CIDR block in GKE's API.")

    _name = field_validator("name")(classmethod(lambda cls, v: v and check_display_name(v)))


class FilestoreTier(enum.StrEnum):
    BASIC_HDD = "BASIC_HDD"
    BASIC_SSD = "BASIC_SSD"
    ZONAL = "ZONAL"
    REGIONAL = "REGIONAL"
    ENTERPRISE = "ENTERPRISE"

    @property
    def zonal(self) -> bool:
        return self in (FilestoreTier.BASIC_HDD, FilestoreTier.BASIC_SSD, FilestoreTier.ZONAL)


# Capacity limits per tier (GiB), from the Filestore service tiers.
FILESTORE_CAPACITY: dict[FilestoreTier, tuple[int, int]] = {
    FilestoreTier.BASIC_HDD: (1024, 65434),
    FilestoreTier.BASIC_SSD: (2560, 65434),
    FilestoreTier.ZONAL: (1024, 102400),
    FilestoreTier.REGIONAL: (1024, 102400),
    FilestoreTier.ENTERPRISE: (1024, 10240),
}


class GkeFilestore(Model):
    tier: FilestoreTier = Field(default=FilestoreTier.BASIC_HDD, description="Filestore service tier.")
    capacity_gb: int = Field(default=1024, description="GiB; minimum per tier (BASIC_SSD 2560, others 1024).")
    zone: str | None = Field(default=None, description="Zonal tiers: its zone (default: gke.zone or the first pool's).")

    _optional = field_validator("zone", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))

    @field_validator("zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        return None if v is None else _check_zone(v)


class GkeConfig(Model):
    """The gke section: cluster, system pool, GPU pools, Filestore. Project and region: gcp:project, gcp:region."""

    cluster_name: str = Field(default="gpu-cluster", description="Cluster name (also prefixes service accounts and Filestore).")
    location: GkeLocation = Field(default=GkeLocation.ZONAL, description="zonal (control plane in gke.zone) or regional.")
    zone: str | None = Field(default=None, description="zonal: the control plane's zone.")
    release_channel: ReleaseChannel = Field(default=ReleaseChannel.REGULAR, description="GKE release channel.")
    deletion_protection: bool = Field(default=True, description="The cluster cannot be deleted until this is false.")
    network: str = Field(default="default", description="VPC network.")
    subnetwork: str | None = Field(default=None, description="Subnetwork (default: the network's in the region).")
    private_nodes: GkePrivateNodes = Field(default_factory=GkePrivateNodes, description="Nodes without public IPs.")
    dataplane: GkeDataplane = Field(default=GkeDataplane.V2, description=GKE_DATAPLANE_DESCRIPTION)
    authorized_networks: tuple[AuthorizedNetwork, ...] = Field(default=(), description="Networks allowed to the API (empty: all).")
    system_pool: GkeSystemPool = Field(default_factory=GkeSystemPool, description="The CPU node pool for cluster add-ons.")
    gpu_pools: tuple[GpuPool, ...] = Field(default=(), description="The GPU node pools.")
    filestore: GkeFilestore = Field(default_factory=GkeFilestore, description="The Filestore of the shared claim.")
    maintenance: GkeMaintenance = Field(
        default_factory=GkeMaintenance,
        description="When GKE may upgrade: a recurring window and exclusions (config/gke_upgrades.py).")
    # One DCGM exporter per GPU node: this program's or GKE's managed one (config/gke_metrics.py).
    gpu_metrics: GkeGpuMetrics = Field(default=GkeGpuMetrics.EXPORTER, description=GPU_METRICS_DESCRIPTION)
    gcs_data: GkeGcsData = Field(default_factory=GkeGcsData, description="The training data in a Cloud Storage bucket "
                                 "(GCS FUSE CSI driver, Workload Identity).")

    _name = field_validator("cluster_name")(classmethod(lambda cls, v: _check_gce_name(v)))
    _optional = field_validator("zone", "subnetwork", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _network = field_validator("network")(classmethod(lambda cls, v: _check_gce_network(v, "network")))
    _subnetwork = field_validator("subnetwork")(
        classmethod(lambda cls, v: v if v is None else _check_gce_network(v, "subnetwork"))
    )

    @field_validator("zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        return None if v is None else _check_zone(v)

    @property
    def filestore_location(self) -> str | None:
        """Zonal tiers: a zone; None means the region (regional tiers)."""
        if not self.filestore.tier.zonal:
            return None
        if self.filestore.zone:
            return self.filestore.zone
        if self.zone:
            return self.zone
        return self.gpu_pools[0].zones[0] if self.gpu_pools and self.gpu_pools[0].zones else None


class GkeStack(Addons):
    """The gke stack: the shared keys, the gke section and gcp:project / gcp:region."""

    platform: Literal[Platform.GKE] = Field(
        default=Platform.GKE, description=Addons.model_fields["platform"].description
    )
    gke: GkeConfig = Field(
        default_factory=GkeConfig, description="The GKE cluster, its system pool, GPU node pools and Filestore."
    )
    # The Google Cloud provider's own keys, as every Pulumi GCP user sets them. Not required by
    # pydantic: an unset key gets the message with the command that sets it.
    project: str = Field(default="", alias="gcp:project", validate_default=True, description="GCP project id.")
    region: str = Field(default="", alias="gcp:region", validate_default=True,
                        description="GCP region; every zone of the gke section must be in it.")

    # GKE's node auto-repair (every pool has it) already replaces failing nodes: config/health.py.
    GPU_HEALTH_BY_DEFAULT: ClassVar[bool] = False

    FOREIGN_HINTS: ClassVar[dict[str, str]] = {
        "hosts": "GPU nodes come from gke.gpuPools",
        "gpuNodes": "GPU nodes come from gke.gpuPools",
        "kubeContext": "gke reads its kubeconfig from the cluster it creates",
        "kubeconfig": "gke reads its kubeconfig from the cluster it creates",
        "storage": "gke's shared volume is a Filestore instance: gke.filestore",
    }

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        if not v:
            raise ValueError("is required: `pulumi config set gcp:project <project-id>`")
        if not _PROJECT_ID.fullmatch(v):
            raise ValueError(f"{v!r} is not a project id (6-30 characters, a-z, 0-9, '-')")
        return v

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not v:
            raise ValueError("is required: `pulumi config set gcp:region <region>`, e.g. us-central1")
        problem = locations.check_region(v)
        if problem:
            raise ValueError(problem)
        return v

    def unenforced_warning(self) -> str:
        return gke_unenforced_warning(self.gke.dataplane)

    @functools.cached_property
    def inventory(self) -> Inventory:
        return gke_inventory(self.gke.gpu_pools, self.gpu)

    @property
    def acceptance_link_gbps(self) -> float | None:
        """network.linkGbps, else the GPUDirect network Google documents for the pools' machine."""
        return acceptance_link_gbps(self.network.link_gbps, self)

    def reservation_warnings(self) -> list[str]:
        """A reservation's size is not in the config, so no check can know it."""
        return [f"gpu-cluster:gke.gpuPools[{i}] ({p.name}) consumes reservation {reservation_value(p)}: how many "
                f"VMs it holds is not known offline; the check counts the pool at autoscaling.maxNodes "
                f"({p.autoscaling.max_nodes * len(p.zones)} nodes), GKE creates no more than the reservation has "
                "free (`gcloud compute reservations describe`)"
                for i, p in enumerate(self.gke.gpu_pools) if p.provisioning is GkeProvisioning.RESERVATION]

    def egress_warnings(self) -> list[str]:
        """Private nodes whose egress the plan does not create (config/gke_egress.py)."""
        return [w for w in [egress_warning(self.gke.private_nodes.enabled, self.gke.private_nodes.egress)] if w]

    @property
    def gpu_node_count(self) -> int:
        """The nodes that exist after `up`: each pool's minimum per zone."""
        return sum(p.autoscaling.min_nodes * len(p.zones) for p in self.gke.gpu_pools)

    def _capacity_problems(self) -> Problems:
        """Against the most the GPU pools can scale to, not their minimum."""
        t, pools = self.training, self.gke.gpu_pools
        if not pools:
            return []
        most = max(gke_gpus_per_node(p) for p in pools)
        if t.gpus_per_node > most:
            return [("training.gpusPerNode", f"{t.gpus_per_node} GPUs per pod but no pool's node has more than {most} "
                                             "(gke.gpuPools[].accelerator.count)")]
        room = sum(p.autoscaling.max_nodes * len(p.zones) for p in pools if gke_gpus_per_node(p) >= t.gpus_per_node)
        if t.nodes > room:
            return [("training.nodes", f"{t.nodes} pods (one per node) but the pools with {t.gpus_per_node} or more GPUs "
                                       f"per node scale to at most {room} nodes (autoscaling.maxNodes x zones)")]
        return []

    def _platform_problems(self, secrets: frozenset[str]) -> Problems:
        """Pools against the accelerator table, drivers against gpu.stack, zones against gcp:region."""
        gke, problems = self.gke, self._zone_problems()
        if self.network.rdma or self.network.roce is not None:
            key = "network.rdma" if self.network.rdma else "network.roce"
            problems.append((key, "not on gke: GPUDirect comes with the machine family there "
                                  "(gke.gpuPools[].gpuDirect auto on a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g); "
                                  "leave network.rdma false and network.roce unset"))
        if gke.location is GkeLocation.ZONAL and not gke.zone:
            problems.append(("gke.zone", "a zonal cluster needs its zone, e.g. 'us-central1-a' (or location: regional)"))
        if gke.location is GkeLocation.REGIONAL and gke.zone:
            problems.append(("gke.zone", "applies to location zonal only; a regional cluster spans gcp:region"))
        if gke.private_nodes.enabled and gke.private_nodes.master_cidr.prefixlen != 28:
            problems.append(("gke.privateNodes.masterCidr", "must be a /28, e.g. 172.16.0.0/28"))
        problems += egress_problems(gke.private_nodes.enabled, gke.private_nodes.egress, gke.network, gke.subnetwork)
        problems += gpu_metrics_problems(gke.gpu_metrics, self.gpu.stack is GpuStack.OPERATOR,
                                         [p.driver.gke_managed for p in gke.gpu_pools], self.monitoring.enabled)
        problems += gcs_data_problems(gke.gcs_data, self.training.enabled, self.training.prepare_data)
        low, high = FILESTORE_CAPACITY[gke.filestore.tier]
        if not low <= gke.filestore.capacity_gb <= high:
            problems.append(("gke.filestore.capacityGb", f"{gke.filestore.tier.value} takes {low} to {high} GiB"))
        if gke.filestore.zone and not gke.filestore.tier.zonal:
            problems.append(("gke.filestore.zone", f"{gke.filestore.tier.value} is regional; leave zone unset"))
        if not gke.gpu_pools:
            problems.append(("gke.gpuPools", "gke needs at least one GPU node pool"))
        operator = self.gpu.stack is GpuStack.OPERATOR
        if not operator and self.gpu.sharing.mode is SharingMode.TIME_SLICING:
            problems.append(("gpu.sharing.mode", "on gke with gpu.stack device-plugin, GKE's device plugin shares GPUs: "
                                                 "use gke.gpuPools[].sharing"))
        if not operator and self.gpu.sharing.mode is SharingMode.MIG:
            problems.append(("gpu.sharing.mode", "on gke with gpu.stack device-plugin, GKE partitions GPUs: "
                                                 "use gke.gpuPools[].migPartitionSize"))
        seen: dict[str, int] = {}
        for i, pool in enumerate(gke.gpu_pools):
            key = f"gke.gpuPools[{i}]"
            if pool.name in seen:
                problems.append((f"{key}.name", f"duplicates gke.gpuPools[{seen[pool.name]}].name {pool.name!r}"))
            seen.setdefault(pool.name, i)
            problems += _pool_problems(key, pool, operator)
            problems += provisioning_problems(key, pool, self.queues.enabled)
            problems += hardware_problems(key, pool)
        if operator and self.gpu.sharing.mode is SharingMode.MIG:
            problems += mig_profiles.gke_pool_problems(self.gpu.sharing.mig_profile,
                                                       [p.accelerator.type for p in gke.gpu_pools])
        problems += maintenance_problems(gke.maintenance)
        problems += team_namespace_problems(self.queues)
        # GPUDirect per machine family (config/gke_gpudirect.py)
        problems += gpudirect_problems(self, self.network.link_gbps, gke.dataplane is GkeDataplane.V2)
        private = self.gke.private_nodes
        problems += inert_gke_problems(self, not private.enabled and private.master_cidr != type(private)().master_cidr)
        if operator:
            installer = {p.driver.installer for p in gke.gpu_pools if not p.driver.gke_managed}
            if len(installer) > 1:
                problems.append(("gke.gpuPools", "with gpu.stack operator every pool's driver is an installer-* or every "
                                                 "one is none (the operator's driver setting is cluster-wide)"))
        return problems

    def _zone_problems(self) -> Problems:
        """Every zone the gke section names, inside gcp:region."""
        problems: Problems = []

        def outside(zone: str) -> bool:
            return locations.region_of(zone) != self.region

        if self.gke.zone and outside(self.gke.zone):
            problems.append(("gke.zone", f"{self.gke.zone} is not in gcp:region {self.region}"))
        if self.gke.filestore.zone and outside(self.gke.filestore.zone):
            problems.append(("gke.filestore.zone", f"{self.gke.filestore.zone} is not in gcp:region {self.region}"))
        for i, pool in enumerate(self.gke.gpu_pools):
            for zone in pool.zones:
                if outside(zone):
                    problems.append((f"gke.gpuPools[{i}].zones", f"{zone} is not in gcp:region {self.region}"))
        return problems


def _pool_problems(key: str, pool: GpuPool, operator: bool) -> Problems:
    """One GPU pool: its name, accelerator, labels, zones, autoscaling, sharing and driver."""
    problems: Problems = []
    if pool.name == "system":
        problems.append((f"{key}.name", "'system' is the CPU system pool's name"))
    problems += [(f"{key}.{sub}", msg) for sub, msg in
                 accelerators.check(pool.machine_type, pool.accelerator.type, pool.accelerator.count)]
    for label in pool.labels:
        if label == NO_GKE_DEVICE_PLUGIN_LABEL and not operator:
            problems.append((f"{key}.labels", f"{label} switches GKE's NVIDIA device plugin off, which gpu.stack "
                                              "device-plugin relies on on gke (no GPU would be advertised): remove "
                                              "it, or use gpu.stack operator (which sets it itself)"))
        elif label in GKE_POOL_OWN_LABELS:
            problems.append((f"{key}.labels", f"{label} is set by this program; remove it"))
    if not pool.zones:
        problems.append((f"{key}.zones", f"must list at least one zone where {pool.accelerator.type} is offered"))
    elif len(set(pool.zones)) != len(pool.zones):
        problems.append((f"{key}.zones", "lists a zone twice"))
    if pool.autoscaling.min_nodes > pool.autoscaling.max_nodes:
        problems.append((f"{key}.autoscaling.minNodes",
                         f"{pool.autoscaling.min_nodes} is more than maxNodes {pool.autoscaling.max_nodes}"))
    sharing = pool.sharing
    if sharing.strategy is GkeSharingStrategy.NONE and sharing.max_clients != 1:
        problems.append((f"{key}.sharing.maxClients", "applies to strategy time-sharing or mps; leave it at 1"))
    if sharing.strategy is not GkeSharingStrategy.NONE and sharing.max_clients < 2:
        problems.append((f"{key}.sharing.maxClients", f"{sharing.strategy.value} needs 2 to 48 clients per GPU"))
    acc = accelerators.ACCELERATORS.get(pool.accelerator.type)
    if pool.mig_partition_size is not None and acc is not None:
        if not acc.mig_partitions:
            mig = ", ".join(a.type for a in accelerators.ACCELERATORS.values() if a.mig_partitions)
            problems.append((f"{key}.migPartitionSize", f"GKE partitions {mig} (GKE's multi-instance GPU page); "
                                                        f"{pool.accelerator.type} has no MIG"))
        elif pool.mig_partition_size not in acc.mig_partitions:
            problems.append((f"{key}.migPartitionSize",
                             f"{acc.product} partitions are {', '.join(acc.mig_partitions)}"))
    if operator:
        # NVIDIA's GKE guide: GKE's driver and device plugin are switched off on the operator's
        # nodes; the driver comes from Google's installer DaemonSet or the operator (Ubuntu).
        if pool.driver.gke_managed:
            problems.append((f"{key}.driver", "gpu.stack operator needs installer-cos, installer-ubuntu or none "
                                              f"(GKE's own driver and device plugin are disabled); got {pool.driver.value}"))
        if sharing.strategy is not GkeSharingStrategy.NONE or pool.mig_partition_size is not None:
            problems.append((f"{key}.sharing", "GKE's sharing and MIG settings need GKE's device plugin; with "
                                               "gpu.stack operator use gpu.sharing"))
    elif pool.driver is GkeDriver.NONE:
        problems.append((f"{key}.driver", "none leaves the nodes without a driver: it needs gpu.stack operator"))
    return problems
