"""The shared-storage and training layer of every stack, wired after the GPU-ready gate.

Order: training Namespace -> shared claim (this platform's SharedStorage, or the claim the
platform made itself, e.g. gke's Filestore) -> namespace NetworkPolicies -> (pytorchjob: the
training operator) -> NCCL acceptance Job (acceptance.nccl) -> training job (training.enabled).
Both jobs depend on the GPU-ready gate, so no pod asks for a GPU before every GPU node passed.

Does not manage: anything when neither storage nor a job is configured (nothing is registered).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components import scheduling
from components.shared_storage import SharedStorage, SharedStorageArgs
from components.storage_contract import TRAINING_NAMESPACE, SharedClaim
from components.training import launch, network_policy
from components.training.job import TrainingJob, TrainingJobArgs, TrainingOperator
from components.training_namespace import training_namespace
from config import DevStack, LabStack, StackConfig
from config.gpu import MigStrategy, SharingMode
from config.training import Launcher

ACCEPTANCE_JOB = "nccl-acceptance"
TRAINING_JOB = "train"
# How long `up` waits for the acceptance sweep (image pull included) before reporting failure.
ACCEPTANCE_AWAIT_MINUTES = 30


@dataclass
class TrainingLayer:
    claim: SharedClaim | None = None
    acceptance: TrainingJob | None = None
    training: TrainingJob | None = None
    outputs: dict[str, object] = field(default_factory=dict)


def acceptance_args(cfg: StackConfig) -> tuple[str, ...]:
    """Arguments of `python -m trainer.allreduce_bench` for this stack's declared network."""
    acc, net = cfg.acceptance, cfg.network
    assert net.link_gbps is not None  # the config model requires it with acceptance.nccl
    return (
        "--link-gbps", f"{net.link_gbps:g}",
        # unset: a lower default over sockets than over RDMA (config/training.py says why)
        "--min-busbw-fraction", f"{acc.busbw_fraction(net.rdma):g}",
        "--max-bytes", str(acc.max_bytes),
        *(("--rdma",) if net.rdma else ()),  # a socket fallback then fails the verdict
    )


def rank0_logs(launcher: Launcher, job: str) -> str:
    """The command that prints node rank 0's log (the acceptance verdict, the training progress)."""
    if launcher is Launcher.PYTORCHJOB:
        return f"kubectl -n {TRAINING_NAMESPACE} logs {job}-master-0"
    return (f"kubectl -n {TRAINING_NAMESPACE} logs --tail=-1 "
            f"-l {network_policy.JOB_LABEL}={job},batch.kubernetes.io/job-completion-index=0")


class NamespacePolicies(pulumi.ComponentResource):
    """Default deny for the training namespace, plus DNS egress (job peers come with each job)."""

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:training:NamespacePolicies", name, None, opts)
        self.policies = []
        for manifest in (network_policy.default_deny(), network_policy.allow_dns()):
            self.policies.append(k8s.networking.v1.NetworkPolicy(
                f"{name}-{manifest['metadata']['name']}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            ))
        self.register_outputs({"policies": [p["metadata"]["name"] for p in
                                             (network_policy.default_deny(), network_policy.allow_dns())]})


def shared_storage_args(
    cfg: LabStack | DevStack,
    namespace: k8s.core.v1.Namespace,
    nfs_connection: remote.ConnectionArgs | None,
    nfs_after: list[pulumi.Resource],
) -> SharedStorageArgs:
    """lab: storage.provision's NFS server runs on the first control plane and exports to every host."""
    if isinstance(cfg, DevStack):
        return SharedStorageArgs(storage=cfg.storage, namespace=namespace)
    return SharedStorageArgs(
        storage=cfg.storage, namespace=namespace, control_plane_address=str(cfg.control_planes[0].address),
        host_addresses=tuple(str(h.address) for h in cfg.hosts), nfs_connection=nfs_connection, nfs_after=nfs_after,
    )


def deploy(
    cfg: StackConfig,
    provider: k8s.Provider,
    after: list[pulumi.Resource],
    gate: pulumi.Resource | None,
    shared_claim: SharedClaim | None = None,
    nfs_connection: remote.ConnectionArgs | None = None,
    nfs_after: list[pulumi.Resource] | None = None,
) -> TrainingLayer:
    t, acc = cfg.training, cfg.acceptance
    runs = t.enabled or acc.nccl
    own_storage = shared_claim is None and isinstance(cfg, LabStack | DevStack) and cfg.storage.configured
    layer = TrainingLayer(claim=shared_claim, outputs={})
    if not (runs or own_storage):
        return layer
    opts = pulumi.ResourceOptions(provider=provider, depends_on=after)
    ns = training_namespace(provider, depends_on=after)
    if own_storage:
        assert isinstance(cfg, LabStack | DevStack)  # own_storage says so
        storage = SharedStorage(
            "shared-storage", shared_storage_args(cfg, ns, nfs_connection, list(nfs_after or [])), opts=opts
        )
        layer.claim = storage.claim
    if layer.claim is not None:
        layer.outputs["sharedClaim"] = {
            "claim": f"{layer.claim.namespace}/{layer.claim.name}", "backend": layer.claim.backend
        }
    if not runs:
        return layer
    if layer.claim is None:
        raise ValueError("training needs a shared claim: configure storage (or pass the platform's claim)")
    sharing = cfg.gpu.sharing
    mixed = sharing.mode is SharingMode.MIG and sharing.mig_strategy is MigStrategy.MIXED
    gpu_resource = scheduling.gpu_resource(sharing.mig_profile if mixed else None)
    policies = NamespacePolicies("training-policies", opts=pulumi.ResourceOptions(provider=provider, depends_on=[ns]))
    before_jobs: list[pulumi.Resource] = [ns, policies, *after, *([gate] if gate is not None else [])]
    if t.launcher is Launcher.PYTORCHJOB:
        before_jobs.append(TrainingOperator("training-operator", opts=opts))
    if acc.nccl:
        layer.acceptance = TrainingJob(
            ACCEPTANCE_JOB,
            TrainingJobArgs(
                training=t,
                claim=layer.claim,
                module=launch.BENCH_MODULE,  # it turns NCCL's INFO log on itself to read the transport
                module_args=acceptance_args(cfg),
                await_minutes=ACCEPTANCE_AWAIT_MINUTES,
                gpu_resource=gpu_resource,
            ),
            opts=pulumi.ResourceOptions(provider=provider, depends_on=before_jobs),
        )
        layer.outputs["ncclAcceptance"] = {
            "job": f"{TRAINING_NAMESPACE}/{ACCEPTANCE_JOB}",
            "result": rank0_logs(t.launcher, ACCEPTANCE_JOB),
        }
    if t.enabled:
        # After the acceptance Job: both want the same GPUs, and a failed network check
        # should stop the run before it starts.
        layer.training = TrainingJob(
            TRAINING_JOB,
            TrainingJobArgs(training=t, claim=layer.claim, gpu_resource=gpu_resource),
            opts=pulumi.ResourceOptions(
                provider=provider, depends_on=[*before_jobs, *([layer.acceptance] if layer.acceptance else [])]
            ),
        )
        layer.outputs["training"] = {
            "job": f"{TRAINING_NAMESPACE}/{TRAINING_JOB}",
            "launcher": t.launcher.value,
            "image": t.image,
            "logs": rank0_logs(t.launcher, TRAINING_JOB),
        }
    return layer
