"""gke: a GPU cluster on Google Kubernetes Engine, then the same in-cluster layers as lab and dev.

GCP project and region come from the `gcp:` namespace (gcp:project, gcp:region), as the Google
Cloud provider and every Pulumi GCP user expect; they are checked here, with the zones of the
gpu-cluster:gke config against the region, before any resource is registered.
"""

from __future__ import annotations

import re

import pulumi

from components.config import ConfigError, GkeDriver, GpuStack, StackConfig, StackSecrets
from components.gke import locations
from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.driver_installer import GkeDriverInstaller, GkeDriverInstallerArgs
from components.gke.filestore import FilestoreStorage, FilestoreStorageArgs
from components.gke.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.gpu_stack import DriverSource, mig_layout
from components.training_namespace import training_namespace
from stacks import addons
from stacks.contract import Cluster

_PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")


class GcpConfigError(ConfigError):
    """A ConfigError whose keys may be in the gcp: namespace (shown as they are) or gpu-cluster:."""

    @staticmethod
    def qualified_key(key: str) -> str:
        return key if key.startswith("gcp:") else ConfigError.qualified_key(key)


def gcp_settings(cfg: StackConfig, gcp_config: pulumi.Config | None = None) -> tuple[str, str]:
    """(gcp:project, gcp:region), checked, with every zone of the gke config inside the region."""
    gcp_config = gcp_config or pulumi.Config("gcp")
    project, region = gcp_config.get("project"), gcp_config.get("region")
    problems: list[tuple[str, str]] = []
    if not project:
        problems.append(("gcp:project", "is required: `pulumi config set gcp:project <project-id>`"))
    elif not _PROJECT_ID.fullmatch(project):
        problems.append(("gcp:project", f"{project!r} is not a project id (6-30 characters, a-z, 0-9, '-')"))
    if not region:
        problems.append(("gcp:region", "is required: `pulumi config set gcp:region <region>`, e.g. us-central1"))
    elif region_problem := locations.check_region(region):
        problems.append(("gcp:region", region_problem))
    else:
        def outside(zone: str) -> bool:
            return locations.region_of(zone) != region

        if cfg.gke.zone and outside(cfg.gke.zone):
            problems.append(("gke.zone", f"{cfg.gke.zone} is not in gcp:region {region}"))
        if cfg.gke.filestore.zone and outside(cfg.gke.filestore.zone):
            problems.append(("gke.filestore.zone", f"{cfg.gke.filestore.zone} is not in gcp:region {region}"))
        for i, pool in enumerate(cfg.gke.gpu_pools):
            for zone in pool.zones:
                if outside(zone):
                    problems.append((f"gke.gpuPools[{i}].zones", f"{zone} is not in gcp:region {region}"))
    if problems:
        raise GcpConfigError(problems)
    assert project is not None and region is not None
    return project, region


def build(cfg: StackConfig, secrets: StackSecrets) -> dict[str, object]:
    project, region = gcp_settings(cfg)
    gke = cfg.gke
    gke_cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=project, region=region))
    operator = cfg.gpu.stack is GpuStack.OPERATOR
    pools = [
        GpuNodePool(f"gpu-{p.name}", GpuNodePoolArgs(pool=p, cluster=gke_cluster, operator=operator,
                                                     mig_profile=mig_layout(cfg.gpu)))
        for p in gke.gpu_pools
    ]
    provider = gke_cluster.provider
    k8s_opts = pulumi.ResourceOptions(provider=provider)
    installers = [
        GkeDriverInstaller(f"nvidia-driver-installer-{os}", GkeDriverInstallerArgs(os=os), opts=k8s_opts)
        for os in ("cos", "ubuntu")
        if any(p.driver.value == f"installer-{os}" for p in gke.gpu_pools)
    ]
    namespace = training_namespace(provider)
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
        # GKE's driver install or Google's installer DaemonSet, unless the operator owns drivers
        # (every pool's driver none)
        driver=DriverSource.GKE if all(p.driver is not GkeDriver.NONE for p in gke.gpu_pools)
        else DriverSource.OPERATOR_ON_GKE,
        gpu_node_count=cfg.gpu_node_count,
        # the gate waits for the GPU pools and their driver installers
        gpu_nodes_ready=[*pools, *installers],
        training_namespace=namespace,
        shared_claim=storage.claim,
    )
    return {
        **addons.deploy(cfg, cluster),
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
        "sharedStorage": {
            "backend": "filestore",
            "tier": gke.filestore.tier.value,
            "capacityGb": gke.filestore.capacity_gb,
            "server": storage.server,
            "claim": f"{storage.claim.namespace}/{storage.claim.name}",
        },
    }
