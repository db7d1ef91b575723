"""dev: an existing cluster (minikube --gpus all, kind, ...). `DevStack` holds the shared keys
(addons.Addons) and dev's own: the kubeconfig context, the GPU nodes to label (and, where declared,
their GPU counts: gpuNodeGpus), the cluster's service and node ranges, and the shared storage (a
node directory, a claim on the cluster's default StorageClass, or an existing NFS export).

The service and node ranges are the existing cluster's, not this program's: they default to
minikube's (docker driver) and are declared so that the ranges this program hands out
(network.roce.range) and the addresses it points at (storage.nfs.server) are checked against them
(config/address_plan.py)."""

from __future__ import annotations

import functools
import ipaddress
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from config.addons import Addons, Platform, Storage
from config.address_plan import Range, ipv4_address, overlap_problems, service_range_problems
from config.errors import Problems
from config.fields import check_abs_path, check_display_name, check_dns_subdomain, empty_to_none, host_dir_problem
from config.gpu_inventory import MAX_GPUS_PER_NODE, fit_problems
from config.inert_keys import inert_dev_problems
from config.inventory import Inventory
from config.inventory_build import dev_inventory
from config.lab import LabStack
from config.lab_parts import NFS_EXPORT_DESCRIPTION, NfsExport
from config.network_policy_enforcement import DEV_CNI_DESCRIPTION, DevCni, dev_unenforced_warning
from config.roce_interface import dev_roce_interface_problems, unknown_interface_warning

# minikube's defaults: its service range (pkg/minikube/constants/constants.go, DefaultServiceCIDR
# "10.96.0.0/12", which kubeadm's own default matches) and the docker network of its first cluster
# (pkg/drivers/kic/oci/network_create.go, defaultFirstSubnetAddr "192.168.49.0" with mask 24; the
# host is its gateway, 192.168.49.1, and the nodes take .2 onwards).
MINIKUBE_SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/12")
MINIKUBE_NODE_CIDR = ipaddress.IPv4Network("192.168.49.0/24")

# lab's own storage keys (the program's NFS server): refused in a dev stack unless left at their defaults.
_LAB_STORAGE_DEFAULTS: dict[str, Any] = {"provision": False, "exportPath": "/srv/gpu-cluster/shared"}


class DevStorage(Storage):
    """dev: a node directory (single-node clusters), a claim on the cluster's default class, or an
    existing NFS export as a static PersistentVolume (seed 003: the host's nfs-kernel-server)."""

    host_path: str | None = Field(default=None, description="A node directory as the shared volume (single-node clusters: training.nodes must be 1).")
    use_default_class: bool = Field(default=False, description="A ReadWriteMany claim on the cluster's default StorageClass.")
    nfs: NfsExport | None = Field(
        default=None, description=NFS_EXPORT_DESCRIPTION + " It becomes a static ReadWriteMany PersistentVolume."
    )

    _optional = field_validator("host_path", "nfs", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    # Syntax here; which directories are refused (host_dir_problem) is a stack check, so that a
    # refused directory is reported together with the other storage problems.
    _abs = field_validator("host_path")(classmethod(lambda cls, v: v if v is None else check_abs_path(v)))

    @property
    def configured(self) -> bool:
        return bool(self.host_path or self.use_default_class or self.nfs)


class DevStack(Addons):
    """The dev stack: the shared keys and dev's own."""

    platform: Literal[Platform.DEV] = Field(
        default=Platform.DEV, description=Addons.model_fields["platform"].description
    )
    kube_context: str | None = Field(
        default=None,
        description="Context of the local kubeconfig to use when no gpu-cluster:kubeconfig secret is set (refused "
                    "beside it).",
    )
    # Node names become object names and (in the offline renderer) file names: no '/' or '..'.
    gpu_nodes: tuple[Annotated[str, AfterValidator(check_dns_subdomain)], ...] = Field(
        default=(), description="Names of existing nodes with GPUs; they get the nvidia.com/gpu.present=true label."
    )
    gpu_node_gpus: dict[str, int] = Field(
        default_factory=dict,
        description="GPUs on each gpuNodes node, {name: count} (1-16; a node left out has an unknown count). With every "
                    "count known, training.nodes x gpusPerNode must fit them; two nodes of equal count get the NCCL "
                    "pair check.",
    )
    service_cidr: ipaddress.IPv4Network = Field(
        default=MINIKUBE_SERVICE_CIDR, description=LabStack.model_fields["service_cidr"].description
    )
    node_cidr: ipaddress.IPv4Network = Field(
        default=MINIKUBE_NODE_CIDR,
        description="The network the cluster's nodes are on (minikube's docker driver: 192.168.49.0/24); "
                    "network.roce.range must not overlap it.",
    )
    storage: DevStorage = Field(
        default_factory=DevStorage, description=LabStack.model_fields["storage"].description
    )
    cluster_cni: DevCni = Field(default=DevCni.MINIKUBE_DEFAULT, description=DEV_CNI_DESCRIPTION)

    FOREIGN_HINTS: ClassVar[dict[str, str]] = {
        "hosts": "dev uses an existing cluster; its GPU nodes are listed in gpuNodes",
        "sshPrivateKey": "dev reaches its cluster through kubeContext or the kubeconfig secret",
        "gke": "dev uses an existing cluster",
        "cni": "dev installs no CNI: clusterCni says which one the existing cluster runs",
    }

    _optional = field_validator("kube_context", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _context = field_validator("kube_context")(classmethod(lambda cls, v: v and check_display_name(v, 253)))

    @field_validator("storage", mode="before")
    @classmethod
    def _no_lab_storage(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        if any(v.get(key, default) not in (default, "", {}) for key, default in _LAB_STORAGE_DEFAULTS.items()):
            raise ValueError("provision and exportPath are lab keys (a server the program sets up); dev uses "
                             "storage.hostPath, storage.useDefaultClass or an existing export, storage.nfs")
        return {key: value for key, value in v.items() if key not in _LAB_STORAGE_DEFAULTS}

    @field_validator("gpu_nodes")
    @classmethod
    def _gpu_nodes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("lists a node twice")
        return v

    @field_validator("gpu_node_gpus")
    @classmethod
    def _gpu_node_gpus(cls, v: dict[str, int]) -> dict[str, int]:
        for node, gpus in v.items():
            if not 1 <= gpus <= MAX_GPUS_PER_NODE:
                raise ValueError(f"{node}: {gpus} GPUs; a GPU node has 1 to {MAX_GPUS_PER_NODE} (the most one server "
                                 "carries: config/gpu_inventory.py)")
        return v

    @property
    def gpu_counts(self) -> dict[str, int]:
        """GPU node -> its GPUs, for the gpuNodes whose count gpuNodeGpus declares."""
        return {node: self.gpu_node_gpus[node] for node in self.gpu_nodes if node in self.gpu_node_gpus}

    def unenforced_warning(self) -> str:
        return dev_unenforced_warning(self.cluster_cni)

    @functools.cached_property
    def inventory(self) -> Inventory:
        return dev_inventory(self.gpu_nodes, self.gpu_counts, self.gpu)

    @property
    def gpu_node_count(self) -> int:
        """The nodes gpuNodes lists."""
        return len(self.gpu_nodes)

    def _capacity_problems(self) -> Problems:
        t = self.training
        if not self.gpu_nodes:
            return [("training.enabled", "no GPU node is configured (gpuNodes)")]
        if t.nodes > len(self.gpu_nodes):
            return [("training.nodes", f"{t.nodes} pods (one per node) but only {len(self.gpu_nodes)} gpuNodes")]
        if len(self.gpu_counts) == len(self.gpu_nodes):  # every count known: the pods must fit them
            return fit_problems(list(self.gpu_counts.values()), t.nodes, t.gpus_per_node, "GPU node", "gpuNodeGpus")
        return []

    def _address_problems(self) -> Problems:
        """The RoCE range against the cluster's service and node ranges; the NFS server outside the
        service and RoCE ranges (it may be on the node network: minikube's host is)."""
        ranges = [Range("serviceCidr", self.service_cidr),
                  Range("nodeCidr", self.node_cidr, holds_hosts=True)]
        if self.network.roce is not None:
            ranges.append(Range("network.roce.range", self.network.roce.range,
                                why="the pods' RDMA network must not take the NFS server's address"))
        nfs = ipv4_address("storage.nfs.server", self.storage.nfs.server if self.storage.nfs else None)
        return overlap_problems(ranges, nfs) + service_range_problems("serviceCidr", self.service_cidr)

    def _platform_problems(self, secrets: frozenset[str]) -> Problems:
        st, problems = self.storage, []
        if st.host_path and (problem := host_dir_problem(st.host_path)):
            problems.append(("storage.hostPath", problem))
        if st.host_path and st.use_default_class:
            problems.append(("storage.useDefaultClass", "choose one: storage.hostPath or useDefaultClass"))
        if st.nfs and (st.host_path or st.use_default_class):
            other = "hostPath" if st.host_path else "useDefaultClass"
            problems.append(("storage.nfs", f"choose one: storage.nfs (an existing export) or storage.{other}"))
        if self.runs_jobs and not st.configured:
            problems.append(("storage", "training needs shared storage: set storage.hostPath, storage.useDefaultClass: true "
                                        "or storage.nfs {server, path}"))
        if self.runs_jobs and st.host_path and self.training.nodes > 1:
            problems.append(("storage.hostPath", "a node directory is not shared between nodes; use storage.nfs or useDefaultClass "
                                                  "with training.nodes > 1"))
        if self.network.rdma and self.network.roce is None:
            problems.append(("network.roce", "network.rdma on dev moves each GPU node's RoCE NIC into its training pod: "
                                             "set network.roce {interface, pciAddress, hca, driver, range} (docs/rdma.md)"))
        if "kubeconfig" not in secrets and not self.kube_context:
            problems.append(
                ("kubeContext", "dev needs a kubeconfig secret (gpu-cluster:kubeconfig) or a kubeContext")
            )
        problems += [("gpuNodeGpus", f"{node} is not in gpuNodes") for node in self.gpu_node_gpus
                     if node not in self.gpu_nodes]
        problems += dev_roce_interface_problems(self.network.roce)
        return problems + self._address_problems() + inert_dev_problems(self, self.gpu_counts, self.kube_context, secrets)

    def roce_interface_warning(self) -> str | None:
        """Another cluster's node may be reached on any interface name (config/roce_interface.py)."""
        roce = self.network.roce
        if roce is None or dev_roce_interface_problems(roce):
            return None
        return unknown_interface_warning(roce, "the existing cluster's nodes are not known offline",
                                         f"`ip -br -4 addr show {roce.interface}` on each of gpuNodes must not show "
                                         "the node's InternalIP (`kubectl get nodes -o wide`)")
