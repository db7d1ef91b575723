"""gke: a GPU cluster on Google Kubernetes Engine, then the same in-cluster add-ons as lab and dev.

GCP project and region come from the `gcp:` namespace (gcp:project, gcp:region), as the Google
Cloud provider and every Pulumi GCP user expect; the config model (config/gke.py) checks them, and
the zones of the gpu-cluster:gke config against the region, before any resource is registered.
"""

from __future__ import annotations

import pulumi

from components.gke.cloud_nat import CloudNat, CloudNatArgs
from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.driver_installer import GkeDriverInstaller, GkeDriverInstallerArgs
from components.gke.filestore import FilestoreStorage, FilestoreStorageArgs
from components.gke.gcs_data import GcsDataAccess, GcsDataAccessArgs
from components.gke.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.gke.upgrades import upgrades_output
from components.gpu_stack import DriverSource, mig_layout
from components.training_namespace import training_namespace
from config import GkeStack, StackSecrets
from config.gke import GkeDriver
from config.gke_egress import GkeEgress
from config.gpu import GpuStack
from stacks import addons, gke_gpudirect
from stacks.contract import Cluster


def build(cfg: GkeStack, secrets: StackSecrets) -> dict[str, object]:
    project, region = cfg.project, cfg.region
    gke = cfg.gke
    gpudirect = gke_gpudirect.networks(cfg)  # GPUDirect: the GPU NICs' VPCs (stacks/gke_gpudirect.py)
    gke_cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=project, region=region,
                                                   kubernetes_version=cfg.kubernetes_version,
                                                   multi_networking=gpudirect.enabled))
    # Private nodes reach the charts' public registries through the NAT: every in-cluster layer waits for it.
    nat = (CloudNat("gke-egress", CloudNatArgs(gke=gke, project=project, region=region))
           if gke.private_nodes.enabled and gke.private_nodes.egress is GkeEgress.CLOUD_NAT else None)
    operator = cfg.gpu.stack is GpuStack.OPERATOR
    pools = [
        GpuNodePool(f"gpu-{p.name}", GpuNodePoolArgs(pool=p, cluster=gke_cluster, operator=operator,
                                                     mig_profile=mig_layout(cfg.gpu),
                                                     additional_networks=gpudirect.pool_networks(p)),
                    opts=pulumi.ResourceOptions(depends_on=gpudirect.networks.resources) if gpudirect.networks else None)
        for p in gke.gpu_pools
    ]
    provider = gke_cluster.provider
    k8s_opts = pulumi.ResourceOptions(provider=provider)
    gpudirect_k8s = gke_gpudirect.in_cluster(gpudirect, k8s_opts)
    installers = [
        GkeDriverInstaller(f"nvidia-driver-installer-{os}", GkeDriverInstallerArgs(os=os), opts=k8s_opts)
        for os in ("cos", "ubuntu")
        if any(p.driver.value == f"installer-{os}" for p in gke.gpu_pools)
    ]
    # GPUDirect pods mount host paths and add NET_ADMIN: outside baseline (gpudirect_pod.py)
    pod_gpudirect = gke_gpudirect.pod_gpudirect(cfg)
    namespace = training_namespace(provider, rdma=pod_gpudirect is not None)
    data = (GcsDataAccess("gcs-data", GcsDataAccessArgs(data=gke.gcs_data, project=project, cluster_name=gke.cluster_name,
                                                        namespace=namespace), opts=k8s_opts)
            if gke.gcs_data.bucket else None)
    storage = FilestoreStorage(
        "shared-storage",
        FilestoreStorageArgs(
            filestore=gke.filestore,
            project=project,
            location=gke.filestore_location or region,
            network=gke.network,
            instance_name=f"{gke.cluster_name}-shared",
            namespace=namespace,
            provider=provider,
        ),
    )
    cluster = Cluster(
        provider=provider,
        ready=[nat.nat] if nat else [],
        dcgm_exporter=gke.gpu_metrics.own_exporter,
        data_bucket=data.mount if data else None,
        # GKE's driver install or Google's installer DaemonSet, unless the operator owns drivers
        # (every pool's driver none)
        driver=DriverSource.GKE if all(p.driver is not GkeDriver.NONE for p in gke.gpu_pools)
        else DriverSource.OPERATOR_ON_GKE,
        gpu_node_count=cfg.gpu_node_count,
        # the gate waits for the GPU pools and their driver installers
        gpu_nodes_ready=[*pools, *installers, *(gpudirect_k8s.ready if gpudirect_k8s else [])],
        training_namespace=namespace,
        shared_claim=storage.claim,
        gpudirect=pod_gpudirect,
    )
    # A private cluster's egress (public nodes have their own addresses: no output, as before).
    egress = {"egress": {"egress": gke.private_nodes.egress.value,
                         **({"router": nat.router.name, "nat": nat.nat.name} if nat else {})}} \
        if gke.private_nodes.enabled else {}
    return {
        **addons.deploy(cfg, cluster, secrets),
        **egress,
        "kubeconfig": gke_cluster.kubeconfig,
        "clusterName": gke_cluster.cluster.name,
        "location": gke_cluster.location,
        "project": project,
        "gpuPools": {
            p.name: {
                "machineType": p.machine_type,
                "accelerator": p.accelerator.type,
                "gpusPerNode": p.accelerator.count,
                "zones": list(p.zones),
                "minNodesPerZone": p.autoscaling.min_nodes,
                "maxNodesPerZone": p.autoscaling.max_nodes,
                "spot": p.spot,
                "driver": p.driver.value,
            }
            for p in gke.gpu_pools
        },
        # when GKE may upgrade what, and the pinned minor (components/gke/upgrades.py)
        "upgrades": upgrades_output(gke, cfg.kubernetes_version),
        "sharedStorage": {
            "backend": "filestore",
            "tier": gke.filestore.tier.value,
            "capacityGb": gke.filestore.capacity_gb,
            "server": storage.server,
            "claim": f"{storage.claim.namespace}/{storage.claim.name}",
        },
    }
