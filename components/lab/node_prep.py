"""NodePrep: everything a lab host needs before it can join (or start) a cluster.

Steps (each a remote.Command with create and delete, scripts in `scripts.py`):
  kernel -> kube-packages
  kernel -> [GPU: driver -> driver-ready -> toolkit] -> containerd
Every host gets its own NodePrep and nothing links one host's steps to another's, so all hosts
are prepared in parallel.

Does not manage: the OS itself, apt mirrors, firewalls, or removing the NVIDIA driver on destroy
(the hold is released; the driver stays, see scripts.nvidia_driver_delete).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components import versions
from components.config import GpuStack, Host, StackConfig
from components.lab import scripts, ssh


@dataclass(frozen=True)
class NodePrepArgs:
    host: Host
    cluster: StackConfig
    private_key: pulumi.Output[str]


class NodePrep(pulumi.ComponentResource):
    """Kernel settings, container runtime, NVIDIA driver and toolkit, pinned kube packages."""

    done: list[pulumi.Resource]

    def __init__(self, name: str, args: NodePrepArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:NodePrep", name, None, opts)
        host, cfg = args.host, args.cluster
        conn = ssh.connection(host, args.private_key, cfg.bastion)
        # A host that changes identity is a new host: replace (delete on the old, create on the new).
        triggers = [host.name, str(host.address)]

        def step(
            step_name: str,
            create: str,
            delete: str | None,
            after: list[pulumi.Resource],
            connection: remote.ConnectionArgs = conn,
        ) -> remote.Command:
            return remote.Command(
                f"{name}-{step_name}",
                connection=connection,
                create=scripts.as_root(create),
                delete=scripts.as_root(delete) if delete else None,
                triggers=triggers,
                opts=pulumi.ResourceOptions(parent=self, depends_on=after),
            )

        kernel = step("kernel", scripts.kernel_prep(), scripts.kernel_prep_delete(), [])
        kube = step(
            "kube-packages",
            scripts.kube_packages(
                cfg.kubernetes_version, cfg.kubernetes_minor, versions.KUBE_PACKAGE_REVISION
            ),
            scripts.kube_packages_delete(),
            [kernel],
        )
        runtime_after: list[pulumi.Resource] = [kernel]
        # With gpu.stack operator the GPU Operator installs driver and toolkit in containers;
        # the host keeps runc as containerd's default and the toolkit container adds nvidia.
        host_toolkit = host.is_gpu and cfg.gpu.stack is GpuStack.DEVICE_PLUGIN
        check_driver = host.is_gpu and (cfg.host_installs_driver or cfg.nvidia_driver.preinstalled)
        if check_driver:
            driver_done: list[pulumi.Resource] = [kernel]
            if cfg.host_installs_driver:
                driver = step(
                    "nvidia-driver",
                    scripts.nvidia_driver(cfg.nvidia_driver.branch, cfg.nvidia_driver.version),
                    scripts.nvidia_driver_delete(cfg.nvidia_driver.branch),
                    [kernel],
                )
                driver_done = [driver]
            # A check with nothing to undo, hence no delete. It keeps dialing while the host
            # reboots after a driver install.
            ready = step(
                "driver-ready",
                scripts.driver_ready(host.gpus),
                None,
                driver_done,
                connection=ssh.connection(host, args.private_key, cfg.bastion, survive_reboot=True),
            )
            runtime_after = [ready]
        if host_toolkit:
            toolkit = step(
                "nvidia-toolkit",
                scripts.nvidia_toolkit(versions.NVIDIA_CONTAINER_TOOLKIT),
                scripts.nvidia_toolkit_delete(),
                runtime_after,
            )
            runtime_after = [toolkit]
        containerd = step(
            "containerd",
            scripts.containerd(
                cfg.containerd_version,
                versions.PAUSE_IMAGE[cfg.kubernetes_minor],
                nvidia_default=host_toolkit,
            ),
            scripts.containerd_delete(),
            runtime_after,
        )
        self.done = [containerd, kube]
        self.register_outputs({"host": host.name, "gpu": host.is_gpu})
