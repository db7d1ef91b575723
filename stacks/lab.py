"""lab: a kubeadm cluster on the user's own servers over SSH."""

from __future__ import annotations

import pulumi

from components.cni import Cni, CniArgs
from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.kubeadm import KubeadmSettings
from components.lab.node_join import NodeJoin, NodeJoinArgs
from components.lab.node_prep import HostSoftware, NodePrep, NodePrepArgs
from config import LabStack, StackSecrets
from config.gpu import GpuStack
from stacks import layers


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
                         bastion=cfg.bastion),
    )
    k8s_opts = pulumi.ResourceOptions(provider=cp.provider)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr), opts=k8s_opts)
    joins = [
        NodeJoin(
            h.name,
            NodeJoinArgs(
                cluster=cluster,
                host=h,
                control_plane=cp,
                private_key=key,
                prepared=prep[h.name].done,
                network=[cni],
                bastion=cfg.bastion,
            ),
        )
        for h in cfg.hosts
        if h is not first
    ]
    in_cluster = layers.deploy(
        cfg, cp.provider, after=[cni], nodes_ready=[j.ready for j in joins],
        nfs_connection=cp.connection,  # storage.provision: the NFS server runs on the control plane
        nfs_after=prep[first.name].done,  # ...once that host's package installs are finished
    )
    return {
        **in_cluster.outputs,
        "kubeconfig": cp.kubeconfig,
        "apiEndpoint": cfg.api_endpoint,
        "nodes": [h.name for h in cfg.hosts],
        "gpuNodes": {h.name: h.gpus for h in cfg.hosts if h.is_gpu},
        "joinedNodes": pulumi.Output.all(*[j.ready.id for j in joins]).apply(
            lambda _: [h.name for h in cfg.hosts if h is not first]
        ),
    }
