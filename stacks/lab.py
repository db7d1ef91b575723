"""lab: a kubeadm cluster on the user's own servers over SSH, then the in-cluster add-ons."""

from __future__ import annotations

import datetime

import pulumi

from components.cni import Cni, CniArgs
from components.gpu_stack import DriverSource
from components.lab.certificates import check_period
from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.kubeadm import KubeadmSettings
from components.lab.nfs_storage import NfsServerArgs, NfsSharedStorage, NfsSharedStorageArgs
from components.lab.node_join import Membership, MembershipArgs, NodeJoin, NodeJoinArgs, join_token_id
from components.lab.node_prep import HostSoftware, NodePrep, NodePrepArgs
from components.training_namespace import training_namespace
from config import LabStack, StackSecrets
from config.gpu import GpuStack
from stacks import addons
from stacks.contract import Cluster


def kubeadm_settings(cfg: LabStack) -> KubeadmSettings:
    return KubeadmSettings(
        kubernetes_version=cfg.kubernetes_version,
        api_endpoint=cfg.api_endpoint,
        pod_cidr=cfg.pod_cidr,
        service_cidr=cfg.service_cidr,
        gpu_taint=cfg.gpu_taint,
    )


def host_software(cfg: LabStack) -> HostSoftware:
    return HostSoftware(
        kubernetes_version=cfg.kubernetes_version,
        containerd_version=cfg.containerd_version,
        nvidia_driver=cfg.nvidia_driver,
        install_driver=cfg.host_installs_driver,
        host_toolkit=cfg.gpu.stack is GpuStack.DEVICE_PLUGIN,
    )


def build(cfg: LabStack, secrets: StackSecrets) -> dict[str, object]:
    assert secrets.ssh_private_key is not None  # the config model requires it for lab
    key = secrets.ssh_private_key
    software, cluster = host_software(cfg), kubeadm_settings(cfg)
    # Every host is prepared independently, in parallel.
    prep = {
        h.name: NodePrep(h.name, NodePrepArgs(host=h, software=software, private_key=key, bastion=cfg.bastion))
        for h in cfg.hosts
    }
    first = cfg.control_planes[0]
    cp = ControlPlane(
        "control-plane",
        ControlPlaneArgs(host=first, cluster=cluster, private_key=key, prepared=prep[first.name].done,
                         bastion=cfg.bastion, certificate_check_period=check_period(datetime.date.today())),
    )
    k8s_opts = pulumi.ResourceOptions(provider=cp.provider)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr), opts=k8s_opts)
    # The cluster's side of every join: one token (through the API), one CA hash, one drain step.
    members = tuple(h for h in cfg.hosts if h is not first)
    membership = Membership(
        "membership",
        MembershipArgs(control_plane=cp, members=members,
                       token_id=join_token_id(pulumi.get_project(), pulumi.get_stack())),
    )
    joins = [
        NodeJoin(
            h.name,
            NodeJoinArgs(
                cluster=cluster,
                host=h,
                control_plane=cp,
                membership=membership,
                private_key=key,
                prepared=prep[h.name].done,
                network=[cni],
                bastion=cfg.bastion,
            ),
        )
        for h in members
    ]

    namespace, claim = None, None
    st = cfg.storage
    if st.configured or cfg.runs_jobs:
        namespace = training_namespace(cp.provider, depends_on=[cni])
    if st.configured:
        assert namespace is not None
        # An existing export (storage.nfs), or one set up on the first control plane once that
        # host's package installs are finished (storage.provision).
        server, share = (st.nfs.server, st.nfs.path) if st.nfs else (str(first.address), st.export_path)
        storage = NfsSharedStorage(
            "shared-storage",
            NfsSharedStorageArgs(
                namespace=namespace, server=server, share=share, size=st.size,
                provision=NfsServerArgs(connection=cp.connection, clients=tuple(str(h.address) for h in cfg.hosts),
                                        after=prep[first.name].done) if st.provision else None,
            ),
            opts=pulumi.ResourceOptions(provider=cp.provider, depends_on=[cni]),
        )
        claim = storage.claim

    operator_driver = cfg.gpu.stack is GpuStack.OPERATOR and not cfg.nvidia_driver.preinstalled
    contract = Cluster(
        provider=cp.provider,
        # node prep installs the driver on the device-plugin path, and nvidiaDriver.preinstalled
        # means the hosts have one; otherwise the GPU Operator's driver container installs it
        driver=DriverSource.OPERATOR if operator_driver else DriverSource.HOST,
        ready=[cni],
        gpu_nodes=tuple(h.name for h in cfg.hosts if h.is_gpu),
        gpu_node_count=cfg.gpu_node_count,
        gpu_nodes_ready=[j.ready for j in joins],
        training_namespace=namespace,
        shared_claim=claim,
    )
    return {
        **addons.deploy(cfg, contract),
        "kubeconfig": cp.kubeconfig,
        "certificates": cp.certificates,
        "apiEndpoint": cfg.api_endpoint,
        "nodes": [h.name for h in cfg.hosts],
        "gpuNodes": {h.name: h.gpus for h in cfg.hosts if h.is_gpu},
        "joinedNodes": pulumi.Output.all(*[j.ready.id for j in joins]).apply(
            lambda _: [h.name for h in cfg.hosts if h is not first]
        ),
    }
