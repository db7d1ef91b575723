"""lab: a kubeadm cluster on the user's own servers over SSH. `LabStack` holds the shared keys
(addons.Addons) and the lab's own: hosts, API endpoint, pod and service ranges, CNI, containerd,
NVIDIA driver, GPU taint, bastion, the NFS-backed shared storage and how upgrades run
(maxUnavailable, allowRebuild).

`DeployedLab` is what the previous `up` deployed (the stack output `deployed`, read back by
stacks/lab.py); `LabStack.change_problems` refuses, before anything is registered, what kubeadm
cannot do in place: a downgrade, a skipped minor, and a change that needs a new cluster unless
allowRebuild says it is meant."""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from components import versions
from config.addons import Addons, Platform
from config.address_plan import (
    Address,
    Range,
    ipv4_address,
    overlap_problems,
    pod_range_problems,
    service_range_problems,
)
from config.charts_dir import PinnedChart, PinnedDownload
from config.control_planes import (
    KubeVip,
    count_problems,
    endpoint_address,
    endpoint_host_problems,
    members_of,
    vip_address_plan,
    vip_problems,
)
from config.errors import Problems
from config.etcd_backup import EtcdBackupConfig, etcd_backup_problems
from config.etcd_backup_s3 import s3_secret_problems
from config.fields import (
    APT_VERSION,
    empty_to_none,
    host_dir_problem,
    volatile_dir_problem,
)
from config.gpu import GpuStack
from config.gpu_inventory import fit_problems
from config.hardening import Hardening
from config.inert_keys import inert_lab_problems
from config.inventory import Inventory
from config.inventory_build import lab_inventory
from config.lab_hosts import Host, Role, gone_problems, host_list_problems
from config.lab_parts import _DEV_STORAGE_KEYS, LabStorage, NvidiaDriver
from config.lab_parts import NFS_EXPORT_DESCRIPTION as NFS_EXPORT_DESCRIPTION  # re-exported
from config.lab_parts import Bastion as Bastion  # re-exported: components import the lab model from here
from config.lab_parts import NfsExport as NfsExport
from config.network_policy_enforcement import Cni as Cni  # re-exported
from config.network_policy_enforcement import lab_unenforced_warning
from config.nfs_export_host import export_host, export_host_problems, recorded_export_host, server_problems
from config.roce_interface import lab_roce_interface_problems, unknown_interface_warning


class LabStack(Addons):
    """The lab stack: the shared keys and the lab's own."""

    platform: Literal[Platform.LAB] = Field(
        default=Platform.LAB, description=Addons.model_fields["platform"].description
    )
    hosts: tuple[Host, ...] = Field(default=(), description="The servers of the cluster, one entry each.")
    control_plane_endpoint: str | None = Field(
        default=None,
        description="Stable host:port of the API server: your own load balancer (with more than one control plane, "
                    "this or kubeVip; unset: kubeVip's address, else the first control plane:6443).",
    )
    kube_vip: KubeVip | None = Field(
        default=None, description="A virtual IP for the API server that kube-vip serves on the control planes (ARP); "
                                  "with more than one control plane, this or controlPlaneEndpoint.")
    pod_cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.244.0.0/16"),
        description="Pod network (/8 to /24, a /24 per host); must not contain a host, the API endpoint or the NFS "
                    "server, nor overlap serviceCidr or network.roce.range.",
    )
    service_cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.96.0.0/12"),
        description="Service network, /12 to /28 (lab: kubeadm sets it up; dev: the existing cluster's, minikube's "
                    "default); no other range may overlap it.",
    )
    cni: Cni = Field(default=Cni.CALICO, description="Pod network plugin: calico (enforces NetworkPolicies) or flannel (does not).")
    containerd_version: str = Field(
        default=versions.CONTAINERD_DEFAULT,
        description="containerd.io package version from Docker's apt repository, 1.6.x or 1.7.x (2.x is not supported yet).",
    )
    nvidia_driver: NvidiaDriver = Field(
        default_factory=NvidiaDriver, description="The NVIDIA driver of the GPU hosts."
    )
    gpu_taint: bool = Field(
        default=True,
        description="Taint GPU workers nvidia.com/gpu=present:NoSchedule so that only GPU workloads land there (as GKE does).",
    )
    bastion: Bastion | None = Field(default=None, description="An SSH jump host in front of the servers (optional).")
    storage: LabStorage = Field(
        default_factory=LabStorage,
        description="The shared ReadWriteMany volume of training pods (cache, data, checkpoints); gke: gke.filestore.",
    )
    max_unavailable: int = Field(
        default=1, ge=1, le=1000,
        description="Upgrades drain at most this many nodes at once (control planes one at a time).",
    )
    hardening: Hardening = Field(default_factory=Hardening, description=Hardening.__doc__)
    allow_rebuild: bool = Field(
        default=False,
        description="Allow a change that needs a new cluster (podCidr, serviceCidr, controlPlaneEndpoint, the "
                    "first control plane): kubeadm reset everywhere and a fresh init; workloads and etcd are lost.",
    )

    etcd_backup: EtcdBackupConfig = Field(default_factory=EtcdBackupConfig, description=EtcdBackupConfig.__doc__ or "")

    FOREIGN_HINTS: ClassVar[dict[str, str]] = {
        "gpuNodes": "lab GPU nodes come from hosts[].gpus",
        "kubeContext": "lab reads the admin kubeconfig from its control plane",
        "kubeconfig": "lab reads the admin kubeconfig from its control plane",
        "gke": "lab builds a kubeadm cluster on hosts",
    }

    _optional = field_validator("control_plane_endpoint", "bastion", "kube_vip", mode="before")(
        classmethod(lambda cls, v: empty_to_none(v))
    )

    @field_validator("storage", mode="before")
    @classmethod
    def _no_dev_storage(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        if any(v.get(key) not in (None, "", False) for key in _DEV_STORAGE_KEYS):
            raise ValueError("hostPath and useDefaultClass are dev keys; lab uses storage.nfs or storage.provision")
        return {key: value for key, value in v.items() if key not in _DEV_STORAGE_KEYS}

    @field_validator("containerd_version")
    @classmethod
    def _containerd(cls, v: str) -> str:
        if not APT_VERSION.fullmatch(v):
            raise ValueError("must be a Debian package version such as '1.7.27-1'")
        # The lab's containerd config edit (sandbox_image, SystemdCgroup) follows the 1.x layout;
        # containerd 2.x moved those keys.
        if not re.fullmatch(r"1\.[67]\..+", v):
            raise ValueError(f"{v}: only containerd 1.6.x and 1.7.x are supported; 2.x is not supported yet")
        return v

    def unenforced_warning(self) -> str:
        return lab_unenforced_warning(self.cni)

    @functools.cached_property
    def inventory(self) -> Inventory:
        return lab_inventory(self.hosts, self.gpu)

    @property
    def gpu_node_count(self) -> int:
        """Hosts with gpus > 0."""
        return sum(1 for h in self.hosts if h.is_gpu)

    @property
    def host_installs_driver(self) -> bool:
        """Whether node prep installs the NVIDIA driver and toolkit on GPU hosts."""
        return self.gpu.stack is GpuStack.DEVICE_PLUGIN and not self.nvidia_driver.preinstalled

    @property
    def control_planes(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role is Role.CONTROL_PLANE)

    @property
    def workers(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role is Role.WORKER)

    @property
    def api_endpoint(self) -> str:
        """host:port every node and the admin kubeconfig use to reach the API server."""
        if self.control_plane_endpoint:
            return self.control_plane_endpoint
        if self.kube_vip is not None:
            return self.kube_vip.endpoint
        return f"{self.control_planes[0].address}:6443"

    @property
    def entry_point(self) -> Host:
        """The control plane this program reaches the cluster through (SSH: the kubeconfig, the
        membership steps, the NFS export): the first in config order that is not gone. No host is
        special otherwise (issue 34): when it leaves, the next one takes over in the same `up`."""
        return next(h for h in self.control_planes if not h.gone)

    def init_identity(self, deployed: DeployedLab | None) -> tuple[str, str]:
        """(name, address) of the host `kubeadm init` ran on, as the init step's triggers hold it:
        what the last `up` recorded (even once that host left), or this config's entry point for a
        new cluster (nothing recorded, or a change that rebuilds it)."""
        entry = self.entry_point
        if deployed is None or self._rebuild_problems(deployed):
            return entry.name, str(entry.address)
        name, _, address = deployed.control_plane.partition(" ")
        return name, address

    def export_host(self, deployed: DeployedLab | None) -> Host | None:
        """The host of the provisioned NFS export (None: storage.provision off, or its recorded host
        left with no storage.server, which change_problems refuses): config/nfs_export_host.py."""
        if not self.storage.provision:
            return None
        return export_host(self.hosts, self.storage.server, _recorded_export(deployed), self.entry_point)

    def init_host(self, deployed: DeployedLab | None) -> Host | None:
        """The host `kubeadm init` ran on, as this config lists it, or None: it must have the
        recorded name and address and have been a control plane when the last `up` ended. A host
        of that name at another address, or one that left and comes back, is a new machine (or a
        reset one): it joins like any other (stacks/lab.py)."""
        name, address = self.init_identity(deployed)
        if deployed is not None and not self._rebuild_problems(deployed):
            if f"{name} {address}" not in deployed.planes():
                return None
        return next((h for h in self.control_planes if (h.name, str(h.address)) == (name, address)), None)

    def deployed_record(self, deployed: DeployedLab | None = None) -> dict[str, str]:
        """What this config deploys that a later `up` cannot change in place: exported as the stack
        output `deployed` (stacks/lab.py) and compared with the next config by change_problems.
        `deployed`: what the last `up` recorded, whose init host this one carries on."""
        return DeployedLab(
            kubernetes_version=self.kubernetes_version,
            pod_cidr=self.pod_cidr,
            service_cidr=self.service_cidr,
            control_plane_endpoint=self.api_endpoint,
            control_plane=" ".join(self.init_identity(deployed)),
            control_planes=", ".join(f"{h.name} {h.address}" for h in self.control_planes),
            nfs_server=f"{export.name} {export.address}" if (export := self.export_host(deployed)) else "",
        ).as_output()

    def change_problems(self, deployed: DeployedLab | None) -> Problems:
        """This config against what the previous `up` deployed (None: nothing yet, or deployed by a
        version of this program that did not record it). kubeadm upgrades one minor at a time and
        never down; CIDRs and the endpoint are fixed at `kubeadm init`, and so is the cluster
        itself: at least one deployed control plane must stay (any one, the first included)."""
        if deployed is None:
            return []
        problems: Problems = []
        old, new = _version(deployed.kubernetes_version), _version(self.kubernetes_version)
        if new < old:
            problems.append(("kubernetesVersion",
                             f"{self.kubernetes_version} is older than the deployed {deployed.kubernetes_version}: "
                             f"kubeadm cannot downgrade a cluster; set {deployed.kubernetes_version} or newer"))
        elif new[0] != old[0] or new[1] > old[1] + 1:
            step = f"{old[0]}.{old[1] + 1}"
            problems.append(("kubernetesVersion",
                             f"{deployed.kubernetes_version} -> {self.kubernetes_version} skips minor {step}: "
                             f"kubeadm upgrades one minor at a time; deploy {step}.x first, then {self.kubernetes_version}"))
        if self.storage.provision:  # a rebuild keeps the export's data: refused the same
            problems += export_host_problems(self.hosts, self.storage.server, _recorded_export(deployed),
                                             self.storage.export_path)
        # etcd membership: etcd itself refuses a removal that cannot commit (config/control_planes.py).
        if self.allow_rebuild:
            return problems
        rebuild = self._rebuild_problems(deployed)
        return problems + (rebuild or self._entry_point_problems(deployed))

    def _entry_point_problems(self, deployed: DeployedLab) -> Problems:
        """The entry point's steps (the init step's upgrade script, the kubeconfig read) run before
        any join: on a host that was not a control plane of the cluster they find no admin.conf."""
        first = self.entry_point
        deployed_planes = deployed.planes()
        if f"{first.name} {first.address}" in deployed_planes:
            return []
        return [(f"hosts[{self.hosts.index(first)}]",
                 f"{first.name} {first.address} would be the first control plane (the entry point the cluster's "
                 f"steps run on) but is not one of the deployed control planes ({', '.join(deployed_planes)}): "
                 "list a deployed control plane first for this `up`; the new host joins, and may move first in a "
                 "later one")]

    def _rebuild_problems(self, deployed: DeployedLab) -> Problems:
        """The changes that need a new cluster: podCidr, serviceCidr, the endpoint, or no deployed
        control plane staying (the cluster lives in their etcd; one staying keeps it, whichever)."""
        rebuild = ("needs a new cluster (kubeadm reset on every host and a fresh kubeadm init: every workload and "
                   "all of etcd are lost); to rebuild on purpose set gpu-cluster:allowRebuild: true (docs/operations/rebuilding.md)")
        fixed: Problems = []
        for key, was, now in (
            ("podCidr", deployed.pod_cidr, self.pod_cidr),
            ("serviceCidr", deployed.service_cidr, self.service_cidr),
            ("kubeVip" if self.kube_vip else "controlPlaneEndpoint", deployed.control_plane_endpoint, self.api_endpoint),
        ):
            if was != now:
                fixed.append((key, f"{was} -> {now} {rebuild}"))
        first = self.entry_point
        staying = {f"{h.name} {h.address}" for h in self.control_planes if not h.gone}
        deployed_planes = deployed.planes()
        if not staying & set(deployed_planes):
            i = self.hosts.index(first)
            name_was = deployed.control_plane.split(" ")[0]
            key = f"hosts[{i}].name" if name_was != first.name else f"hosts[{i}].address"
            fixed.append((key, f"the first control plane (where kubeadm init ran) was {deployed.control_plane}, "
                               f"now {first.name} {first.address}, and no deployed control plane ({', '.join(deployed_planes)}) "
                               f"stays: {rebuild}"))
        return fixed

    def pinned_downloads(self) -> tuple[PinnedDownload, ...]:
        """The shared add-ons' charts and manifests, the CNI's (calico: the operator and its CRDs) and, with shared
        storage, the NFS CSI driver's (stacks/lab.py)."""
        v = versions
        cni = ((PinnedChart(v.CALICO_CRDS_CHART, v.CALICO_CRDS_CHART_VERSION, v.CALICO_CRDS_CHART_REPO),
                PinnedChart(v.CALICO_CHART, v.CALICO_CHART_VERSION, v.CALICO_CHART_REPO))
               if self.cni is Cni.CALICO else (PinnedChart(v.FLANNEL_CHART, v.FLANNEL_CHART_VERSION, v.FLANNEL_CHART_REPO),))
        nfs = ((PinnedChart(v.CSI_DRIVER_NFS_CHART, v.CSI_DRIVER_NFS_CHART_VERSION, v.CSI_DRIVER_NFS_CHART_REPO),)
               if self.storage.configured else ())
        return cni + super().pinned_downloads() + nfs

    def _capacity_problems(self) -> Problems:
        t = self.training
        return fit_problems([h.gpus for h in self.hosts], t.nodes, t.gpus_per_node, "host", "hosts[].gpus")

    def _platform_problems(self, secrets: frozenset[str]) -> Problems:
        problems = self._storage_problems()
        if not self.hosts:
            problems.append(("hosts", "lab needs at least one host with role control-plane"))
            return problems
        if not self.control_planes:
            problems.append(("hosts", "no host has role control-plane; one is needed, or 3 or 5 with kubeVip or controlPlaneEndpoint"))
        problems += count_problems(self.control_planes, self.kube_vip, self.control_plane_endpoint)
        problems += vip_problems(self.kube_vip, self.hosts, self.storage.nfs.server if self.storage.nfs else None)
        endpoint_problem, _ = endpoint_address(self.control_plane_endpoint)
        if endpoint_problem:
            problems.append(("controlPlaneEndpoint", endpoint_problem))
        problems += endpoint_host_problems(self.control_plane_endpoint, self.hosts)
        if "sshPrivateKey" not in secrets:
            problems.append(
                (
                    "sshPrivateKey",
                    "lab needs the SSH private key as a secret: "
                    "`pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519`",
                )
            )
        problems += self._host_problems()
        problems += self._address_problems()
        problems += service_range_problems("serviceCidr", self.service_cidr)
        problems += pod_range_problems("podCidr", self.pod_cidr, len(self.hosts))
        if self.network.rdma and self.network.roce is None:
            problems.append(("network.roce", "network.rdma on lab moves each GPU node's RoCE NIC into its training pod: "
                                             "set network.roce {interface, pciAddress, hca, driver, range} (docs/rdma.md)"))
        problems += lab_roce_interface_problems(self.network.roce, self.kube_vip, self.control_planes)
        problems += inert_lab_problems(self, self.hosts, self.nvidia_driver, self.storage)
        problems += etcd_backup_problems(self.etcd_backup, self.storage.export_path if self.storage.provision else None)
        problems += s3_secret_problems(self.etcd_backup.s3, self.etcd_backup.enabled, secrets)
        return problems

    def roce_interface_warning(self) -> str | None:
        """hosts[] do not name their interfaces: the plan cannot tell (config/roce_interface.py)."""
        roce = self.network.roce
        if roce is None or lab_roce_interface_problems(roce, self.kube_vip, self.control_planes):
            return None
        return unknown_interface_warning(roce, "hosts[] do not name their interfaces",
                                         f"`ip -br -4 addr show {roce.interface}` on each GPU host must show none of "
                                         "hosts[].address")

    def _address_problems(self) -> Problems:
        """The service, pod and RoCE ranges against each other and every host, the API endpoint and the
        NFS server (config/address_plan.py)."""
        ranges = [Range("serviceCidr", self.service_cidr), Range("podCidr", self.pod_cidr)]
        if self.network.roce is not None:
            ranges.append(Range("network.roce.range", self.network.roce.range,
                                why="the pods' RDMA network must not take the hosts' addresses"))
        addresses = [Address(f"hosts[{i}].address", h.address) for i, h in enumerate(self.hosts)]
        endpoint_ip = endpoint_address(self.control_plane_endpoint)[1]
        addresses += [Address("controlPlaneEndpoint", endpoint_ip)] if endpoint_ip else []
        addresses += ipv4_address("storage.nfs.server", self.storage.nfs.server if self.storage.nfs else None)
        vip_ranges, vip_addresses = vip_address_plan(self.kube_vip)
        return overlap_problems(ranges + vip_ranges, addresses + vip_addresses)

    def _storage_problems(self) -> Problems:
        st = self.storage
        problems: Problems = []
        if problem := volatile_dir_problem(st.export_path):  # the shared data would vanish with it
            problems.append(("storage.exportPath", f"{problem}; export a directory on disk, e.g. /srv/gpu-cluster/shared"))
        elif problem := host_dir_problem(st.export_path):
            problems.append(("storage.exportPath", problem))
        if st.nfs and st.provision:
            problems.append(("storage.provision", "choose one: an existing export (storage.nfs) or provision: true"))
        problems += server_problems(self.hosts, st.server, st.provision)
        if self.runs_jobs and not st.configured:
            problems.append(("storage", "training needs shared storage: set storage.nfs {server, path} or storage.provision: true"))
        return problems

    def _host_problems(self) -> Problems:
        return host_list_problems(self.hosts) + gone_problems(self.hosts)

    @property
    def gone(self) -> tuple[Host, ...]:
        """hosts[].gone: dead hosts the next `up` removes from etcd and the API (components/lab/gone_hosts.py)."""
        return tuple(h for h in self.hosts if h.gone)


# The engine's builtin function behind StackReference (pulumi/pulumi pkg/resource/deploy/builtins.go,
# builtinProvider.Invoke: readStackOutputs -> readStackReference -> the backend's GetStackOutputs):
# stacks/lab.py reads its own last `deployed` with it; render's mocks answer it for --against.
READ_STACK_OUTPUTS = "pulumi:pulumi:readStackOutputs"


class DeployedLab(BaseModel):
    """The stack output `deployed` of a successful lab `up` (LabStack.deployed_record), as the next
    `up` reads it back. Keys it does not know are ignored: a later version may record more."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    kubernetes_version: str
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    control_plane_endpoint: str
    control_plane: str  # "name address" of the host kubeadm init ran on
    control_planes: str = ""  # "name address, ..." of every control plane ("": recorded by an older version)
    # "name address" of the provisioned NFS export's host ("": none; None: recorded by an older version)
    nfs_server: str | None = None

    def as_output(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump(by_alias=True, exclude_none=True).items()}

    def planes(self) -> list[str]:
        """"name address" of every deployed control plane; an older record lists none, and then
        only the host kubeadm init ran on is known."""
        return members_of(self.control_planes) or [self.control_plane]


def _recorded_export(deployed: DeployedLab | None) -> str | None:
    """The deployed export's host name (None: nothing deployed, or no provisioned export then)."""
    return None if deployed is None else recorded_export_host(deployed.nfs_server, deployed.planes())


def _version(v: str) -> tuple[int, int, int]:
    """'1.34.2' or 'v1.34.2' -> (1, 34, 2); both sides of the comparison come from validated config."""
    major, minor, patch = v.lstrip("v").split(".")
    return int(major), int(minor), int(patch)
