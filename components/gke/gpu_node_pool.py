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

The boot disk type, the machine's bundled local SSDs as ephemeral storage and compact placement are
components/gke/pool_hardware.py; the upgrade strategy (surge 0 / unavailable 1 by default) upgrades.py.

Does not manage: creating reservations or placement policies, GPUDirect networking (a3 multi-NIC), quota.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.gke.cluster import CLOUD_PLATFORM_SCOPE, GkeCluster
from components.gke.node_identity import account_id, node_service_account
from components.gke.pool_hardware import pool_hardware
from components.gke.provisioning import pool_provisioning
from components.gke.upgrades import upgrade_settings
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
    # GPUDirect: the pool's additional node networks (components/gke/gpudirect_networks.py); None: none.
    additional_networks: list[gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs] | None = None


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
        hardware = pool_hardware(pool)
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
            # Boot disk, local SSD, placement and upgrades: pool_hardware.py, upgrades.py.
            placement_policy=hardware.placement_policy,
            upgrade_settings=upgrade_settings(pool.upgrade),
            # GPUDirect: the GPU NICs' networks (modules/compute/gke-node-pool main.tf network_config)
            network_config=(gcp.container.NodePoolNetworkConfigArgs(
                additional_node_network_configs=args.additional_networks) if args.additional_networks else None),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type,
                disk_size_gb=pool.disk_size_gb,
                disk_type=hardware.disk_type,
                ephemeral_storage_local_ssd_config=hardware.ephemeral_storage,
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
                # gVNIC: the Toolkit's gke-node-pool enables it on COS nodes; multi-networking's extra
                # NICs need it (GKE 'Set up multi-network support for Pods').
                gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True) if args.additional_networks else None,
            ),
            # The local SSD config is set when the pool is created, never changed after (as the Cluster
            # Toolkit's gke-node-pool ignores it): a pool created before it was set is not replaced for it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=roles, ignore_changes=[
                "initialNodeCount", "nodeConfig.ephemeralStorageLocalSsdConfig"]),
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
