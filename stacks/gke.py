"""gke: a GPU cluster on Google Kubernetes Engine, then the same in-cluster layers as lab and dev.

GCP project and region come from the `gcp:` namespace (gcp:project, gcp:region), as the Google
Cloud provider and every Pulumi GCP user expect; the config model (config/gke.py) checks them, and
the zones of the gpu-cluster:gke config against the region, before any resource is registered.
"""

from __future__ import annotations

import pulumi

from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.driver_installer import GkeDriverInstaller, GkeDriverInstallerArgs
from components.gke.filestore import FilestoreStorage, FilestoreStorageArgs
from components.gke.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.gpu_stack import mig_layout
from components.training_namespace import training_namespace
from config import GkeStack, StackSecrets
from config.gpu import GpuStack
from stacks import layers


def build(cfg: GkeStack, secrets: StackSecrets) -> dict[str, object]:
    project, region = cfg.project, cfg.region
    gke = cfg.gke
    cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=project, region=region))
    operator = cfg.gpu.stack is GpuStack.OPERATOR
    pools = [
        GpuNodePool(f"gpu-{p.name}", GpuNodePoolArgs(pool=p, cluster=cluster, operator=operator,
                                                     mig_profile=mig_layout(cfg.gpu)))
        for p in gke.gpu_pools
    ]
    k8s_opts = pulumi.ResourceOptions(provider=cluster.provider)
    installers = [
        GkeDriverInstaller(f"nvidia-driver-installer-{os}", GkeDriverInstallerArgs(os=os), opts=k8s_opts)
        for os in ("cos", "ubuntu")
        if any(p.driver.value == f"installer-{os}" for p in gke.gpu_pools)
    ]
    storage = FilestoreStorage(
        "shared-storage",
        FilestoreStorageArgs(
            filestore=gke.filestore,
            project=project,
            location=gke.filestore_location or region,
            network=gke.network,
            instance_name=f"{gke.cluster_name}-shared",
            namespace=training_namespace(cluster.provider),
            provider=cluster.provider,
        ),
    )
    # The gate waits for the GPU pools and their driver installers; training mounts the Filestore claim.
    in_cluster = layers.deploy(
        cfg, cluster.provider, after=[], nodes_ready=[*pools, *installers], shared_claim=storage.claim
    )
    return {
        **in_cluster.outputs,
        "kubeconfig": cluster.kubeconfig,
        "clusterName": cluster.cluster.name,
        "location": cluster.location,
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
        "sharedStorage": {
            "backend": "filestore",
            "tier": gke.filestore.tier.value,
            "capacityGb": gke.filestore.capacity_gb,
            "server": storage.server,
            "claim": f"{storage.claim.namespace}/{storage.claim.name}",
        },
    }
