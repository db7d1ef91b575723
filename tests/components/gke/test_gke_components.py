"""gke components under mocks, one at a time: GkeCluster (with its system pool, kubeconfig and
provider), GpuNodePool, GkeDriverInstaller (against Google's upstream DaemonSets) and
FilestoreStorage (the storage contract's claim)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

import config
from components import versions
from components.gke import driver_installer
from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.driver_installer import GkeDriverInstaller, GkeDriverInstallerArgs
from components.gke.filestore import FilestoreStorage, FilestoreStorageArgs
from components.gke.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.gke.node_identity import NODE_ROLES, account_id
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE
from components.training_namespace import training_namespace
from config.gke import GkeConfig, GkeStack
from render.program import SECRET_MARKER, RecordingMonitor
from tests.config.test_gke_config import A100, L4, gke_raw, pool

PROJECT, REGION = "my-gpu-project", "us-central1"
MINOR = versions.KUBERNETES_DEFAULT.rsplit(".", 1)[0]


def gke_cfg(*pools, gpu=None, **gke) -> GkeConfig:
    cfg = config.parse(gke_raw(*pools, gpu=gpu, **gke))
    assert isinstance(cfg, GkeStack)
    return cfg.gke


def of_type(mocks, type_: str):
    return [r for r in mocks.plan.resources if r.type == type_]


@pytest.fixture
def ignore_changes(mocks):
    """name -> ignoreChanges of every registration (the recording monitor does not keep them)."""
    seen: dict[str, list[str]] = {}
    monitor = pulumi.runtime.settings.SETTINGS.monitor
    original = RecordingMonitor.RegisterResource

    def register(request):
        seen[request.name] = list(request.ignoreChanges)
        return original(monitor, request)

    monitor.RegisterResource = register
    return seen


# ---------------------------------------------------------------------------------------------
# GkeCluster


@pulumi.runtime.test
def test_cluster(mocks, ignore_changes):
    gke = gke_cfg(privateNodes={"enabled": True}, authorizedNetworks=[{"cidr": "203.0.113.0/24", "name": "office"}])
    cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=PROJECT, region=REGION))

    def check(args):
        kubeconfig, secret = args[:2]
        assert secret is True
        kc = yaml.safe_load(kubeconfig)
        assert kc["clusters"][0]["cluster"]["server"] == "https://203.0.113.10"
        assert kc["clusters"][0]["cluster"]["certificate-authority-data"] == "RkFLRS1DQQ=="
        assert kc["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
        assert kc["current-context"] == f"gke_{PROJECT}_us-central1-a_gpu-cluster"
        (c,) = of_type(mocks, "gcp:container/cluster:Cluster")
        i = c.inputs
        assert (i["removeDefaultNodePool"], i["initialNodeCount"]) == (True, 1)
        assert i["releaseChannel"] == {"channel": "REGULAR"}
        assert i["workloadIdentityConfig"] == {"workloadPool": f"{PROJECT}.svc.id.goog"}
        assert i["networkingMode"] == "VPC_NATIVE" and "ipAllocationPolicy" in i
        assert i["location"] == "us-central1-a" and i["project"] == PROJECT
        assert i["deletionProtection"] is True
        assert i["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": False,
                                             "masterIpv4CidrBlock": "172.16.0.0/28"}
        assert i["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [{"cidrBlock": "203.0.113.0/24", "displayName": "office"}]
        assert "initialNodeCount" in ignore_changes["gke"]
        (system,) = of_type(mocks, "gcp:container/nodePool:NodePool")
        assert system.parent == c.parent and system.inputs["name"] == "system"
        assert system.inputs["nodeConfig"]["serviceAccount"] == f"gpu-cluster-system@{PROJECT}.iam.gserviceaccount.com"
        assert "guestAccelerators" not in system.inputs["nodeConfig"]
        roles = {r.inputs["role"] for r in of_type(mocks, "gcp:projects/iAMMember:IAMMember")}
        assert roles == set(NODE_ROLES)
        (provider,) = of_type(mocks, "pulumi:providers:kubernetes")
        assert provider.inputs["kubeconfig"] == SECRET_MARKER
        assert system.urn in provider.dependencies

    # The provider registers last (it waits for the system pool, which waits for its roles).
    is_secret = pulumi.Output.from_input(cluster.kubeconfig.is_secret())
    return pulumi.Output.all(cluster.kubeconfig, is_secret, cluster.provider.urn).apply(check)


@pulumi.runtime.test
def test_regional_cluster(mocks):
    gke = gke_cfg(location="regional", zone="", deletionProtection=False)
    cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=PROJECT, region=REGION))

    def check(_):
        (c,) = of_type(mocks, "gcp:container/cluster:Cluster")
        assert c.inputs["location"] == REGION and c.inputs["deletionProtection"] is False
        assert "privateClusterConfig" not in c.inputs and "masterAuthorizedNetworksConfig" not in c.inputs

    return cluster.cluster.name.apply(check)


def test_account_ids_fit_gcp_rules():
    for parts in (("gpu-cluster", "system"), ("a", "b"), ("a-very-long-cluster-name-x", "a-very-long-pool-name")):
        ident = account_id(*parts)
        assert 6 <= len(ident) <= 30 and ident[0].isalpha() and ident[-1] != "-", ident
    assert account_id("c" * 20, "p" * 20) != account_id("c" * 20, "p" * 19 + "q")


# ---------------------------------------------------------------------------------------------
# GpuNodePool


def _pool(mocks, p, operator=False, gpu=None):
    gke = gke_cfg(p, gpu=gpu)
    cluster = GkeCluster("gke", GkeClusterArgs(gke=gke, project=PROJECT, region=REGION))
    return GpuNodePool(f"gpu-{gke.gpu_pools[0].name}", GpuNodePoolArgs(pool=gke.gpu_pools[0], cluster=cluster, operator=operator))


def _gpu_pool_inputs(mocks, name):
    (np,) = [r for r in of_type(mocks, "gcp:container/nodePool:NodePool") if r.inputs["name"] == name]
    return np


def register_first_pool(raw: dict) -> GpuNodePool:
    """The cluster and the first GPU pool of a whole gke stack config `raw`, as stacks/gke.py registers them."""
    cfg = config.parse(raw)
    assert isinstance(cfg, GkeStack)
    cluster = GkeCluster("gke", GkeClusterArgs(gke=cfg.gke, project=PROJECT, region=REGION,
                                               kubernetes_version=cfg.kubernetes_version))
    return GpuNodePool(f"gpu-{cfg.gke.gpu_pools[0].name}", GpuNodePoolArgs(pool=cfg.gke.gpu_pools[0], cluster=cluster))


def pool_inputs(mocks, name: str) -> dict:
    """What GKE's node pool API receives for the pool `name`."""
    return _gpu_pool_inputs(mocks, name).inputs


@pulumi.runtime.test
def test_gpu_node_pool(mocks, ignore_changes):
    gpu_pool = _pool(mocks, pool(L4, labels={"team": "ml"}, driver="gke-latest"))

    def check(_):
        np = _gpu_pool_inputs(mocks, "l4")
        i, node = np.inputs, np.inputs["nodeConfig"]
        assert i["nodeLocations"] == ["us-central1-a"] and i["location"] == "us-central1-a"
        assert i["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 4, "locationPolicy": "ANY"}
        assert i["initialNodeCount"] == 0
        assert ignore_changes["gpu-l4"] == ["initialNodeCount", "nodeConfig.ephemeralStorageLocalSsdConfig"]
        assert node["spot"] is True and node["machineType"] == "g2-standard-8"
        assert node["imageType"] == "COS_CONTAINERD"
        assert node["guestAccelerators"] == [{"type": "nvidia-l4", "count": 1,
                                              "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}]
        assert node["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
        assert node["labels"] == {"team": "ml", "gpu-cluster/pool": "l4", "gpu-cluster/gke-driver": "gke-latest"}
        assert node["serviceAccount"] == f"gpu-cluster-l4@{PROJECT}.iam.gserviceaccount.com"
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        own = [r for r in of_type(mocks, "gcp:projects/iAMMember:IAMMember") if r.name.startswith("gpu-l4-")]
        assert {r.inputs["role"] for r in own} == set(NODE_ROLES)
        assert {r.inputs["member"] for r in own} == {f"serviceAccount:gpu-cluster-l4@{PROJECT}.iam.gserviceaccount.com"}
        assert {r.urn for r in own} <= set(np.dependencies)

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_gpu_pool_sharing_and_mig(mocks):
    gpu_pool = _pool(mocks, pool(A100, migPartitionSize="1g.5gb", sharing={"strategy": "time-sharing", "maxClients": 4}))

    def check(_):
        (acc,) = _gpu_pool_inputs(mocks, "a100").inputs["nodeConfig"]["guestAccelerators"]
        assert acc["gpuPartitionSize"] == "1g.5gb"
        assert acc["gpuSharingConfig"] == {"gpuSharingStrategy": "TIME_SHARING", "maxSharedClientsPerGpu": 4}
        assert acc["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "DEFAULT"}

    return gpu_pool.node_pool.name.apply(check)


@pytest.mark.parametrize("driver, image", [("installer-cos", "COS_CONTAINERD"), ("installer-ubuntu", "UBUNTU_CONTAINERD"),
                                           ("none", "UBUNTU_CONTAINERD")])
@pulumi.runtime.test
def test_operator_pool_disables_gke_driver_and_device_plugin(mocks, driver, image):
    gpu_pool = _pool(mocks, pool(L4, driver=driver), operator=True, gpu={"stack": "operator"})

    def check(_):
        node = _gpu_pool_inputs(mocks, "l4").inputs["nodeConfig"]
        assert node["guestAccelerators"][0]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "INSTALLATION_DISABLED"}
        assert node["labels"]["gke-no-default-nvidia-gpu-device-plugin"] == "true"
        assert node["imageType"] == image
        assert node["shieldedInstanceConfig"]["enableSecureBoot"] is False

    return gpu_pool.node_pool.name.apply(check)


# ---------------------------------------------------------------------------------------------
# GkeDriverInstaller against Google's DaemonSets


def _upstream(upstream_dir: Path, os: str) -> dict:
    return yaml.safe_load((upstream_dir / "gke-driver-installer" / f"{os}-daemonset-preloaded.yaml").read_text())


@pytest.mark.parametrize("os", ["cos", "ubuntu"])
def test_installer_matches_upstream(upstream_dir, os):
    ours = driver_installer.daemonset_manifest(f"nvidia-driver-installer-{os}", os)
    theirs = _upstream(upstream_dir, os)
    kubernetes_validate.validate(ours, MINOR, strict=True)
    assert ours["metadata"]["namespace"] == theirs["metadata"]["namespace"] == "kube-system"
    pod, up = ours["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    for key in ("priorityClassName", "tolerations", "volumes", "hostNetwork", "hostPID"):
        assert pod.get(key) == up.get(key), key
    assert [c["name"] for c in pod["initContainers"]] == [c["name"] for c in up["initContainers"]]
    for mine, their in zip(pod["initContainers"], up["initContainers"], strict=True):
        for key in ("image", "imagePullPolicy", "env", "volumeMounts", "securityContext", "resources"):
            assert mine.get(key) == their.get(key), (mine["name"], key)
    assert pod["containers"] == up["containers"]
    # Upstream's node conditions, plus only the pools that chose this installer.
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (up_term,) = up["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    extra = [e for e in term["matchExpressions"] if e not in up_term["matchExpressions"]]
    assert extra == [{"key": "gpu-cluster/gke-driver", "operator": "In", "values": [f"installer-{os}"]}]
    assert all(e in term["matchExpressions"] for e in up_term["matchExpressions"])


def test_installer_images_are_pinned_in_versions():
    cos = driver_installer.daemonset_manifest("x", "cos")["spec"]["template"]["spec"]
    images = {c["image"] for c in cos["initContainers"] + cos["containers"]}
    assert images == {versions.GKE_COS_DRIVER_INSTALLER_IMAGE, versions.GKE_PARTITION_GPU_IMAGE, versions.GKE_PAUSE_IMAGE}
    assert all("@sha256:" in i or i.endswith(":fixed") for i in images)


@pulumi.runtime.test
def test_installer_component(mocks):
    installer = GkeDriverInstaller("nvidia-driver-installer-cos", GkeDriverInstallerArgs(os="cos"))

    def check(_):
        (ds,) = of_type(mocks, "kubernetes:apps/v1:DaemonSet")
        (component,) = of_type(mocks, "gpucluster:gke:DriverInstaller")
        assert ds.parent == component.urn and ds.inputs["metadata"]["name"] == "nvidia-driver-installer-cos"
        obj = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": ds.inputs["metadata"], "spec": ds.inputs["spec"]}
        kubernetes_validate.validate(obj, MINOR, strict=True)

    return installer.daemonset.metadata.apply(check)


# ---------------------------------------------------------------------------------------------
# FilestoreStorage


@pulumi.runtime.test
def test_filestore_claim(mocks):
    gke = gke_cfg(filestore={"tier": "BASIC_SSD", "capacityGb": 2560})
    k8s_provider = k8s.Provider("k8s", kubeconfig="apiVersion: v1\nkind: Config\n")
    storage = FilestoreStorage("shared-storage", FilestoreStorageArgs(
        filestore=gke.filestore, project=PROJECT, location=gke.filestore_location, network="default",
        instance_name="gpu-cluster-shared", namespace=training_namespace(k8s_provider), provider=k8s_provider,
    ))

    def check(args):
        assert args[0] == "10.0.0.2"
        (inst,) = of_type(mocks, "gcp:filestore/instance:Instance")
        assert inst.inputs["tier"] == "BASIC_SSD" and inst.inputs["location"] == "us-central1-a"
        assert inst.inputs["fileShares"] == {"name": "shared", "capacityGb": 2560}
        assert inst.inputs["networks"][0]["network"] == "default"
        (pv,) = of_type(mocks, "kubernetes:core/v1:PersistentVolume")
        (pvc,) = of_type(mocks, "kubernetes:core/v1:PersistentVolumeClaim")
        assert pv.inputs["spec"]["nfs"] == {"server": "10.0.0.2", "path": "/shared"}
        assert pv.inputs["spec"]["claimRef"] == {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME}
        assert pv.inputs["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        assert pvc.inputs["metadata"] == {"name": CLAIM_NAME, "namespace": TRAINING_NAMESPACE}
        assert pvc.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
        assert pvc.inputs["spec"]["resources"]["requests"]["storage"] == "2560Gi"
        for r, kind in ((pv, "PersistentVolume"), (pvc, "PersistentVolumeClaim")):
            obj = {"apiVersion": "v1", "kind": kind, "metadata": r.inputs["metadata"], "spec": r.inputs["spec"]}
            kubernetes_validate.validate(obj, MINOR, strict=True)
        assert storage.claim.name == CLAIM_NAME and storage.claim.ready == [storage.pvc]

    return pulumi.Output.all(storage.server, storage.pvc.urn).apply(check)
