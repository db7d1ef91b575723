"""The keys every platform shares (the in-cluster add-ons: GPU stack, monitoring, training, its
acceptance test and network) and the checks among them. Each platform's stack type (lab.LabStack,
dev.DevStack, gke.GkeStack) extends `Addons` with its own keys, its GPU node count, where the
training jobs must fit and its own checks."""

from __future__ import annotations

import enum
import re
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from components import versions
from config.chart_source import MULTUS_DAEMONSET, TRAINING_OPERATOR_OVERLAY, ChartSource
from config.charts_dir import PinnedChart, PinnedDownload, charts_dir_problems
from config.errors import Problems
from config.fields import Model, check_quantity
from config.gpu import GpuConfig, GpuStack, gpu_problems
from config.health import GpuHealthConfig, gpu_health_problems
from config.inventory import Inventory
from config.monitoring import MonitoringConfig, monitoring_problems
from config.queues import QueuesConfig, queues_problems
from config.training import AcceptanceConfig, Launcher, NetworkConfig, TrainingConfig, training_problems
from config.wandb import WandbConfig, wandb_problems
from config.wandb_teams import wandb_team_problems


class Platform(enum.StrEnum):
    LAB = "lab"  # own servers over SSH, kubeadm
    DEV = "dev"  # an existing cluster (minikube --gpus all, kind, ...)
    GKE = "gke"  # Google Kubernetes Engine, created by this program


class Addons(Model):
    """Everything a stack file says, validated: the shared keys here, the platform's in its subclass.
    Field descriptions become docs/reference/config.md and Pulumi.yaml's (config/reference.py)."""

    platform: Platform = Field(
        description="Which environment this stack builds: lab (own servers over SSH, kubeadm), "
                    "gke (Google Kubernetes Engine) or dev (an existing cluster).",
    )
    kubernetes_version: str = Field(
        default=versions.KUBERNETES_DEFAULT,
        description=f"Kubernetes version, minors {versions.KUBERNETES_SUPPORTED_MINORS[0]}-"
                    f"{versions.KUBERNETES_SUPPORTED_MINORS[-1]}: lab installs it; every stack validates the objects "
                    "it emits against its minor.",
    )
    gpu: GpuConfig = Field(
        default_factory=GpuConfig, description="The GPU software stack, GPU sharing and the GPU-ready gate."
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig,
        description="Prometheus, Alertmanager, Grafana, the GPU dashboards and alert rules.",
    )
    training: TrainingConfig = Field(
        default_factory=TrainingConfig, description="The distributed PyTorch training job (torchrun)."
    )
    acceptance: AcceptanceConfig = Field(
        default_factory=AcceptanceConfig, description="The NCCL all-reduce acceptance Job, run before training."
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig, description="The GPU nodes' network as declared (link rate, RDMA)."
    )
    wandb: WandbConfig = Field(
        default_factory=WandbConfig,
        description="W&B Launch: an agent in namespace wandb-launch runs one queue's runs as Jobs in the training "
                    "namespace; the API key is the secret gpu-cluster:wandbApiKey.",
    )
    gpu_health: GpuHealthConfig = Field(
        default_factory=GpuHealthConfig,
        description="The GPU health service: takes failing GPU nodes out of service and back after a passing "
                    "diagnostic (on by default on lab and dev with an image; off on gke, where node auto-repair acts).",
    )

    queues: QueuesConfig = Field(
        default_factory=QueuesConfig,
        description="Kueue: teams with namespaces, quotas and queues; every job the program runs is queued "
                    "(docs/queues.md).",
    )
    charts_dir: str = Field(
        default="",
        description="A folder holding each pinned Helm chart the stack installs, unpacked into a folder named "
                    "chart-version such as kueue-0.19.2 (helm pull --untar, renamed), for clusters without internet "
                    "access: every release then "
                    "installs from there and nothing is fetched from a chart repository or registry. An absolute "
                    "path; each chart's Chart.yaml must say its pinned name and version. The upstream manifests "
                    "come from there too: with network.roce Multus' DaemonSet as "
                    f"{MULTUS_DAEMONSET.folder}/{MULTUS_DAEMONSET.path}, with training.launcher pytorchjob the "
                    f"training operator's repository at its tag as {TRAINING_OPERATOR_OVERLAY.folder}/ (the "
                    f"overlay {TRAINING_OPERATOR_OVERLAY.path}). Empty: each chart from its repository, each "
                    "manifest from its URL.",
    )

    # Keys of the other platforms: why this one has no use for them (added to their refusal).
    FOREIGN_HINTS: ClassVar[Mapping[str, str]] = {}
    # gpuHealth.enabled when unset (config/health.py says why gke's is off).
    GPU_HEALTH_BY_DEFAULT: ClassVar[bool] = True

    @field_validator("kubernetes_version")
    @classmethod
    def _k8s_version(cls, v: str) -> str:
        m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", v)
        if not m:
            raise ValueError("must be a full version such as '1.34.2'")
        minor = f"{m.group(1)}.{m.group(2)}"
        if minor not in versions.KUBERNETES_SUPPORTED_MINORS:
            raise ValueError(
                f"minor {minor} is not supported; allowed: "
                + ", ".join(versions.KUBERNETES_SUPPORTED_MINORS)
            )
        return v.lstrip("v")

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The stack file keys this type holds (camelCase, without the namespace)."""
        return frozenset(f.alias or name for name, f in cls.model_fields.items())

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])

    @property
    def runs_jobs(self) -> bool:
        """Whether `up` runs a GPU job: the training job or the acceptance Job."""
        return self.training.enabled or self.acceptance.nccl

    @property
    def gpu_health_image(self) -> str | None:
        """The image the GPU health service runs from: gpuHealth.image, else training.image."""
        return self.gpu_health.image or self.training.image

    @property
    def nccl_check_enabled(self) -> bool:
        """gpuHealth.ncclCheck.enabled, or when unset: on with the service, network.linkGbps and
        training.image (the sweep's threshold and the image it runs from)."""
        if not self.gpu_health_enabled:
            return False
        if self.gpu_health.nccl_check.enabled is not None:
            return self.gpu_health.nccl_check.enabled
        return self.network.link_gbps is not None and self.training.image is not None

    @property
    def needs_training_namespace(self) -> bool:
        """The training namespace exists when storage is configured (the claim lives there), a job
        runs, network.roce is on (its network lives there) or the NCCL pair check runs (its pods)."""
        return (getattr(getattr(self, "storage", None), "configured", False) or self.runs_jobs
                or self.network.roce is not None or self.nccl_check_enabled)

    @property
    def acceptance_link_gbps(self) -> float | None:
        """The link rate the NCCL acceptance holds the network to: network.linkGbps (gke: else its
        GPUDirect machine's documented rate)."""
        return self.network.link_gbps

    @property
    def gpu_health_enabled(self) -> bool:
        """gpuHealth.enabled, or when unset the platform's default (only with an image to run)."""
        if self.gpu_health.enabled is not None:
            return self.gpu_health.enabled
        return self.GPU_HEALTH_BY_DEFAULT and self.gpu_health_image is not None

    @property
    @abstractmethod
    def gpu_node_count(self) -> int:
        """GPU nodes that exist after `up`, as far as the config knows (what the GPU-ready gate counts)."""

    def problems(self, secrets: frozenset[str]) -> Problems:
        """Every check across keys; `secrets`: the secret keys the stack sets (as secrets or not)."""
        return [
            *gpu_problems(self.gpu),
            *training_problems(self.training, self.acceptance,
                               self.network.model_copy(update={"link_gbps": self.acceptance_link_gbps}), self.gpu),
            *(self._capacity_problems() if self.runs_jobs else []),
            *monitoring_problems(self.monitoring),
            # gke has no `storage` key: its shared claim is always a Filestore instance.
            *wandb_problems(self.wandb, self.training, secrets,
                            shared_storage=getattr(getattr(self, "storage", None), "configured", True)),
            *gpu_health_problems(self.gpu_health, self.gpu_health_image, self.training.image,
                                 self.network.link_gbps),
            *queues_problems(self.queues, self),
            *wandb_team_problems(self.wandb, self.queues),
            *self._platform_problems(secrets),
            *charts_dir_problems(self.charts_dir, self.pinned_downloads()),
        ]

    @property
    def chart_source(self) -> ChartSource:
        """Where the releases take their charts from (chartsDir, else the repositories)."""
        return ChartSource(Path(self.charts_dir) if self.charts_dir else None)

    def pinned_downloads(self) -> tuple[PinnedDownload, ...]:
        """Every Helm chart and upstream manifest this stack installs, as the wiring in stacks/ decides
        (what chartsDir must hold; tests/stacks/test_charts_dir.py compares it with what a plan installs)."""
        v = versions
        gpu = ((PinnedChart(v.GPU_OPERATOR_CHART, v.GPU_OPERATOR_CHART_VERSION, v.GPU_OPERATOR_CHART_REPO),)
               if self.gpu.stack is GpuStack.OPERATOR else
               (PinnedChart(v.NVIDIA_DEVICE_PLUGIN_CHART, v.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
                            v.NVIDIA_DEVICE_PLUGIN_CHART_REPO),
                PinnedChart(v.DCGM_EXPORTER_CHART, v.DCGM_EXPORTER_CHART_VERSION, v.DCGM_EXPORTER_CHART_REPO)))
        optional = (
            (self.monitoring.enabled, PinnedChart(v.KUBE_PROMETHEUS_STACK_CHART, v.KUBE_PROMETHEUS_STACK_CHART_VERSION,
                                                  v.KUBE_PROMETHEUS_STACK_CHART_REPO)),
            # stacks/addons.py: the RDMA network needs the training image (its exporter and link test).
            (self.network.roce is not None and self.training.image is not None,
             PinnedChart(v.WHEREABOUTS_CHART, v.WHEREABOUTS_CHART_VERSION)),
            (self.network.roce is not None and self.training.image is not None, MULTUS_DAEMONSET),
            # stacks/addons.py jobs(): the operator comes with the jobs, whichever of them runs.
            (self.runs_jobs and self.training.launcher is Launcher.PYTORCHJOB, TRAINING_OPERATOR_OVERLAY),
            (self.queues.enabled, PinnedChart(v.KUEUE_CHART, v.KUEUE_CHART_VERSION)),
            (self.wandb.enabled, PinnedChart(v.WANDB_LAUNCH_AGENT_CHART, v.WANDB_LAUNCH_AGENT_CHART_VERSION,
                                             v.WANDB_LAUNCH_AGENT_CHART_REPO)),
        )
        return gpu + tuple(download for needed, download in optional if needed)

    @property
    @abstractmethod
    def inventory(self) -> Inventory:
        """The GPU nodes as this platform's config describes them (config/inventory.py), built once."""

    def unenforced_warning(self) -> str:
        """render's warning when the pod network ignores NetworkPolicies (config/network_policy_enforcement.py)."""
        return ""

    def reservation_warnings(self) -> list[str]:
        """render's warnings on capacity whose size the config does not hold (gke: reservations)."""
        return []

    def egress_warnings(self) -> list[str]:
        """render's warnings on internet egress the plan relies on but does not create (gke: private nodes)."""
        return []

    def roce_interface_warning(self) -> str | None:
        """Where the plan cannot tell whether network.roce.interface is a node's own interface: render's
        warning (config/roce_interface.py). gke takes no network.roce, so by default there is none."""
        return None

    @abstractmethod
    def _capacity_problems(self) -> Problems:
        """The training job (and the acceptance Job, sized alike) against the GPU nodes it needs."""

    @abstractmethod
    def _platform_problems(self, secrets: frozenset[str]) -> Problems:
        """The platform's own keys against each other and the shared ones."""


class Storage(Model):
    """The shared ReadWriteMany volume (cache, data, checkpoints) training pods mount: its size
    here, where it comes from in the platform's subclass (gke: gke.filestore instead)."""

    size: str = Field(default="100Gi", description="Requested size of the shared claim, a quantity above zero.")

    _size = field_validator("size", mode="before")(classmethod(lambda cls, v: check_quantity(v)))

    @property
    @abstractmethod
    def configured(self) -> bool:
        """Whether the stack asks for a shared volume at all."""
