"""`queues`: Kueue's teams, quotas and GPU flavors, shared by every platform.

With `enabled`, Kueue is installed and every job the program runs goes through its own queue
`gpu-cluster` (components/queues/). Each team gets a namespace, a LocalQueue there and a
ClusterQueue in one cohort with a nominal GPU/CPU/memory quota and a borrowing limit.

Flavors (one ResourceFlavor per GPU kind) are derived, never configured: lab one per
hosts[].gpuModel (one `gpu` without models), dev one, `gpu`, on the nodes labelled
nvidia.com/gpu.present=true; gke one per accelerator type of gke.gpuPools, on GKE's
cloud.google.com/gke-accelerator label, and one per flexStart pool (of its accelerator type). A
team's `gpus` is its nominal quota in every GPU flavor, or a mapping GPU model (gke: accelerator
type) -> count in every flavor of that model (capped at each). Counts (flavor sizes, quotas,
borrowing limits) are in units of the GPU resource the ClusterQueues cover, as Kueue counts them:
MIG slices, time-sliced replicas (config/queue_units.py; MIG it cannot size is refused).
Topology levels and the level RDMA jobs require: config/queue_flavors.py.

Refused, naming the key: a team's GPUs beyond what the cluster has (lab: the sum of hosts[].gpus;
gke: each pool's maxNodes x zones x GPUs per node; dev: gpuNodeGpus, when every node's count is
declared), the teams' nominal GPUs together beyond it (a nominal quota is a guarantee), a team's
CPU or memory beyond every GPU flavor's nodes where their size is known (gke:
config/queue_resources.py), a team without a group or with a Kubernetes system group (system:*),
a namespace of the program's own or (gke) of GKE's (config/gcp/managed_namespaces.py), duplicate
names or namespaces, bad quantities.

Off by default: enabling it installs Kueue and queues the program's own jobs (they wait for
admission), which changes what `up` does on an existing stack; a stack opts in.
"""

from __future__ import annotations

import enum
from collections import Counter

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import DNS_LABEL, Model, check_quantity
from config.gke_provisioning import FlexStartRetry, is_queued_flavor
from config.inventory import Inventoried, TopologyLevel
from config.queue_flavors import Flavor as Flavor  # re-exported: components and tests read flavors from here
from config.queue_flavors import flavors as flavors  # re-exported too
from config.queue_flavors import level_problems, quota_problems
from config.queue_resources import resource_problems

# The program's own queue (LocalQueue in the training namespace, ClusterQueue of the same name).
PROGRAM_QUEUE = "gpu-cluster"

# What a queued job carries (Kueue's labels): its LocalQueue and its WorkloadPriorityClass.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# WorkloadPriorityClass of the program's own jobs (components/queues/objects.py makes it).
PROGRAM_PRIORITY_CLASS = "gpu-cluster-training"
# ... and of batch work: W&B Launch runs, and teams' jobs whose priority is batch.
BATCH_PRIORITY_CLASS = "gpu-cluster-batch"

# Namespaces the program (or Kubernetes, or an add-on it installs) owns: a team may not take one.
RESERVED_NAMESPACES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", "training", "gpu-health",
    "monitoring", "gpu-system", "gpu-operator", "gpu-cluster-system", "wandb-launch", "kubeflow",
    "tigera-operator", "calico-system", "calico-apiserver", "kube-flannel",
})


# Kubernetes reserves the "system:" prefix for its own users and groups (RBAC docs, "Default roles
# and role bindings"; "Authenticating": every authenticated request is in system:authenticated,
# every anonymous one in system:unauthenticated, every service account in system:serviceaccounts and
# system:serviceaccounts:<namespace>; system:masters bypasses RBAC): a team's group is never one.
SYSTEM_GROUP_PREFIX = "system:"
SYSTEM_GROUPS = ("system:authenticated (every signed-in user), system:unauthenticated (anyone), "
                 "system:serviceaccounts (every pod's service account), system:masters (cluster admins)")


class QueuePriority(enum.StrEnum):
    TRAINING = "training"
    BATCH = "batch"


class Team(Model):
    """One team: its namespace, group and ClusterQueue's quotas."""

    name: str = Field(description="The team's name: its ClusterQueue and LocalQueue (RFC 1123 label).")
    namespace: str = Field(description="The team's namespace, created with the queue (RFC 1123 label).")
    group: str | None = Field(default=None, description="The identity provider's group whose members submit the "
                                                        "team's jobs (bound to a Role in the namespace only); not "
                                                        "a Kubernetes system group (system:*).")
    gpus: int | dict[str, int] = Field(
        default=0, description="Nominal GPUs (the team's guarantee), in units of the GPU resource its pods request: "
                               "whole GPUs; with gpu.sharing time-slicing, replicas (GPUs x replicas); with MIG, "
                               "slices of gpu.sharing.migProfile (e.g. 7 per H100 80GB for 1g.10gb); on gke, GKE's "
                               "own sharing counted alike. A number, in every GPU flavor; or a mapping GPU model -> "
                               "count (lab: hosts[].gpuModel; gke: the accelerator type), in every flavor of the "
                               "models it names (on demand and flex-start alike), capped at each.")
    # Required on every platform: the ClusterQueue covers cpu and memory because the jobs' pods request
    # them, and Kueue (quotaCheckStrategy BlockUndeclared, its default) never admits a request it does not cover.
    cpu: str = Field(description="Nominal CPU quota in every GPU flavor, a Kubernetes quantity above zero (e.g. "
                                 "'64'); required everywhere, as Kueue admits no job whose pods request CPU its "
                                 "queue does not cover; gke: at most what the largest flavor's nodes leave to pods.")
    memory: str = Field(description="Nominal memory quota in every GPU flavor, a Kubernetes quantity above zero "
                                    "(e.g. '512Gi'); required everywhere, like cpu; gke: at most what the largest "
                                    "flavor's nodes leave to pods.")
    borrowing_limit_gpus: int = Field(
        default=0, ge=0, description="GPUs the team may borrow beyond its nominal quota from the cohort's unused quota "
                                     "(in the units of `gpus`: replicas or MIG slices where GPUs are shared)."
    )
    priority: QueuePriority = Field(
        default=QueuePriority.BATCH,
        description="The team's WorkloadPriorityClass, named in its examples and outputs, and the highest its jobs "
                    "may name (the team admission policy refuses a higher one and any pod priorityClassName): "
                    "training (above batch: may name training or batch) or batch (batch only).",
    )

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: int | dict[str, int]) -> int | dict[str, int]:
        if any(n < 0 for n in (v.values() if isinstance(v, dict) else [v])):
            raise ValueError("must be 0 or more (a mapping: each count)")
        return v

    _quantities = field_validator("cpu", "memory", mode="before")(classmethod(lambda cls, v: check_quantity(v)))

    @field_validator("group")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        if v is not None and v.startswith(SYSTEM_GROUP_PREFIX):
            raise ValueError(f"{v!r} is a Kubernetes system group ({SYSTEM_GROUP_PREFIX!r} names are Kubernetes' own: "
                             f"{SYSTEM_GROUPS}): binding it hands every user or pod in it the team's right to create "
                             "Jobs, spend its GPU quota and, with wandb.teamQueues, read the W&B key; name the "
                             "identity provider's group of the team's members, e.g. 'gpu-vision'")
        return v

    @field_validator("name", "namespace")
    @classmethod
    def _label(cls, v: str) -> str:
        if not DNS_LABEL.fullmatch(v):
            raise ValueError("must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63 characters)")
        return v


class QueuesConfig(Model):
    enabled: bool = Field(default=False, description="Install Kueue and queue every job through it.")
    teams: tuple[Team, ...] = Field(default=(), description="The teams sharing the GPUs.")
    cohort: str = Field(default=PROGRAM_QUEUE, description="The cohort every ClusterQueue borrows within.")
    wait_for_pods_ready_timeout_minutes: int = Field(
        default=10, ge=1, le=1440,
        description="All-or-nothing admission: a workload whose pods are not all running this long after "
                    "admission is evicted and requeued with backoff (Kueue waitForPodsReady).",
    )
    block_admission: bool = Field(
        default=False,
        description="Kueue's waitForPodsReady.blockAdmission: admit nothing, in any team's queue, while an admitted "
                    "job's pods are not all running (up to waitForPodsReadyTimeoutMinutes), so two jobs are never "
                    "half placed at once. Off: one team's slow-starting job would hold every team's admissions; "
                    "turn it on where capacity often falls below quota (docs/queues.md, Why it waits).",
    )
    pending_alert_minutes: int = Field(
        default=60, ge=5, le=10080,
        description="With monitoring: alert when a ClusterQueue has had workloads pending this long and "
                    "admitted none of them (KueueWorkloadPendingTooLong; also how long Kueue may hold an "
                    "inadmissible workload before KueueWorkloadInadmissible).",
    )
    flex_start_retry: FlexStartRetry | None = Field(
        default=None,
        description="gke flexStart pools: how Kueue retries a job whose ProvisioningRequest fails before it "
                    "deactivates it (backoffLimitCount, backoffBaseSeconds, backoffMaxSeconds; default Kueue's "
                    "3, 60, 1800). Refused without a flexStart pool.",
    )
    rdma_topology_level: TopologyLevel | None = Field(
        default=None,
        description="The topology level (block, rack or host; gke: Google's block, sub-block or host) whose one "
                    "domain must hold every pod of a job over RDMA (lab) or across nodes (gke). Default: rack "
                    "where hosts name racks, else block; none on gke and dev.",
    )

    @field_validator("cohort")
    @classmethod
    def _cohort(cls, v: str) -> str:
        if not DNS_LABEL.fullmatch(v):
            raise ValueError("must be a lowercase RFC 1123 label")
        return v


# Pod template annotation (Kueue docs, "Topology Aware Scheduling"): every pod of the pod set in one
# domain of that level.
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def queues_problems(q: QueuesConfig, stack: Inventoried) -> Problems:
    """The teams against each other, the program's namespaces and the cluster's GPUs."""
    if not q.enabled:
        return ([("queues.teams", "is set but queues.enabled is false")] if q.teams else []) + level_problems(q, stack)
    problems: Problems = []
    for field, label in (("name", "name"), ("namespace", "namespace")):
        seen = Counter(getattr(t, field) for t in q.teams)
        for i, t in enumerate(q.teams):
            if seen[getattr(t, field)] > 1:
                problems.append((f"queues.teams[{i}].{field}", f"{label} {getattr(t, field)!r} is used by another team"))
    for i, t in enumerate(q.teams):
        key = f"queues.teams[{i}]"
        if t.name == PROGRAM_QUEUE:
            problems.append((f"{key}.name", f"{PROGRAM_QUEUE!r} is the program's own queue"))
        if t.namespace in RESERVED_NAMESPACES:
            problems.append((f"{key}.namespace", f"{t.namespace!r} is the program's own (or Kubernetes'); "
                                                 f"not one of {', '.join(sorted(RESERVED_NAMESPACES))}"))
        if not t.group:
            problems.append((f"{key}.group", "is required: the group whose members may submit the team's jobs"))
    problems += _retry_problems(q, stack)
    # A flavor of unknown units is not sized: its quotas are not judged.
    units = list(dict.fromkeys(g.unit_problem for g in stack.inventory.groups if g.unit_problem is not None))
    return (problems + units + (quota_problems(q.teams, flavors(stack)) if not units else [])
            + resource_problems(q.teams, stack.inventory) + level_problems(q, stack))


def _retry_problems(q: QueuesConfig, stack: Inventoried) -> Problems:
    """queues.flexStartRetry: only with a flexStart pool (it configures nothing else), max >= base."""
    retry = q.flex_start_retry
    if retry is None:
        return []
    if not any(is_queued_flavor(f.node_labels) for f in flavors(stack)):
        return [("queues.flexStartRetry", "is set but no gke.gpuPools[] has provisioning flexStart: it configures "
                                          "only Kueue's ProvisioningRequests of flex-start pools")]
    if retry.backoff_max_seconds < retry.backoff_base_seconds:
        return [("queues.flexStartRetry.backoffMaxSeconds",
                 f"{retry.backoff_max_seconds} is below backoffBaseSeconds {retry.backoff_base_seconds}: the "
                 "longest delay must be at least the first")]
    return []
