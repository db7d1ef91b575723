"""NcclPairChecks: the two-node NCCL check on idle GPU nodes (gpuHealth.ncclCheck, config/health.py).

What runs: per pair of GPU nodes, a CronJob `nccl-pair-<8 hex>` in the training namespace whose Job
is the NCCL acceptance sweep (trainer.allreduce_bench, the same arguments as acceptance: bus
bandwidth held to network.linkGbps, RDMA transport required when declared) as an Indexed Job of two
pods under torchrun, one pod on each node of the pair, built by components/training/job.py like the
acceptance Job (RDMA network, NCCL env and the job's NetworkPolicy included). The GPU health
service reads each finished pod's exit code and writes the verdict onto the pod's node
(workloads/gpuhealth/ncclpair.py: annotation gpu-cluster.io/nccl-pair-<hex> with result, peer,
exit code, time and expiry): a node whose checks fail with two different peers, each of which
passes elsewhere, is cordoned; a failure that cannot name its node (one pair) is reported and
changes nothing. The pods carry what that needs (label gpu-cluster.io/check=nccl-pair, annotations
with the check's name, its two nodes and the result's validity).

Which pairs: the GPU nodes known by name, grouped by GPU count (a pod asks for every GPU of its
node, and the two pods of a Job have one shape), each group of two or more in a ring in name order,
(n0,n1), (n1,n2), ... (n_last,n0), so every node is checked with two different peers when its group
has three or more. The ring's pairs run in rounds of disjoint pairs (components: `rounds`): two
checks never wait for each other's GPUs (with all of them at once, three pods of three Jobs could
each hold one node and wait for the next, until their deadline). Round r starts at
ncclCheck.schedule plus r x (timeoutMinutes + 2), after round r-1's Jobs hit their deadline (a Job
starts at most a minute late: startingDeadlineSeconds 60). Each pod waits at the rendezvous as long as
its Job may run (join_timeout, read_timeout), so a peer that starts later is still met.

Idle nodes only: each pod asks for every GPU of its node, so the scheduler starts it only where no
GPU pod runs, and its PriorityClass (components/gpu_health.py IDLE_PRIORITY_CLASS, below zero,
never preempting) lets any training pod that needs the GPUs preempt it; a preempted check ends its
Job at once (podFailurePolicy: a disruption fails the Job) and its pods exit 143: no verdict. The
pods tolerate the GPU health taint with the NCCL reason only (the service taints such a node and
does not cordon it), so a node taken out for NCCL is checked again and returns after a passing pair
check; a node cordoned by an administrator or out for another reason is left alone.

The rendezvous: a CronJob's Jobs are named at run time (`<cronjob>-<minutes>`), so rank 0's address
is `$(JOB_NAME)-0.<service>` with JOB_NAME from the pod's batch.kubernetes.io/job-name label
(Kubernetes expands `$(VAR)` from env vars defined before it).

Rights: none. The pods mount no ServiceAccount token and call no API (the training namespace's
default-deny egress leaves the API server out; the service, which may list pods and patch nodes
already, records for them).

Not run: under MIG or time-slicing (the sweep runs one process per physical GPU), without two GPU
nodes of equal GPU count known by name (gke: the autoscaler's nodes come and go).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi

from components.gpu_health import IDLE_PRIORITY_CLASS, TAINT_KEY, typed_resource
from components.rdma_network import PodRdma
from components.storage_contract import TRAINING_NAMESPACE
from components.training import launch
from components.training.job import (
    TrainingJobArgs,
    headless_service_manifest,
    indexed_job_manifest,
    service_name,
)
from components.training.network_policy import job_peers
from config.health import NcclPairCheck as NcclPairCheckConfig
from config.scheduling_contract import GPU_RESOURCE, training_job_labels
from config.training import Launcher, TrainingConfig

# What workloads/gpuhealth/ncclpair.py reads (a test keeps them equal).
CHECK_PREFIX = "nccl-pair-"
CHECK_LABEL = {"gpu-cluster.io/check": "nccl-pair"}
POD_CHECK = "gpu-cluster.io/check"
POD_NODES = "gpu-cluster.io/nodes"
POD_VALID_HOURS = "gpu-cluster.io/valid-hours"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set on a Job's pods by the Job controller (1.27+)
# The service's taint value for a node it took out for NCCL (its reason, workloads/gpuhealth/service.py).
NCCL_TAINT_VALUE = "NcclPairFailed"


def rings(gpu_counts: dict[str, int]) -> list[list[str]]:
    """GPU nodes grouped by GPU count, each group of two or more in name order."""
    groups: dict[int, list[str]] = {}
    for node, gpus in gpu_counts.items():
        if gpus > 0:
            groups.setdefault(gpus, []).append(node)
    return [sorted(nodes) for _, nodes in sorted(groups.items()) if len(nodes) >= 2]


def rounds(ring: list[str]) -> list[list[tuple[str, str]]]:
    """The ring's pairs (n_i, n_i+1 mod n) in rounds where no node is in two pairs: one round for
    two nodes, two for an even ring (alternate edges), three for an odd one (the last edge alone)."""
    n = len(ring)
    if n < 2:
        return []
    if n == 2:
        return [[(ring[0], ring[1])]]
    edges = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0:n - 1:2], edges[1:n - 1:2], [edges[n - 1]]]


def check_name(pair: tuple[str, str]) -> str:
    """nccl-pair-<8 hex of the pair>: short enough that `<name>-<minutes>-<index>` is a hostname."""
    return CHECK_PREFIX + hashlib.sha256(",".join(pair).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class PairCheck:
    name: str
    pair: tuple[str, str]
    gpus: int  # per node
    round: int


def plan_checks(gpu_counts: dict[str, int]) -> list[PairCheck]:
    out = []
    for ring in rings(gpu_counts):
        gpus = gpu_counts[ring[0]]
        for index, pairs in enumerate(rounds(ring)):
            out += [PairCheck(check_name(p), p, gpus, index) for p in pairs]
    return out


@dataclass(frozen=True)
class NcclPairCheckArgs:
    check: NcclPairCheckConfig
    training: TrainingConfig  # image, resources, NCCL env: as the acceptance Job
    acceptance_args: tuple[str, ...]  # trainer.allreduce_bench's arguments (stacks/addons.acceptance_args)
    gpu_counts: dict[str, int]  # GPU node -> GPUs; empty: no check
    gpu_resource: str = GPU_RESOURCE
    rdma: PodRdma | None = None


def _job_args(c: PairCheck, args: NcclPairCheckArgs) -> TrainingJobArgs:
    training = args.training.model_copy(update={
        "launcher": Launcher.INDEXED_JOB, "nodes": 2, "gpus_per_node": c.gpus,
        "backoff_limit_per_index": 0,  # a measurement: the next schedule is the retry
    })
    return TrainingJobArgs(training=training, claim=None, module=launch.BENCH_MODULE,
                           module_args=args.acceptance_args, gpu_resource=args.gpu_resource, rdma=args.rdma,
                           # the peer may start later, once its node's GPUs are free: wait as long as the Job may run
                           rdzv_timeout_seconds=args.check.timeout_minutes * 60)


def _pair_pod(template: dict[str, Any], c: PairCheck, valid_hours: int) -> dict[str, Any]:
    """The acceptance pod, pinned to the pair, idle-priority, without API access, and labelled for
    the service to find and read."""
    pod = template["spec"]
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # One term per node of the pair (terms are ORed): the API server takes a field selector
    # (matchFields) with exactly one value for In (ValidateNodeFieldSelectorRequirement); both
    # names in one In was refused at create.
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*term.get("matchFields", []),
                                 {"key": "metadata.name", "operator": "In", "values": [node]}]}
        for term in required["nodeSelectorTerms"] for node in c.pair]
    # The service's taint for this check's own reason only (it taints, and does not cordon, a node
    # it takes out for NCCL), so a failing node is checked again; never a node cordoned by an
    # administrator or taken out for another reason (the service would evict the check there).
    pod["tolerations"] = [*pod["tolerations"],
                          {"key": TAINT_KEY, "operator": "Equal", "value": NCCL_TAINT_VALUE, "effect": "NoSchedule"}]
    pod["priorityClassName"] = IDLE_PRIORITY_CLASS
    pod["automountServiceAccountToken"] = False
    (container,) = pod["containers"]
    env = [e for e in container["env"] if e["name"] != "MASTER_ADDR"]
    container["env"] = [
        {"name": "JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}}},
        {"name": "MASTER_ADDR", "value": f"$(JOB_NAME)-0.{service_name(c.name)}"},
        *env,
    ]
    meta = template["metadata"]
    meta["labels"] = {**meta["labels"], **CHECK_LABEL}
    meta["annotations"] = {**meta.get("annotations", {}), POD_CHECK: c.name, POD_NODES: ",".join(c.pair),
                           POD_VALID_HOURS: str(valid_hours)}
    return template


def cronjob(c: PairCheck, args: NcclPairCheckArgs) -> dict[str, Any]:
    job = indexed_job_manifest(c.name, _job_args(c, args))
    spec = job["spec"]
    spec["template"] = _pair_pod(spec["template"], c, args.check.valid_hours)
    # A preempted or evicted pod ends the run (its peer would wait out the deadline otherwise).
    # Nothing else ends it early: both pods reach the verdict on their own, and a Job failed on the
    # first pod's verdict would stop the second before it exits with its own.
    spec["podFailurePolicy"]["rules"] = [{**spec["podFailurePolicy"]["rules"][0], "action": "FailJob"}]
    spec["maxFailedIndexes"] = spec["completions"]
    spec["activeDeadlineSeconds"] = args.check.timeout_minutes * 60  # waiting for idle GPUs counts
    spec["ttlSecondsAfterFinished"] = 7 * 86400
    labels = {**training_job_labels(c.name), **CHECK_LABEL}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": c.name, "namespace": TRAINING_NAMESPACE, "labels": labels,
                     "annotations": {"gpu-cluster.io/nodes": ",".join(c.pair), "gpu-cluster.io/round": str(c.round)}},
        "spec": {
            "schedule": args.check.round_schedule(c.round),
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            # A start later than this is skipped: the next round starts timeoutMinutes + 2 after this one.
            "startingDeadlineSeconds": 60,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def manifests(args: NcclPairCheckArgs) -> list[dict[str, Any]]:
    """Every object, in the order they are created; none without a pair."""
    objs: list[dict[str, Any]] = []
    for c in plan_checks(args.gpu_counts):
        objs += [headless_service_manifest(c.name), job_peers(c.name), cronjob(c, args)]
    return objs


class NcclPairChecks(pulumi.ComponentResource):
    """Per pair of GPU nodes a headless Service, NetworkPolicy and CronJob."""

    def __init__(self, name: str, args: NcclPairCheckArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:health:NcclPairCheck", name, None, opts)
        if args.training.image is None:
            raise ValueError("NcclPairChecks needs training.image (the acceptance sweep's image)")
        checks = plan_checks(args.gpu_counts)
        created: list[pulumi.Resource] = []
        for body in manifests(args):
            kind = body["kind"]
            after = created[-2:] if kind == "CronJob" else []  # its Service and NetworkPolicy
            created.append(typed_resource(f"{name}-{kind.lower()}-{body['metadata']['name']}", body,
                                     pulumi.ResourceOptions(parent=self, depends_on=after)))
        self.checks = checks
        self.register_outputs({"checks": {c.name: list(c.pair) for c in checks}})
