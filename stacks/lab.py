"""lab: a kubeadm cluster on the user's own servers over SSH, then the in-cluster add-ons."""

from __future__ import annotations

import pulumi

from components.cni import Cni, CniArgs
from components.config import GpuStack, StackConfig, StackSecrets
from components.gpu_stack import DriverSource
from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.nfs_storage import NfsServerArgs, NfsSharedStorage, NfsSharedStorageArgs
from components.lab.node_join import NodeJoin, NodeJoinArgs
from components.lab.node_prep import NodePrep, NodePrepArgs
from components.training_namespace import training_namespace
from stacks import addons
from stacks.contract import Cluster


def build(cfg: StackConfig, secrets: StackSecrets) -> dict[str, object]:
    assert secrets.ssh_private_key is not None  # the config model requires it for lab
    key = secrets.ssh_private_key
    # Every host is prepared independently, in parallel.
    prep = {h.name: NodePrep(h.name, NodePrepArgs(host=h, cluster=cfg, private_key=key)) for h in cfg.hosts}
    first = cfg.control_planes[0]
    cp = ControlPlane(
        "control-plane",
        ControlPlaneArgs(cluster=cfg, private_key=key, prepared=prep[first.name].done),
    )
    k8s_opts = pulumi.ResourceOptions(provider=cp.provider)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr), opts=k8s_opts)
    joins = [
        NodeJoin(
            h.name,
            NodeJoinArgs(
                cluster=cfg,
                host=h,
                control_plane=cp,
                private_key=key,
                prepared=prep[h.name].done,
                network=[cni],
            ),
        )
        for h in cfg.hosts
        if h is not first
    ]

    namespace, claim = None, None
    st = cfg.storage
    if st.configured or addons.runs_jobs(cfg):
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
    cluster = Cluster(
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
        **addons.deploy(cfg, cluster),
        "kubeconfig": cp.kubeconfig,
        "apiEndpoint": cfg.api_endpoint,
        "nodes": [h.name for h in cfg.hosts],
        "gpuNodes": {h.name: h.gpus for h in cfg.hosts if h.is_gpu},
        "joinedNodes": pulumi.Output.all(*[j.ready.id for j in joins]).apply(
            lambda _: [h.name for h in cfg.hosts if h is not first]
        ),
    }
