"""GpuNodePool: one GKE node pool with NVIDIA GPUs, taking the cluster as input.

Each pool runs as its own least-privilege service account, is tainted
nvidia.com/gpu=present:NoSchedule (only pods that tolerate it land there), autoscales per zone
between min and max (min 0 lets an idle pool cost nothing), on spot or on-demand VMs. The driver
comes from GKE (gpu_driver_installation_config DEFAULT or LATEST), from Google's driver-installer
DaemonSet (driver_installer.py; GKE's install disabled, the pool labelled for it) or from the GPU
Operator (GKE's install disabled, Ubuntu nodes). Under the GPU Operator GKE's own device plugin is
switched off with the node label NVIDIA's GKE guide gives. GPU sharing and MIG partitions are
GKE's (its device plugin enforces them), except under the GPU Operator in mode mig: there the
pool's node labels carry nvidia.com/mig.config=<gpu.sharing.migProfile>, the layout the operator's
MIG manager applies (a label every node the autoscaler adds is born with; on GPUs without MIG no
MIG manager runs and it is inert).

How the pool gets its GPUs (gke.gpuPools[].provisioning: onDemand, flexStart with queued
provisioning, or a specific reservation) is components/gke/provisioning.py.

`initial_node_count` is ignored after creation: the autoscaler owns the node count.

Does not manage: creating reservations, compact placement, GPUDirect networking (a3 multi-NIC), quota.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.gke.cluster import CLOUD_PLATFORM_SCOPE, GkeCluster
from components.gke.node_identity import account_id, node_service_account
from components.gke.provisioning import pool_provisioning
from config.gke import GkeDriver, GkeSharingStrategy, GpuPool
from config.scheduling_contract import (
    GKE_DRIVER_LABEL,
    GKE_POOL_LABEL,
    GPU_TAINT,
    MIG_CONFIG_LABEL,
    NO_GKE_DEVICE_PLUGIN_LABEL,
)

_DRIVER_VERSION = {
    GkeDriver.GKE_DEFAULT: "DEFAULT",
    GkeDriver.GKE_LATEST: "LATEST",
    GkeDriver.INSTALLER_COS: "INSTALLATION_DISABLED",
    GkeDriver.INSTALLER_UBUNTU: "INSTALLATION_DISABLED",
    GkeDriver.NONE: "INSTALLATION_DISABLED",
}
_SHARING = {GkeSharingStrategy.TIME_SHARING: "TIME_SHARING", GkeSharingStrategy.MPS: "MPS"}


@dataclass(frozen=True)
class GpuNodePoolArgs:
    pool: GpuPool
    cluster: GkeCluster
    # The GPU Operator runs the device plugin: switch GKE's off on these nodes.
    operator: bool = False
    # The GPU Operator's MIG manager partitions the nodes' GPUs by this profile (gpu_stack.mig_layout).
    mig_profile: str | None = None


def image_type(driver: GkeDriver) -> str:
    # The Ubuntu installer and the GPU Operator's driver containers need Ubuntu nodes.
    return "UBUNTU_CONTAINERD" if driver in (GkeDriver.INSTALLER_UBUNTU, GkeDriver.NONE) else "COS_CONTAINERD"


def node_labels(pool: GpuPool, operator: bool, mig_profile: str | None = None) -> dict[str, str]:
    labels = {**pool.labels, GKE_POOL_LABEL: pool.name, GKE_DRIVER_LABEL: pool.driver.value}
    if operator:
        labels[NO_GKE_DEVICE_PLUGIN_LABEL] = "true"
    if mig_profile is not None:
        labels[MIG_CONFIG_LABEL] = mig_profile
    return labels


def guest_accelerator(pool: GpuPool) -> gcp.container.NodePoolNodeConfigGuestAcceleratorArgs:
    sharing = None
    if pool.sharing.strategy is not GkeSharingStrategy.NONE:
        sharing = gcp.container.NodePoolNodeConfigGuestAcceleratorGpuSharingConfigArgs(
            gpu_sharing_strategy=_SHARING[pool.sharing.strategy],
            max_shared_clients_per_gpu=pool.sharing.max_clients,
        )
    return gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
        type=pool.accelerator.type,
        count=pool.accelerator.count,
        gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
            gpu_driver_version=_DRIVER_VERSION[pool.driver]
        ),
        gpu_sharing_config=sharing,
        gpu_partition_size=pool.mig_partition_size,
    )


class GpuNodePool(pulumi.ComponentResource):
    node_pool: gcp.container.NodePool

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:GpuNodePool", name, None, opts)
        pool, cluster = args.pool, args.cluster
        how = pool_provisioning(pool)
        sa, roles = node_service_account(
            name, cluster.project, account_id(cluster.cluster_name, pool.name),
            f"{cluster.cluster_name} GPU node pool {pool.name}", self,
        )
        self.node_pool = gcp.container.NodePool(
            name,
            name=pool.name,
            project=cluster.project,
            cluster=cluster.cluster.name,
            location=cluster.location,
            node_locations=list(pool.zones),
            initial_node_count=pool.autoscaling.min_nodes,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                min_node_count=pool.autoscaling.min_nodes,
                max_node_count=pool.autoscaling.max_nodes,
                location_policy=how.location_policy,
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=how.auto_repair, auto_upgrade=True),
            queued_provisioning=how.queued_provisioning,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type,
                disk_size_gb=pool.disk_size_gb,
                disk_type=pool.disk_type,
                image_type=image_type(pool.driver),
                spot=pool.spot,
                flex_start=how.flex_start,
                reservation_affinity=how.reservation_affinity,
                guest_accelerators=[guest_accelerator(pool)],
                service_account=sa.email,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],  # access is what the account's roles allow
                labels={**node_labels(pool, args.operator, args.mig_profile), **how.labels},
                taints=[gcp.container.NodePoolNodeConfigTaintArgs(
                    key=GPU_TAINT.key, value=GPU_TAINT.value, effect=GPU_TAINT.gke_effect
                )],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                    # GKE-installed drivers are signed; self-installed ones may not load under secure boot.
                    enable_secure_boot=pool.driver.gke_managed,
                    enable_integrity_monitoring=True,
                ),
                metadata={"disable-legacy-endpoints": "true"},
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=roles, ignore_changes=["initialNodeCount"]),
        )
        self.register_outputs(
            {
                "name": self.node_pool.name,
                "machineType": pool.machine_type,
                "accelerator": f"{pool.accelerator.count}x {pool.accelerator.type}",
                "driver": pool.driver.value,
                "serviceAccount": sa.email,
            }
        )
