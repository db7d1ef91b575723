"""NodePrep: everything a lab host needs before it can join (or start) a cluster.

Steps (each a remote.Command with create and delete, scripts in `scripts.py`), ONE chain per host:
  kernel -> [GPU: nvidia-driver -> driver-ready] -> [nvidia-toolkit] -> containerd -> kube-packages
  -> [GPU with network.roce: rdma -> rdma-ready]
Every step that installs packages runs after the previous one, so no two steps on a host contend
for the apt/dpkg lock and the driver step's reboot never interrupts another step's dpkg run
(the scripts also wait up to 5 minutes for a lock someone else, e.g. unattended-upgrades, holds).
Hosts are independent of each other: nothing links one host's steps to another's, so all hosts
are prepared in parallel.

Every step's triggers are the host's identity (name, address) and it is replaced
delete-before-replace: a host that changes address is cleaned up before it is prepared again,
never after. Any other change (a new kubernetesVersion or driver branch) is an update, which runs
the step's `update` command where it has one (what each does: upgrade.py): kube-packages stages
kubeadm of the new version; the driver step of a control plane drains it, switches the branch and
reboots (driver-ready waits and uncordons), that of a worker leaves it to the worker's own drained
upgrade (NodeJoin's join step). Steps without one (kernel, toolkit, containerd) run their create again. Renaming a host is a remove plus an add, in two `pulumi up` runs (docs/operations/nodes.md): within one run Pulumi would create the new name's steps before deleting the old name's, and
those deletes would purge from the live host what the new steps had just installed.

RDMA (network.rdma with network.roce, GPU hosts only; seed 002): `rdma` checks the NIC against the
config (interface -> PCI address -> driver -> RDMA device with a port) and that the host-device CNI
plugin is there (from kubernetes-cni, which kubelet depends on), pins the RDMA userspace
(versions.ROCE_HOST_PACKAGES), writes `options ib_core netns_mode=0` and puts the RDMA subsystem
in exclusive network-namespace mode, which the rdma CNI needs to move a device into a pod: at once
if the kernel allows (it refuses while other network namespaces exist), else by a reboot as the
driver step's; `rdma-ready` dials through it and checks the mode and the NIC again. A host that
has already joined is not rebooted: the step fails and says how to reboot it drained. Its delete
removes the option and returns to shared mode now, or at the next boot when the kernel refuses
(it does not reboot). A change of network.roce or of the pinned versions is an update; neither
step has an `update` command, so each whose script changed runs its create again: the NIC checked
with the new values, the packages moved to the new pins; removing network.roce (or network.rdma)
deletes both steps. While a training pod holds the NIC (host-device and the
rdma CNI move the netdev and the RDMA device out of the host's namespace) the check cannot see it
and fails, saying to drain the node first.

Does not manage: the OS itself, apt mirrors, firewalls, or removing the NVIDIA driver on destroy
(the hold is released; the driver stays, see scripts.nvidia_driver_delete).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components import versions
from components.lab import scripts, ssh
from components.lab.upgrade import UpgradePolicy
from config.lab import Bastion, Host, NvidiaDriver, Role


@dataclass(frozen=True)
class RoceHost:
    """The RoCE NIC of every GPU host (network.roce): what node prep checks and prepares."""

    interface: str  # host netdev, e.g. ens192
    pci_address: str  # sysfs form, 0000:3b:00.0
    hca: str  # its RDMA device, e.g. irdma0
    driver: str  # the netdev's kernel driver, e.g. ice


@dataclass(frozen=True)
class HostSoftware:
    """What NodePrep installs on every host (stacks/lab.py fills it from the lab config)."""

    kubernetes_version: str  # "1.34.2": kubeadm, kubelet and kubectl, held
    containerd_version: str
    nvidia_driver: NvidiaDriver
    # GPU hosts: install the driver (device-plugin path, not preinstalled); otherwise a
    # preinstalled driver is only checked, and with the GPU Operator left to the operator.
    install_driver: bool
    # GPU hosts: the NVIDIA container toolkit as containerd's default runtime (device-plugin path;
    # with the GPU Operator its toolkit container adds the runtime).
    host_toolkit: bool
    # GPU hosts with network.rdma: the RoCE NIC moved into training pods (None: no RDMA steps).
    roce: RoceHost | None = None
    # Refuse an apt repository key whose fingerprint is not the pinned one (hardening.verifyAptKeys).
    verify_apt_keys: bool = True

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])


@dataclass(frozen=True)
class NodePrepArgs:
    host: Host
    software: HostSoftware
    private_key: pulumi.Output[str]
    bastion: Bastion | None = None
    upgrade: UpgradePolicy = UpgradePolicy()


class NodePrep(pulumi.ComponentResource):
    """Kernel settings, container runtime, NVIDIA driver and toolkit, pinned kube packages."""

    done: list[pulumi.Resource]

    def __init__(self, name: str, args: NodePrepArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:NodePrep", name, None, opts)
        host, sw = args.host, args.software
        conn = ssh.connection(host, args.private_key, args.bastion)
        # A host that changes address is a new host: replace (delete on the old, then create on the new).
        triggers = [host.name, str(host.address)]

        def step(
            step_name: str,
            create: str,
            delete: str | None,
            after: list[pulumi.Resource],
            connection: remote.ConnectionArgs = conn,
            update: str | None = None,
        ) -> remote.Command:
            return remote.Command(
                f"{name}-{step_name}",
                connection=connection,
                create=scripts.as_root(create),
                update=scripts.as_root(update) if update else None,
                delete=scripts.as_root(delete) if delete else None,
                triggers=triggers,
                # Undo on the old host first: create-then-delete would purge what the new
                # create just installed when both run on the same machine.
                opts=pulumi.ResourceOptions(parent=self, depends_on=after, delete_before_replace=True),
            )

        # One chain: each step waits for the one before it (see the module docstring).
        last = step("kernel", scripts.kernel_prep(), scripts.kernel_prep_delete(), [])
        # With gpu.stack operator the GPU Operator installs driver and toolkit in containers;
        # the host keeps runc as containerd's default and the toolkit container adds nvidia.
        host_toolkit = host.is_gpu and sw.host_toolkit
        check_driver = host.is_gpu and (sw.install_driver or sw.nvidia_driver.preinstalled)
        drv = sw.nvidia_driver
        # A control plane has the admin kubeconfig and drains itself for a new driver; a worker
        # drains itself later, in its join step's update, with the node upgrader's token.
        self_drains = host.role is Role.CONTROL_PLANE and sw.install_driver
        if check_driver:
            if sw.install_driver:
                last = step(
                    "nvidia-driver",
                    scripts.nvidia_driver(drv.branch, drv.version),
                    scripts.nvidia_driver_delete(drv.branch),
                    [last],
                    update=(
                        scripts.nvidia_driver_self_upgrade(host.name, drv.branch, drv.version, args.upgrade.slot_tries)
                        if self_drains
                        else scripts.nvidia_driver_deferred(host.name, drv.branch, drv.version)
                    ),
                )
            # A check with nothing to undo, hence no delete. It keeps dialing while the host
            # reboots after a driver install.
            last = step(
                "driver-ready",
                scripts.driver_ready(host.gpus),
                None,
                [last],
                connection=ssh.connection(host, args.private_key, args.bastion, survive_reboot=True),
                update=scripts.driver_ready_uncordon(host.name, host.gpus, drv.branch, drv.version)
                if self_drains
                else None,
            )
        if host_toolkit:
            last = step(
                "nvidia-toolkit",
                scripts.nvidia_toolkit(versions.NVIDIA_CONTAINER_TOOLKIT, sw.verify_apt_keys),
                scripts.nvidia_toolkit_delete(),
                [last],
            )
        last = step(
            "containerd",
            scripts.containerd(
                sw.containerd_version,
                versions.PAUSE_IMAGE[sw.kubernetes_minor],
                nvidia_default=host_toolkit,
                verify_keys=sw.verify_apt_keys,
            ),
            scripts.containerd_delete(),
            [last],
        )
        last = step(
            "kube-packages",
            scripts.kube_packages(
                sw.kubernetes_version, sw.kubernetes_minor, versions.KUBE_PACKAGE_REVISION, sw.verify_apt_keys
            ),
            scripts.kube_packages_delete(),
            [last],
            update=scripts.kube_packages_stage(
                sw.kubernetes_version, sw.kubernetes_minor, versions.KUBE_PACKAGE_REVISION, sw.verify_apt_keys
            ),
        )
        if host.is_gpu and sw.roce is not None:
            nic = (host.name, sw.roce.interface, sw.roce.pci_address, sw.roce.hca, sw.roce.driver)
            last = step(
                "rdma",
                scripts.roce_host(*nic, versions.ROCE_HOST_PACKAGES),
                scripts.roce_host_delete(versions.ROCE_HOST_PACKAGES),
                [last],
            )
            # A check with nothing to undo; it keeps dialing while the host reboots into exclusive mode.
            last = step(
                "rdma-ready",
                scripts.roce_ready(*nic),
                None,
                [last],
                connection=ssh.connection(host, args.private_key, args.bastion, survive_reboot=True),
            )
        # The end of the chain: everything on this host is prepared once it is done.
        self.done = [last]
        self.register_outputs({"host": host.name, "gpu": host.is_gpu})
