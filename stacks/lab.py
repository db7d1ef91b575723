"""lab: a kubeadm cluster on the user's own servers over SSH, then the in-cluster add-ons.

Before anything is registered, the config is compared with what the stack's last successful `up`
deployed (its own output `deployed`, read back through the engine): a downgrade, a skipped minor
or, without allowRebuild, a change that needs a new cluster stops the run naming the key. The
hosts' upgrade scripts check the same on the hosts themselves (components/lab/upgrade.py), for a
stack whose outputs do not say (deployed by an older version of this program, or a failed `up`).
"""

from __future__ import annotations

import datetime

import pulumi
import pulumi_kubernetes as k8s
from pydantic import ValidationError

from components.cni import Cni, CniArgs
from components.gpu_stack import DriverSource
from components.lab import certificates, ssh
from components.lab.certificates import check_period
from components.lab.control_plane import ControlPlane, ControlPlaneArgs, init_host_reset
from components.lab.etcd_backup import EtcdBackup, EtcdBackupArgs, EtcdBackupSettings, shared_dir
from components.lab.etcd_backup_s3 import EtcdBackupS3, EtcdBackupS3Args
from components.lab.etcd_defrag import EtcdDefrag, EtcdDefragArgs, EtcdDefragSettings
from components.lab.gone_hosts import spare_gone_host
from components.lab.hardening_files import ControlPlaneFiles, ControlPlaneFilesArgs
from components.lab.kubeadm import KubeadmSettings
from components.lab.kubelet_config import KubeletConfigRollout, KubeletConfigRolloutArgs
from components.lab.kubelet_serving import KubeletServingApprover, KubeletServingApproverArgs
from components.lab.nfs_storage import NfsServerArgs, NfsSharedStorage, NfsSharedStorageArgs
from components.lab.node_join import Membership, MembershipArgs, NodeJoin, NodeJoinArgs, join_token_id
from components.lab.node_prep import HostSoftware, NodePrep, NodePrepArgs, RoceHost
from components.lab.upgrade import UpgradePolicy
from components.training_namespace import training_namespace
from config import ConfigError, LabStack, StackSecrets
from config.control_planes import members_of
from config.gpu import GpuStack
from config.lab import READ_STACK_OUTPUTS, DeployedLab, Host, Role
from stacks import addons
from stacks.contract import Cluster


def kubeadm_settings(cfg: LabStack) -> KubeadmSettings:
    return KubeadmSettings.of(cfg)


def host_software(cfg: LabStack) -> HostSoftware:
    return HostSoftware(
        kubernetes_version=cfg.kubernetes_version,
        containerd_version=cfg.containerd_version,
        nvidia_driver=cfg.nvidia_driver,
        install_driver=cfg.host_installs_driver,
        host_toolkit=cfg.gpu.stack is GpuStack.DEVICE_PLUGIN,
        roce=roce_host(cfg),
        verify_apt_keys=cfg.hardening.verify_apt_keys,
    )


def roce_host(cfg: LabStack) -> RoceHost | None:
    """network.rdma with network.roce: the NIC node prep readies on every GPU host."""
    roce = cfg.network.roce
    if not cfg.network.rdma or roce is None:
        return None
    return RoceHost(interface=roce.interface, pci_address=roce.pci_address, hca=roce.hca, driver=roce.driver)


def upgrade_policy(cfg: LabStack) -> UpgradePolicy:
    return UpgradePolicy(max_unavailable=cfg.max_unavailable)


def etcd_backup_settings(cfg: LabStack, host: Host, deployed: DeployedLab | None = None) -> EtcdBackupSettings | None:
    """etcdBackup on control plane `host` (None: off). With storage.provision the control plane that
    serves the export (LabStack.export_host), if one does, also copies its snapshots there."""
    backup = cfg.etcd_backup
    if not backup.enabled:
        return None
    shared = bool(nfs_backup_dir(cfg, deployed)) and host is cfg.export_host(deployed)
    return EtcdBackupSettings(node=host.name, schedule=backup.schedule, retain=backup.retain,
                              host_path=backup.host_path, kubernetes_minor=cfg.kubernetes_minor,
                              members=tuple(h for h in cfg.control_planes if not h.gone),  # a restore leaves out the dead
                              shared_dir=shared_dir(cfg.storage.export_path) if shared else None,
                              s3=backup.s3 is not None, member_index=cfg.control_planes.index(host))


def spared(h: Host) -> pulumi.ResourceOptions | None:
    """hosts[].gone: the options of that host's components, whose steps never connect to it again
    and leave without their delete once its entry goes (components/lab/gone_hosts.py)."""
    return pulumi.ResourceOptions(transformations=[spare_gone_host()]) if h.gone else None


def nfs_backup_dir(cfg: LabStack, deployed: DeployedLab | None) -> str:
    """The etcd snapshots' shared copy on the provisioned NFS server ("": none), which it exports to
    the control planes only (beside storage.exportPath, not in it: etcd_backup.shared_dir). Only a
    control plane takes snapshots: an export on a worker gets none."""
    export = cfg.export_host(deployed)
    wanted = cfg.etcd_backup.enabled and cfg.etcd_backup.copy_to_shared
    return shared_dir(cfg.storage.export_path) if wanted and export is not None and export.role is Role.CONTROL_PLANE else ""


def etcd_backups(cfg: LabStack, cp: ControlPlane, joins: dict[str, NodeJoin], key: pulumi.Output[str],
                 s3_secrets: dict[str, pulumi.Output[str]], deployed: DeployedLab | None) -> object:
    """etcdBackup: the snapshot job on every control plane, once its etcd runs (with etcdBackup.s3,
    after the S3 client is installed); the stack output."""
    latest = []
    for h in cfg.control_planes:
        settings = etcd_backup_settings(cfg, h, deployed)
        if settings is None:
            return "off: etcdBackup.enabled is false"
        connection = cp.connection if h is cp.host else ssh.connection(h, key, cfg.bastion)
        after = [joins[h.name].ready if h.name in joins else cp.init]
        if cfg.etcd_backup.s3 is not None:
            s3 = EtcdBackupS3(f"{h.name}-etcd-backup-s3", EtcdBackupS3Args(
                cfg.etcd_backup.s3, h.name, str(h.address), s3_secrets, connection, after), opts=spared(h))
            after = [*after, s3.install]
        latest.append(EtcdBackup(f"{h.name}-etcd-backup", EtcdBackupArgs(settings, connection, after),
                                 opts=spared(h)).latest)
    b = cfg.etcd_backup
    return {"schedule": b.schedule, "retain": b.retain, "hostPath": b.host_path,
            "restore": "hosts/<control plane>/etcd-restore.sh (python -m render); docs/operations/etcd-backup.md",
            # The snapshot each install step took, as of `pulumi up`; the live view is the metric.
            "latestAtUp": pulumi.Output.all(*latest),
            **({"s3": f"{b.s3.endpoint}/{b.s3.bucket}/{b.s3.prefix} (encrypted)"} if b.s3 else {})}


def etcd_defrags(cfg: LabStack, cp: ControlPlane, joins: dict[str, NodeJoin], key: pulumi.Output[str]) -> None:
    """The scheduled defragmentation on every control plane, once its etcd runs (only the member
    whose name sorts first acts on a run: components/lab/etcd_defrag.py)."""
    for h in cfg.control_planes:
        connection = cp.connection if h is cp.host else ssh.connection(h, key, cfg.bastion)
        after = [joins[h.name].ready if h.name in joins else cp.init]
        settings = EtcdDefragSettings(node=h.name, kubernetes_minor=cfg.kubernetes_minor)
        EtcdDefrag(f"{h.name}-etcd-defrag", EtcdDefragArgs(settings, connection, after), opts=spared(h))


def former_control_planes(cfg: LabStack, deployed: DeployedLab | None) -> tuple[str, ...]:
    """The control planes the last `up` deployed that this config no longer lists (node names)."""
    now = {h.name for h in cfg.control_planes}
    return tuple(m.split(" ", 1)[0] for m in members_of(deployed.control_planes if deployed else "")
                 if m.split(" ", 1)[0] not in now)


def control_plane_certificates(cfg: LabStack, cp: ControlPlane, joins: dict[str, NodeJoin],
                               key: pulumi.Output[str]) -> None:
    """The certificate expiry metric on every control plane, and the renewal check on each joined
    one, one host after another, the entry point first (components/lab/certificates.py)."""
    ordered = [cp.host, *(h for h in cfg.control_planes if h is not cp.host)]
    hosts = [(h, cp.connection if h is cp.host else ssh.connection(h, key, cfg.bastion),
              joins[h.name].ready if h.name in joins else cp.init) for h in ordered]
    certificates.on_every_control_plane(cp.certificates_check, hosts, check_period(datetime.date.today()), spared)




def kubelet_config(cfg: LabStack, cp: ControlPlane, joins: dict[str, NodeJoin], key: pulumi.Output[str],
                   approver: KubeletServingApprover, membership: Membership) -> None:
    """The kubelet-config ConfigMap brought to the program's fields (a cluster initialised by an older
    version lacks some), then every host not gone, one kubelet restart at a time
    (components/lab/kubelet_config.py)."""
    ordered = [cp.host, *(h for h in cfg.hosts if h is not cp.host and not h.gone)]
    hosts = [(h, cp.connection if h is cp.host else ssh.connection(h, key, cfg.bastion),
              joins[h.name].ready if h.name in joins else cp.init) for h in ordered]
    KubeletConfigRollout("kubelet-config", KubeletConfigRolloutArgs(
        cluster=kubeadm_settings(cfg), entry=cp.connection, hosts=hosts, upgrader_token=membership.upgrader_token,
        slot_tries=upgrade_policy(cfg).slot_tries, after=[cp.init, hosts[0][2], approver.deployment]))


def deployed_before() -> DeployedLab | None:
    """What this stack's last successful `up` deployed: its own stack output `deployed`.

    Read with the engine's readStackOutputs function, which a StackReference uses too, but as an
    invoke: it answers synchronously, so the check runs before any resource is registered. At
    `pulumi up` the backend still holds the previous checkpoint. None for a new stack, one deployed
    by a version of this program without the output, and under render's mocks (tests mock it).
    The other outputs come back too (the kubeconfig decrypted): only `deployed` is read."""
    stack = f"{pulumi.get_organization() or 'organization'}/{pulumi.get_project()}/{pulumi.get_stack()}"
    try:
        result = pulumi.runtime.invoke(READ_STACK_OUTPUTS, {"name": stack})
    except Exception as exc:  # the engine's error says why; the stack cannot be checked without it
        raise pulumi.RunError(f"cannot read the outputs of {stack} to compare the config with what it deployed: {exc}") from exc
    outputs = (result.value or {}).get("outputs") or {}
    record = outputs.get("deployed")
    try:
        return DeployedLab.model_validate(record) if isinstance(record, dict) else None
    except ValidationError:
        return None  # not written by this program; the hosts' own checks still apply


def build(cfg: LabStack, secrets: StackSecrets) -> dict[str, object]:
    assert secrets.ssh_private_key is not None  # the config model requires it for lab
    deployed = deployed_before()
    if problems := cfg.change_problems(deployed):
        raise ConfigError(problems)
    key = secrets.ssh_private_key
    software, cluster, upgrade = host_software(cfg), kubeadm_settings(cfg), upgrade_policy(cfg)
    # Every host is prepared independently, in parallel.
    prep = {
        h.name: NodePrep(h.name, NodePrepArgs(host=h, software=software, private_key=key, bastion=cfg.bastion,
                                              upgrade=upgrade), opts=spared(h))
        for h in cfg.hosts
    }
    # The entry point: the first control plane not gone; no other host is special (issue 34).
    first = cfg.entry_point
    # The audit policy and the encryption config on every control plane before kubeadm reads them.
    cp_files = ControlPlaneFiles("control-plane-files", ControlPlaneFilesArgs(
        control_planes=tuple(cfg.control_planes), settings=cfg.hardening, private_key=key,
        prepared={h.name: prep[h.name].done for h in cfg.control_planes}, bastion=cfg.bastion),
        opts=pulumi.ResourceOptions(transformations=[spare_gone_host(
            frozenset(f"control-plane-files-{h.name}" for h in cfg.control_planes if h.gone))]) if cfg.gone else None)
    cp = ControlPlane(
        "control-plane",
        ControlPlaneArgs(host=first, cluster=cluster, private_key=key, prepared=cp_files.done[first.name],
                         bastion=cfg.bastion, certificate_check_period=check_period(datetime.date.today()),
                         upgrade=upgrade, protect=not cfg.allow_rebuild, kube_vip=cfg.kube_vip,
                         init_host=cfg.init_identity(deployed),
                         control_planes=tuple(h for h in cfg.control_planes if not h.gone),
                         etcd_s3=cfg.etcd_backup.enabled and cfg.etcd_backup.s3 is not None),
    )
    k8s_opts = pulumi.ResourceOptions(provider=cp.provider)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr, charts=cfg.chart_source), opts=k8s_opts)
    # Approves the kubelets' serving-certificate requests (serverTLSBootstrap, components/lab/kubeadm.py).
    approver = KubeletServingApprover("kubelet-serving", KubeletServingApproverArgs(hosts=tuple(cfg.hosts)),
                                      opts=pulumi.ResourceOptions(provider=cp.provider, depends_on=[cni]))
    # The cluster's side of every join: one token (through the API), one CA hash, one drain step.
    # Every host joins but the one kubeadm init ran on (recorded): the entry point keeps its own
    # join when it takes over (dropping it would run its delete, `kubeadm reset`, on it).
    if (init_host := cfg.init_host(deployed)) is not None:
        init_host_reset(cp, init_host, key, cfg.bastion, spared(init_host))  # `kubeadm reset` when it leaves
    members = tuple(h for h in cfg.hosts if h is not init_host)
    membership = Membership(
        "membership",
        MembershipArgs(control_plane=cp, members=members,
                       token_id=join_token_id(pulumi.get_project(), pulumi.get_stack()),
                       gone=cfg.gone, kubernetes_minor=cfg.kubernetes_minor, former=former_control_planes(cfg, deployed)),
    )
    joins: list[NodeJoin] = []
    for h in members:
        # Control planes join one after another (etcd: one membership change at a time).
        joined_planes: list[pulumi.Resource] = [j.ready for j in joins if j.host.role is Role.CONTROL_PLANE]
        before = joined_planes[-1:] if h.role is Role.CONTROL_PLANE else []
        joins.append(NodeJoin(
            h.name,
            NodeJoinArgs(
                cluster=cluster,
                host=h,
                control_plane=cp,
                membership=membership,
                private_key=key,
                prepared=cp_files.done.get(h.name, prep[h.name].done),
                network=[cni],
                bastion=cfg.bastion,
                upgrade=upgrade,
                driver=cfg.nvidia_driver if h.is_gpu and cfg.host_installs_driver and h.role is Role.WORKER else None,
                kube_vip=cfg.kube_vip,
                after=before,
            ),
            opts=spared(h),
        ))

    # hosts[].rack, .block and .gpuModel (as the inventory has them): the node labels Kueue's Topology and GPU flavors read; a
    # patch, since kubelet's --node-labels apply only when a node registers (a rack named later
    # would never reach it). Named -rack, as when it carried the rack alone: a new name would replace it.
    joined, written = {j.host.name: j.ready for j in joins}, cfg.inventory.labels_written
    racks = [k8s.core.v1.NodePatch(
        f"{name}-rack", metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=name, labels=labels),
        opts=pulumi.ResourceOptions(provider=cp.provider, depends_on=[joined.get(name, cp.init)]),
    ) for name, labels in written.items()]

    namespace, claim = None, None
    st = cfg.storage
    if cfg.needs_training_namespace:
        namespace = training_namespace(cp.provider, depends_on=[cni], rdma=cfg.network.roce is not None)
    if st.configured:
        assert namespace is not None
        # An existing export (storage.nfs), or one set up on its own host (storage.server, else where
        # the last `up` put it: it never follows the entry point) once that host's package installs
        # are finished (storage.provision).
        export = cfg.export_host(deployed)
        if st.nfs:
            server, share = st.nfs.server, st.nfs.path
        else:
            assert export is not None  # change_problems refused a provisioned export whose host left
            server, share = str(export.address), st.export_path
        storage = NfsSharedStorage(
            "shared-storage",
            NfsSharedStorageArgs(
                namespace=namespace, server=server, share=share, size=st.size, charts=cfg.chart_source,
                provision=NfsServerArgs(connection=cp.connection if export is cp.host else ssh.connection(export, key, cfg.bastion),
                                        clients=tuple(str(h.address) for h in cfg.hosts),
                                        after=prep[export.name].done, backup_dir=nfs_backup_dir(cfg, deployed),
                                        backup_clients=tuple(str(h.address) for h in cfg.control_planes))
                if export is not None else None,
            ),
            opts=pulumi.ResourceOptions(provider=cp.provider, depends_on=[cni]),
        )
        claim = storage.claim

    joins_by_name = {h.name: j for h, j in zip(members, joins, strict=True)}
    etcd_defrags(cfg, cp, joins_by_name, key)
    kubelet_config(cfg, cp, joins_by_name, key, approver, membership)
    control_plane_certificates(cfg, cp, joins_by_name, key)
    operator_driver = cfg.gpu.stack is GpuStack.OPERATOR and not cfg.nvidia_driver.preinstalled
    contract = Cluster(
        provider=cp.provider,
        # node prep installs the driver on the device-plugin path, and nvidiaDriver.preinstalled
        # means the hosts have one; otherwise the GPU Operator's driver container installs it
        driver=DriverSource.OPERATOR if operator_driver else DriverSource.HOST,
        ready=[cni],
        gpu_nodes=tuple(h.name for h in cfg.hosts if h.is_gpu),
        gpu_node_count=cfg.gpu_node_count,
        gpu_nodes_ready=[*(j.ready for j in joins), *racks],
        training_namespace=namespace,
        shared_claim=claim,
        gpu_counts={h.name: h.gpus for h in cfg.hosts if h.is_gpu},
        internal_cidrs=(str(cfg.pod_cidr), str(cfg.service_cidr)),
        etcd_backup_interval_seconds=cfg.etcd_backup.interval_seconds if cfg.etcd_backup.enabled else None,
        etcd_metrics=True,  # kubeadm.ETCD_METRICS_URL
        certificate_expiry_metrics=True,  # components/lab/certificates.py, on every control plane
    )
    return {
        **addons.deploy(cfg, contract, secrets),
        "kubeconfig": cp.kubeconfig,
        "certificates": cp.certificates,
        "apiEndpoint": cfg.api_endpoint,
        "nodes": [h.name for h in cfg.hosts],
        "gpuNodes": {h.name: h.gpus for h in cfg.hosts if h.is_gpu},
        "joinedNodes": pulumi.Output.all(*[j.ready.id for j in joins]).apply(
            lambda _: [h.name for h in members]
        ),
        # What the next `up` compares its config with (deployed_before); known once every node is.
        "deployed": pulumi.Output.all(cp.init.id, *[j.ready.id for j in joins]).apply(
            lambda _: cfg.deployed_record(deployed)
        ),
        # On the first control plane: the etcd snapshot taken before the last kubeadm upgrade apply.
        "etcdSnapshot": cp.etcd_snapshot.apply(lambda path: {"host": first.name, "path": path} if path else None),
        "etcdBackup": etcd_backups(cfg, cp, joins_by_name, key, secrets.etcd_backup, deployed),
    }
