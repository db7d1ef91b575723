"""dev: an existing cluster (minikube --gpus all, kind, ...). `DevStack` holds the shared keys
(addons.Addons) and dev's own: the kubeconfig context, the GPU nodes to label and the shared
storage (a node directory, a claim on the cluster's default StorageClass, or an existing NFS export)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from config.addons import Addons, Platform, Storage
from config.errors import Problems
from config.fields import check_abs_path, check_dns_subdomain, empty_to_none, host_dir_problem
from config.lab import NfsExport

# lab's own storage keys (the program's NFS server): refused in a dev stack unless left at their defaults.
_LAB_STORAGE_DEFAULTS: dict[str, Any] = {"provision": False, "exportPath": "/srv/gpu-cluster/shared"}


class DevStorage(Storage):
    """dev: a node directory (single-node clusters), a claim on the cluster's default class, or an
    existing NFS export as a static PersistentVolume (seed 003: the host's nfs-kernel-server)."""

    host_path: str | None = Field(default=None, description="A node directory (single-node clusters).")
    use_default_class: bool = Field(default=False, description="A claim on the cluster's default class.")
    nfs: NfsExport | None = Field(
        default=None, description="An existing NFS export {server, path} every node can mount (seed 003)."
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
        default=None, description="Context of the local kubeconfig (when no kubeconfig secret)."
    )
    # Node names become object names and (in the offline renderer) file names: no '/' or '..'.
    gpu_nodes: tuple[Annotated[str, AfterValidator(check_dns_subdomain)], ...] = Field(
        default=(), description="Names of existing nodes with GPUs, labelled for GPU workloads."
    )
    storage: DevStorage = Field(
        default_factory=DevStorage, description="The shared ReadWriteMany volume of training pods."
    )

    FOREIGN_HINTS: ClassVar[dict[str, str]] = {
        "hosts": "dev uses an existing cluster; its GPU nodes are listed in gpuNodes",
        "sshPrivateKey": "dev reaches its cluster through kubeContext or the kubeconfig secret",
        "gke": "dev uses an existing cluster",
    }

    _optional = field_validator("kube_context", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))

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
        return []

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
                                             "set network.roce {interface, pciAddress, hca, driver, range} (README: RDMA)"))
        if "kubeconfig" not in secrets and not self.kube_context:
            problems.append(
                ("kubeContext", "dev needs a kubeconfig secret (gpu-cluster:kubeconfig) or a kubeContext")
            )
        return problems
