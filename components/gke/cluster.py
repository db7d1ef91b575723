"""GkeCluster: a GKE Standard cluster, its CPU system node pool, a secret kubeconfig and the
Kubernetes provider every in-cluster component receives.

The control plane is zonal (gke.zone) or regional (gcp:region), on a release channel, with
Workload Identity and VPC-native networking (alias IPs; GKE picks the secondary ranges); private
nodes and master authorized networks when configured. The default node pool is removed once the
cluster exists: node pools are their own resources (the system pool here, GPU pools in
gpu_node_pool.py) so they can change without recreating the cluster. The kubeconfig authenticates
with `gke-gcloud-auth-plugin` (no static credential in it) and is still a secret: it names the
cluster's endpoint and CA. Dataplane V2 (gke.dataplane v2, the default) enforces NetworkPolicies.

Does not manage: the VPC, subnet ranges, the GCP project or its APIs (see docs/getting-started/gke.md:
container, file and iam APIs must be enabled). A private cluster's Cloud NAT is components/gke/cloud_nat.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import yaml

from components.gke.node_identity import account_id, node_service_account
from components.gke.upgrades import control_plane_minor, maintenance_policy
from config.gke import GkeConfig, GkeLocation
from config.scheduling_contract import GKE_POOL_LABEL

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True)
class GkeClusterArgs:
    gke: GkeConfig
    project: str  # gcp:project
    region: str  # gcp:region
    # kubernetesVersion: its minor becomes the control plane's min_master_version (components/gke/upgrades.py)
    kubernetes_version: str | None = None
    # GKE multi-networking, for the GPUDirect pools' additional node networks (gpudirect_networks.py).
    multi_networking: bool = False


def cluster_location(args: GkeClusterArgs) -> str:
    return args.gke.zone if args.gke.location is GkeLocation.ZONAL and args.gke.zone else args.region


def kubeconfig(context: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig for the cluster that authenticates through gke-gcloud-auth-plugin."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": context, "cluster": {"server": f"https://{endpoint}", "certificate-authority-data": ca_certificate}}
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "installHint": "Install gke-gcloud-auth-plugin: "
                            "gcloud components install gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
        },
        sort_keys=False,
    )


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    location: str
    project: str
    cluster_name: str

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:Cluster", name, None, opts)
        gke = args.gke
        self.location = cluster_location(args)
        self.project = args.project
        self.cluster_name = gke.cluster_name

        private = None
        if gke.private_nodes.enabled:
            private = gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True,
                enable_private_endpoint=False,  # the API stays reachable (restricted by authorized networks)
                master_ipv4_cidr_block=str(gke.private_nodes.master_cidr),
            )
        authorized = None
        if gke.authorized_networks:
            authorized = gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=str(n.cidr), display_name=n.name or None
                    )
                    for n in gke.authorized_networks
                ]
            )
        self.cluster = gcp.container.Cluster(
            name,
            name=gke.cluster_name,
            project=args.project,
            location=self.location,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=gke.release_channel.value),
            # Upgrades that do not kill training: the window, exclusions and the minor (upgrades.py).
            maintenance_policy=maintenance_policy(gke.maintenance),
            min_master_version=control_plane_minor(args.kubernetes_version) if args.kubernetes_version else None,
            # Node pools are separate resources; GKE needs one pool at creation, removed right after.
            remove_default_node_pool=True,
            initial_node_count=1,
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog"
            ),
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(stack_type="IPV4"),
            network=gke.network,
            subnetwork=gke.subnetwork,
            private_cluster_config=private,
            master_authorized_networks_config=authorized,
            enable_shielded_nodes=True,
            # Dataplane V2 enforces NetworkPolicies (config/network_policy_enforcement.py).
            datapath_provider=gke.dataplane.datapath_provider,
            # Which DCGM exporter reads the GPUs, said always: GKE turns its own on by default for new
            # clusters (config/gke_metrics.py).
            # gke.gcsData: GKE's Cloud Storage FUSE CSI driver mounts the bucket (config/gke_gcs_data.py).
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True))
            if gke.gcs_data.bucket else None,
            monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                enable_components=gke.gpu_metrics.monitoring_components,
                managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True)
                if not gke.gpu_metrics.own_exporter else None,
            ),
            deletion_protection=gke.deletion_protection,
            # GPUDirect pools: their extra NICs are GKE multi-networking (needs Dataplane V2, checked by
            # config/gke_gpudirect.py); the Toolkit's gke-cluster sets it when it gets additional networks.
            enable_multi_networking=True if args.multi_networking else None,
            # The default pool's settings only matter for the seconds it exists. datapathProvider is
            # ForceNew in the provider (terraform-provider-google resource_container_cluster.go): said
            # here too, so that the offline update preview (render --against) shows the replacement,
            # which must delete first: the new cluster takes the old one's name.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount", "nodeConfig"],
                                        replace_on_changes=["datapathProvider"], delete_before_replace=True),
        )

        sa, roles = node_service_account(
            f"{name}-system", args.project, account_id(gke.cluster_name, "system"),
            f"{gke.cluster_name} system node pool", self,
        )
        pool = gke.system_pool
        self.system_pool = gcp.container.NodePool(
            f"{name}-system",
            name="system",
            project=args.project,
            cluster=self.cluster.name,
            location=self.location,
            node_count=pool.nodes_per_zone,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type,
                disk_size_gb=pool.disk_size_gb,
                disk_type="pd-balanced",
                image_type="COS_CONTAINERD",
                service_account=sa.email,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],  # access is what the account's roles allow
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True
                ),
                metadata={"disable-legacy-endpoints": "true"},
                labels={GKE_POOL_LABEL: "system"},
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            opts=pulumi.ResourceOptions(parent=self, depends_on=roles),
        )

        context = f"gke_{args.project}_{self.location}_{gke.cluster_name}"
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate).apply(
                lambda v: kubeconfig(context, v[0], v[1])
            )
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            enable_server_side_apply=True,
            # In-cluster layers need somewhere to run: wait for the system pool.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]),
        )
        self.register_outputs(
            {
                "clusterName": self.cluster.name,
                "location": self.location,
                "endpoint": self.cluster.endpoint,
                "kubeconfig": self.kubeconfig,
                "systemPool": self.system_pool.name,
            }
        )
