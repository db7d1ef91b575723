"""TrainingJob: one torchrun job (the trainer, or the NCCL acceptance sweep) in the training
namespace, by either launcher (training.launcher).

indexed-job: a headless Service and a batch/v1 Job with completionMode Indexed, completions =
  parallelism = training.nodes, pods named `<job>-<index>` under the Service's subdomain, so rank 0
  is reachable as MASTER_ADDR = `<job>-0.<service>`. torchrun gets node_rank from the completion
  index and restarts its workers in place (training.maxRestarts, c10d rendezvous) before the pod
  fails; a failed pod is retried up to training.backoffLimitPerIndex times per index
  (maxFailedIndexes 0: one index out of retries fails the Job). podFailurePolicy: disruptions
  (preemption, eviction, node drain) do not count against those retries, and the trainer's own
  fatal exit code (a config error no retry can fix) fails the whole Job at once.
pytorchjob: a kubeflow.org/v1 PyTorchJob (Master 1 + Worker nodes-1, container `pytorch`, the
  operator injecting MASTER_ADDR/RANK/WORLD_SIZE and PET_* for torchrun; elasticPolicy when
  training.elastic.enabled). The training operator itself is `TrainingOperator` below.

Both: one pod per GPU node (required anti-affinity), `nvidia.com/gpu` limits, cpu/memory requests
and limits, the GPU and control-plane taints tolerated (a control plane with a GPU counts as a GPU
node; workers preferred: config/scheduling_contract.py), a memory-backed /dev/shm for dataloader
workers, NCCL env from config, the shared claim mounted per components/storage_contract.py, and
a NetworkPolicy limiting the rendezvous and NCCL ports to the job's own pods. Container command
and env come from components/training/launch.py, shared with the local end-to-end test.

What `pulumi up` waits for: the Service and the Job's creation only; a training run is marked
`pulumi.com/skipAwait` so Pulumi's Job timeout never fails a long run. The NCCL acceptance Job
(indexed-job) is the exception: `up` waits for it to pass (its podFailurePolicy turns a failed
verdict into a failed Job, and `up` reports it) before the training job is submitted.

network.roce: the pods ask for the `roce` network (Multus adds net1), `rdma/roce` (the
/dev/infiniband devices), IPC_LOCK, and take NCCL/Gloo's environment on net1; with monitoring a
native sidecar exports their RDMA device's counters (components/rdma_network.py says why).

queues.enabled (`queue`): the job carries Kueue's queue label (the program's LocalQueue) and its
priority class, and is created suspended (spec.suspend; a PyTorchJob's runPolicy.suspend) for Kueue
to admit all its pods at once (components/queues/). An awaited Job still waits for completion:
pulumi-kubernetes' Job check (pulumi/cloud-ready-checks, job/check.go) waits for startTime and the
Complete condition, which a suspended Job has neither of, so `up` waits through the queue too.

Does not manage: Kueue itself (components/queues/), image builds, SR-IOV, experiment tracking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.cluster_addon import tolerate_control_plane
from components.rdma_network import NETWORKS_ANNOTATION, PodRdma, exporter_sidecar
from components.storage_contract import GCS_FUSE_ANNOTATION, MOUNTS, TRAINING_NAMESPACE, BucketData, SharedClaim
from components.training import gpudirect_pod, launch
from components.training.gpudirect_pod import PodGpuDirect
from components.training.network_policy import RDZV_PORT, job_peers
from config.chart_source import TRAINING_OPERATOR_OVERLAY, ChartSource
from config.queues import PRIORITY_LABEL, PROGRAM_PRIORITY_CLASS, QUEUE_LABEL, REQUIRED_TOPOLOGY
from config.scheduling_contract import (
    GPU_NODE_SELECTOR_TERMS,
    GPU_RESOURCE,
    gpu_tolerations,
    prefer_workers,
    training_job_labels,
)
from config.training import Launcher, TrainingConfig

CONTAINER = {Launcher.INDEXED_JOB: "trainer", Launcher.PYTORCHJOB: "pytorch"}
# The operator reads MASTER_PORT from the container port of this name (default 23456 otherwise).
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
SHM_VOLUME = "dshm"
SHARED_VOLUME = "shared"
BUCKET_VOLUME = "bucket-data"


@dataclass(frozen=True)
class TrainingJobArgs:
    training: TrainingConfig
    claim: SharedClaim | None  # None: no shared volume (the NCCL pair check needs none)
    # What the pods run under torchrun: the trainer (its arguments from config) or another module
    # of the workload image with `module_args` (the acceptance sweep).
    module: str = launch.TRAINER_MODULE
    module_args: tuple[str, ...] = ()
    # Wait this many minutes for completion (acceptance, indexed-job) instead of skipAwait.
    await_minutes: int | None = None
    # The GPU resource the pods ask for (a MIG slice type under the mixed strategy).
    gpu_resource: str = GPU_RESOURCE
    # network.roce: the RDMA NIC as the pods' secondary interface (components/rdma_network.py).
    rdma: PodRdma | None = None
    # A command other than torchrun (the RDMA link test), with its own number of pods.
    command: tuple[str, ...] | None = None
    pods: int | None = None
    # How long a pod waits for its peers at the rendezvous (launch.LaunchSpec.rdzv_timeout_seconds).
    rdzv_timeout_seconds: int | None = None
    # queues.enabled: the LocalQueue the job is submitted to (created suspended, admitted by Kueue).
    queue: str | None = None
    # With a queue: the node label (a Topology level) all the job's pods must share, e.g. the rack
    # (Kueue's podset-required-topology; jobs over RDMA); None: admitted on quota alone.
    required_topology: str | None = None
    # gke: the GPUDirect network of the pods (components/training/gpudirect_pod.py); None: none.
    gpudirect: PodGpuDirect | None = None
    # gke.gcsData: the data mount is this bucket (GCS FUSE), not the claim's data sub-path.
    data_bucket: BucketData | None = None

    @property
    def nodes(self) -> int:
        return self.pods if self.pods is not None else self.training.nodes


def service_name(job: str) -> str:
    return f"{job}-hosts"


def launch_spec(job: str, args: TrainingJobArgs) -> launch.LaunchSpec:
    t = args.training
    return launch.LaunchSpec(
        job=job,
        service=service_name(job),
        namespace=TRAINING_NAMESPACE,
        nodes=args.nodes,
        gpus_per_node=t.gpus_per_node,
        launcher=t.launcher.value,
        max_restarts=t.max_restarts,
        min_nodes=t.elastic.min_nodes if t.elastic.enabled else None,
        rdzv_port=RDZV_PORT,
        module=args.module,
        module_args=tuple(args.module_args),
        epochs=t.epochs,
        batch_size=t.batch_size,
        checkpoint_every=t.checkpoint_every,
        checkpoint_every_steps=t.checkpoint_every_steps,
        dataset=t.dataset.value,
        model=t.model.value,
        learning_rate=t.learning_rate,
        warmup_epochs=t.warmup_epochs,
        weight_decay=t.weight_decay,
        nccl_debug=t.nccl.debug.value,
        nccl_socket_ifname=t.nccl.socket_ifname,
        extra_env=(args.rdma.env if args.rdma is not None else ()) + (
            gpudirect_pod.trainer_env(args.gpudirect) if args.gpudirect is not None else ()),
        prelude=gpudirect_pod.prelude(args.gpudirect) if args.gpudirect is not None else (),
        rdzv_timeout_seconds=args.rdzv_timeout_seconds,
    )


def pod_template(job: str, args: TrainingJobArgs) -> dict[str, Any]:
    t = args.training
    spec = launch_spec(job, args)
    labels = training_job_labels(job)
    limits: dict[str, Any] = {args.gpu_resource: t.gpus_per_node, "cpu": t.cpu_limit, "memory": t.memory_limit}
    security: dict[str, Any] = {"allowPrivilegeEscalation": False}
    if args.rdma is not None:
        limits[args.rdma.resource] = 1  # the /dev/infiniband devices, from the RDMA device plugin
        # RDMA memory registration pins the buffers it registers: beyond the default memlock limit.
        security["capabilities"] = {"add": ["IPC_LOCK"]}
    container: dict[str, Any] = {
        "name": CONTAINER[t.launcher],
        "image": t.image,
        "command": list(args.command) if args.command else list(launch.torchrun_command(spec)),
        "env": launch.pod_env(spec),
        "ports": [{
            "name": PYTORCHJOB_PORT_NAME if t.launcher is Launcher.PYTORCHJOB else "rdzv",
            "containerPort": RDZV_PORT,
            "protocol": "TCP",
        }],
        "resources": {"requests": {"cpu": t.cpu_request, "memory": t.memory_request}, "limits": limits},
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
        + [
            {"name": BUCKET_VOLUME, "mountPath": mount_path, "readOnly": args.data_bucket.read_only}
            if args.data_bucket is not None and purpose == "data"
            else {"name": SHARED_VOLUME, "mountPath": mount_path, "subPath": sub_path}
            for purpose, (sub_path, mount_path) in MOUNTS.items()
            if args.claim is not None
        ],
        "securityContext": security,
    }
    pod: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": GPU_NODE_SELECTOR_TERMS},
                "preferredDuringSchedulingIgnoredDuringExecution": prefer_workers(),
            },
            # One pod per node: `nodes` means nodes, and the acceptance test measures the network.
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                ]
            },
        },
        "tolerations": gpu_tolerations(),
        # torchrun's static rendezvous and the trainer never call the Kubernetes API: no token in
        # the pod for a compromised dependency to use (the egress policy lets public addresses on 443).
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            # Docker's 64 MiB default /dev/shm kills DataLoader workers; memory-backed and bounded.
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": t.shm_size}},
            *([{"name": SHARED_VOLUME, "persistentVolumeClaim": {"claimName": args.claim.name}}]
              if args.claim is not None else []),
            *([args.data_bucket.volume(BUCKET_VOLUME)] if args.data_bucket is not None else []),
        ],
    }
    if args.data_bucket is not None:  # its Workload Identity reads the bucket (no API token mounted)
        pod["serviceAccountName"] = args.data_bucket.service_account
    if t.launcher is Launcher.INDEXED_JOB:
        # podFailurePolicy requires Never: each failure is a new pod the policy can judge.
        pod["restartPolicy"] = "Never"
        pod["subdomain"] = service_name(job)
    metadata: dict[str, Any] = {"labels": labels}
    annotations: dict[str, str] = {}
    if args.queue and args.required_topology:
        annotations[REQUIRED_TOPOLOGY] = args.required_topology
    if args.data_bucket is not None:
        annotations[GCS_FUSE_ANNOTATION] = "true"
    if args.rdma is not None:
        annotations[NETWORKS_ANNOTATION] = args.rdma.network
        if args.rdma.exporter_image:
            pod["initContainers"] = [exporter_sidecar(args.rdma.exporter_image)]
    if args.gpudirect is not None:
        _add_gpudirect(pod, container, annotations, args.gpudirect)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod}


def _add_gpudirect(pod: dict[str, Any], container: dict[str, Any], annotations: dict[str, str],
                   g: PodGpuDirect) -> None:
    """The GPUDirect network's annotations, node selector, volumes and sidecar (gpudirect_pod.py)."""
    annotations.update(gpudirect_pod.pod_annotations(g))
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    required["nodeSelectorTerms"] = [{**term, "matchExpressions": [*term.get("matchExpressions", []),
                                                                   gpudirect_pod.node_selector_term(g)]}
                                     for term in required["nodeSelectorTerms"]]
    pod["volumes"] = [*pod["volumes"], *gpudirect_pod.volumes(g)]
    container["volumeMounts"] = [*container["volumeMounts"], *gpudirect_pod.trainer_mounts(g)]
    if sidecars := gpudirect_pod.sidecars(g):
        pod["initContainers"] = [*pod.get("initContainers", []), *sidecars]


def headless_service_manifest(job: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(job), "namespace": TRAINING_NAMESPACE, "labels": training_job_labels(job)},
        "spec": {
            "clusterIP": "None",
            # Rank 0 must resolve before it is Ready (there is no readiness probe to pass).
            "publishNotReadyAddresses": True,
            "selector": training_job_labels(job),
            "ports": [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT, "protocol": "TCP"}],
        },
    }


def _annotations(args: TrainingJobArgs) -> dict[str, str]:
    return {} if args.await_minutes else dict(SKIP_AWAIT)


def _job_labels(job: str, args: TrainingJobArgs) -> dict[str, str]:
    """The job's labels, and with a queue Kueue's: its LocalQueue and the program's priority class."""
    queued = {QUEUE_LABEL: args.queue, PRIORITY_LABEL: PROGRAM_PRIORITY_CLASS} if args.queue else {}
    return {**training_job_labels(job), **queued}


def indexed_job_manifest(job: str, args: TrainingJobArgs) -> dict[str, Any]:
    t = args.training
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job,
            "namespace": TRAINING_NAMESPACE,
            "labels": _job_labels(job, args),
            "annotations": _annotations(args),
        },
        "spec": {
            # Queued: created suspended, Kueue unsuspends it once admitted (its webhook would set it too).
            **({"suspend": True} if args.queue else {}),
            "completionMode": "Indexed",
            "completions": args.nodes,
            "parallelism": args.nodes,
            "backoffLimitPerIndex": t.backoff_limit_per_index,
            # DDP cannot finish without every rank: one index out of retries ends the Job.
            "maxFailedIndexes": 0,
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER[Launcher.INDEXED_JOB],
                            "operator": "In",
                            "values": sorted(launch.FATAL_EXIT_CODES),
                        },
                    },
                ]
            },
            "template": pod_template(job, args),
        },
    }


def pytorchjob_manifest(job: str, args: TrainingJobArgs) -> dict[str, Any]:
    t = args.training
    template = pod_template(job, args)

    def replicas(n: int) -> dict[str, Any]:
        # ExitCode: retry on signals/infrastructure codes (128+), fail on the program's own 1-127.
        return {"replicas": n, "restartPolicy": "ExitCode", "template": template}

    specs = {"Master": replicas(1)}
    if t.nodes > 1:
        specs["Worker"] = replicas(t.nodes - 1)
    spec: dict[str, Any] = {
        "runPolicy": {"backoffLimit": t.backoff_limit_per_index * t.nodes, "cleanPodPolicy": "None",
                      **({"suspend": True} if args.queue else {})},
        "nprocPerNode": str(t.gpus_per_node),
        "pytorchReplicaSpecs": specs,
    }
    if t.elastic.enabled:
        spec["elasticPolicy"] = {
            "minReplicas": t.elastic.min_nodes,
            "maxReplicas": t.nodes,
            "rdzvBackend": "c10d",
            "maxRestarts": t.max_restarts,
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": job,
            "namespace": TRAINING_NAMESPACE,
            "labels": _job_labels(job, args),
            "annotations": dict(SKIP_AWAIT),  # custom resources are not awaited; say so anyway
        },
        "spec": spec,
    }


class TrainingOperator(pulumi.ComponentResource):
    """The Kubeflow training operator v1 (pinned tag), from its standalone kustomize overlay.

    Applied server-side (the provider's default), as upstream's install does: the CRDs are too
    large for client-side apply's last-applied annotation. Children are awaited (the operator
    Deployment must be ready: its webhook admits PyTorchJobs). Upstream's Deployment tolerates no
    taint, and on lab every node is tainted: a `transforms` option (the kustomize v2 Directory is a
    provider-side component, which only `transforms`, not `transformations`, reach) makes it a
    cluster add-on (`as_cluster_addon`).
    """

    def __init__(self, name: str, charts: ChartSource | None = None, opts: pulumi.ResourceOptions | None = None):
        """`charts`: gpu-cluster:chartsDir, where the overlay comes from (None: its URL)."""
        super().__init__("gpucluster:training:Operator", name, None, opts)
        self.directory = k8s.kustomize.v2.Directory(
            f"{name}-manifests",
            directory=(charts or ChartSource()).manifest(TRAINING_OPERATOR_OVERLAY),
            opts=pulumi.ResourceOptions(parent=self, transforms=[tolerate_control_plane]),
        )
        self.register_outputs({"version": versions.TRAINING_OPERATOR_VERSION, "image": versions.TRAINING_OPERATOR_IMAGE})


class TrainingJob(pulumi.ComponentResource):
    job: pulumi.CustomResource

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:training:Job", name, None, opts)
        t = args.training
        if t.image is None:
            raise ValueError("TrainingJob needs training.image")
        child = pulumi.ResourceOptions(parent=self)
        peers = job_peers(name)
        policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-peers", metadata=peers["metadata"], spec=peers["spec"], opts=child
        )
        depends: list[pulumi.Resource] = [policy, *(args.claim.ready if args.claim is not None else []),
                                          *(args.data_bucket.ready if args.data_bucket is not None else ())]
        # The job's name is fixed (pods are addressed by it): replace by deleting first.
        job_opts = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
        if t.launcher is Launcher.INDEXED_JOB:
            svc = headless_service_manifest(name)
            service = k8s.core.v1.Service(
                f"{name}-hosts", metadata=svc["metadata"], spec=svc["spec"], opts=child
            )
            manifest = indexed_job_manifest(name, args)
            timeouts = None
            if args.await_minutes:
                timeouts = pulumi.CustomTimeouts(create=f"{args.await_minutes}m", update=f"{args.await_minutes}m")
            self.job = k8s.batch.v1.Job(
                name,
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions.merge(
                    job_opts, pulumi.ResourceOptions(depends_on=[service, *depends], custom_timeouts=timeouts)
                ),
            )
        else:
            manifest = pytorchjob_manifest(name, args)
            self.job = k8s.apiextensions.CustomResource(
                name,
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions.merge(job_opts, pulumi.ResourceOptions(depends_on=depends)),
            )
        self.register_outputs({
            "job": f"{TRAINING_NAMESPACE}/{name}",
            "launcher": t.launcher.value,
            "image": t.image,
            "awaited": bool(args.await_minutes) and t.launcher is Launcher.INDEXED_JOB,
        })
