"""Queues (queues.enabled): Kueue (components/queues/kueue.py), its flavors, queues and priority
classes, and each team's namespace (components/queues/objects.py has the manifests and why).

Order: the Kueue release first (Helm waits for its Deployment, so its webhooks answer); every Kueue
object depends on it (its CRDs are templates of the chart, installed with the release); a team's
objects wait for its Namespace. A team's group gets its rights (the RoleBinding) only once the
admission policy refusing its Jobs outside its own LocalQueue is bound (components/queues/team_admission.py).
Whoever submits a queued job makes it depend on `ready` (the
release and the queue): Kueue's webhook then admits the Job and its queue exists.

With shared storage, each team's namespace gets its own claim `shared-data` on it
(components/queues/team_storage.py), which its jobs mount as the program's jobs do; on a static NFS
export a Job makes the teams' directories first (components/queues/team_directories.py). GKE's queued
provisioning (a flexStart pool): components/queues/provisioning.py.

Does not manage: the teams' groups (the cluster's identity provider), the nodes' topology labels
(lab: stacks/lab.py's NodePatch; gke: Google's).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import _utilities as k8s_utilities

from components import versions
from components.manifest_resource import manifest_resource
from components.namespaces import pod_security_namespace
from components.queues import kueue, objects, provisioning, team_admission, team_directories, team_storage
from components.storage_contract import TRAINING_NAMESPACE, TeamVolumes
from components.training.wandb_launch import TeamQueue
from config.chart_source import ChartSource
from config.queues import PROGRAM_QUEUE, Flavor, QueuesConfig, Team


@dataclass(frozen=True)
class QueuesArgs:
    queues: QueuesConfig
    flavors: tuple[Flavor, ...]
    gpu_resource: str
    # What the program's own largest job counts against its queue (components/queues/requests.py).
    program_need: dict[str, Decimal]
    metrics: bool  # monitoring is on: the chart's ServiceMonitor (its CRD comes with monitoring)
    training_namespace: pulumi.Resource | None  # None: no program job runs, no program LocalQueue
    team_volumes: TeamVolumes | None = None  # the shared storage, as a team gets it (None: none)
    shared_claim: tuple[pulumi.Resource, ...] = ()  # the training claim (the export's root) and what it needs
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the chart comes from


# With no program job the program's queue asks for no CPU or memory of its own: it only lends GPUs.
NO_PROGRAM_JOB = {"cpu": Decimal(0), "memory": Decimal(0)}


def _custom(name: str, body: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A Kueue object. CustomResource takes apiVersion, kind, metadata and spec only; a kind with other
    top-level fields (WorkloadPriorityClass: value, description) is registered under the same type
    token with its whole body, as the provider takes any custom resource's inputs as the object."""
    if set(body) <= {"apiVersion", "kind", "metadata", "spec"}:
        return k8s.apiextensions.CustomResource(name, api_version=body["apiVersion"], kind=body["kind"],
                                                metadata=body["metadata"], spec=body.get("spec"), opts=opts)
    version = pulumi.ResourceOptions(version=k8s_utilities.get_version())
    return pulumi.CustomResource(f"kubernetes:{body['apiVersion']}:{body['kind']}", name, dict(body),
                                 opts=pulumi.ResourceOptions.merge(opts, version))


class Queues(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    ready: list[pulumi.Resource]  # what a queued job of the program waits for

    def __init__(self, name: str, args: QueuesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:queues:Queues", name, None, opts)
        q = args.queues
        # restricted: the chart's manager runs as non-root, no capabilities, RuntimeDefault seccomp.
        ns = pod_security_namespace(f"{name}-kueue-ns", kueue.NAMESPACE, "restricted", pulumi.ResourceOptions(parent=self))
        managed = [t.namespace for t in q.teams] + ([TRAINING_NAMESPACE] if args.training_namespace else [])
        self.release = k8s.helm.v3.Release(
            f"{name}-kueue",
            name=kueue.RELEASE_NAME,
            **args.charts.args(versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION),
            namespace=kueue.NAMESPACE,
            values=kueue.kueue_values(q.wait_for_pods_ready_timeout_minutes, managed, args.metrics, q.block_admission),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
        )
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        # One Topology however many flavors name it (lab's GPU models, gke's accelerators share one).
        topologies = {t[0]: _custom(f"{name}-topology-{t[0]}", objects.topology(*t), after_kueue)
                      for t in dict.fromkeys(f.topology for f in args.flavors if f.topology is not None)}
        for f in args.flavors:
            # A flavor naming a Topology that does not exist leaves its ClusterQueues inactive.
            _custom(f"{name}-flavor-{f.name}", provisioning.tolerating_queued_nodes(objects.resource_flavor(f)), pulumi.ResourceOptions(
                parent=self, depends_on=[self.release, *([topologies[f.topology[0]]] if f.topology else [])]))
        for body in objects.priority_classes():
            _custom(f"{name}-priority-{body['metadata']['name']}", body, after_kueue)
        for body in provisioning.provisioning_objects(args.flavors, args.gpu_resource, q.flex_start_retry):
            _custom(f"{name}-{body['kind'].lower()}-{body['metadata']['name']}", body, after_kueue)
        self.team_outputs: dict[str, dict[str, str]] = {}
        self._teams = q.teams
        self.team_namespaces: dict[str, pulumi.Resource] = {}  # team -> its Namespace
        self.team_claims: dict[str, pulumi.Resource] = {}  # team -> its shared claim
        self.team_directories: pulumi.Resource | None = None  # the Job making the teams' directories
        if args.team_volumes is not None and q.teams and team_storage.needs_directories(args.team_volumes):
            self.team_directories = team_directories.team_directories_job(
                f"{name}-team-directories", [t.namespace for t in q.teams], [self.release, *args.shared_claim],
                pulumi.ResourceOptions(parent=self))
        self.team_admission: list[pulumi.Resource] = []  # the policy and its binding, before any team submits
        if q.teams:
            policy = _custom(f"{name}-team-queue-policy", team_admission.queue_policy(), pulumi.ResourceOptions(parent=self))
            self.team_admission = [policy, _custom(
                f"{name}-team-queue-policy-binding", team_admission.queue_policy_binding([t.namespace for t in q.teams]),
                pulumi.ResourceOptions(parent=self, depends_on=[policy]))]
        for t in q.teams:
            self._team(name, q, t, args)
        self.ready: list[pulumi.Resource] = [self.release]
        # The program's ClusterQueue whenever queues are on: it holds the GPUs the teams' nominal quotas
        # leave, so the cohort holds every GPU and a team may borrow them (without it they belong to no
        # queue). Its LocalQueue only where a program job runs.
        need = args.program_need if args.training_namespace is not None else NO_PROGRAM_JOB
        cq = _custom(f"{name}-cq-{PROGRAM_QUEUE}", provisioning.with_admission_check(objects.program_cluster_queue(
            q, TRAINING_NAMESPACE, args.gpu_resource, args.flavors, need), args.flavors), after_kueue)
        if args.training_namespace is not None:
            lq = _custom(f"{name}-lq-{PROGRAM_QUEUE}", objects.local_queue(PROGRAM_QUEUE, TRAINING_NAMESPACE),
                         pulumi.ResourceOptions(parent=self, depends_on=[self.release, cq, args.training_namespace]))
            self.ready += [cq, lq]
        self.register_outputs({"teams": self.team_outputs})

    def wandb_team_queues(self) -> tuple[TeamQueue, ...]:
        """Each team's W&B Launch queue (components/training/wandb_launch.py): its LocalQueue, its
        priority class, and what its runs need first (the namespace, the team's claim)."""
        return tuple(TeamQueue(t.name, t.namespace, t.name, objects.PRIORITY_CLASS[t.priority],
                               (self.team_namespaces[t.name], *self.team_admission, *([self.team_claims[t.name]] if t.name in self.team_claims else [])))
                     for t in self._teams)

    def _team(self, name: str, q: QueuesConfig, t: Team, args: QueuesArgs) -> None:
        prefix = f"{name}-team-{t.name}"
        # Its Pod Security level, and the LocalQueue the admission policy holds its Jobs to.
        ns = k8s.core.v1.Namespace(f"{prefix}-ns", metadata=k8s.meta.v1.ObjectMetaArgs(name=t.namespace, labels={
            "pod-security.kubernetes.io/enforce": objects.TEAM_POD_SECURITY, **team_admission.team_namespace_labels(t.name, t.priority)}),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        self.team_namespaces[t.name] = ns
        for policy in objects.team_network_policies(t.namespace):
            manifest_resource(f"{prefix}-{policy['metadata']['name']}", policy, in_ns)
        assert t.group  # the config model refuses a team without one
        role, binding = objects.team_role(t.namespace), objects.team_role_binding(t.namespace, t.group)
        k8s.rbac.v1.Role(f"{prefix}-role", metadata=role["metadata"], rules=role["rules"], opts=in_ns)
        k8s.rbac.v1.RoleBinding(f"{prefix}-binding", metadata=binding["metadata"], role_ref=binding["roleRef"],
                                subjects=binding["subjects"],
                                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, *self.team_admission]))
        cq = _custom(f"{prefix}-cq", provisioning.with_admission_check(
                         objects.team_cluster_queue(q, t, args.gpu_resource, args.flavors), args.flavors),
                     pulumi.ResourceOptions(parent=self, depends_on=[self.release]))
        _custom(f"{prefix}-lq", objects.local_queue(t.name, t.namespace),
                pulumi.ResourceOptions(parent=self, depends_on=[self.release, ns, cq]))
        self.team_outputs[t.name] = {
            "namespace": t.namespace,
            "localQueue": t.name,
            "priorityClass": objects.PRIORITY_CLASS[t.priority],
            "workloads": f"kubectl -n {t.namespace} get workloads",
        }
        if args.team_volumes is not None:
            self.team_claims[t.name] = team_storage.team_claim(prefix, args.team_volumes, t.namespace, in_ns,
                                                               self.team_directories)
            self.team_outputs[t.name]["storage"] = team_storage.where(args.team_volumes, t.namespace)
