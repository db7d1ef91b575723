"""WandbLaunch: W&B Launch on this cluster (wandb.enabled): W&B's launch agent polls one queue and
runs each item as a Kubernetes Job in the training namespace, on the GPU nodes, like the
training job.

* The agent: W&B's launch-agent chart at a pinned version (components/versions.py), release
  `wandb-launch` in its own namespace `wandb-launch` (Pod Security `restricted`: the chart's pod
  runs as a non-root user with every capability dropped). It is a cluster add-on: it tolerates
  the control-plane taint and prefers a node without GPUs (config/scheduling_contract.py),
  and tolerates nothing else. The chart's PodDisruptionBudget is left at minAvailable 0: with
  one replica and minAvailable 1 no node running the agent could ever be drained (lab upgrades
  drain nodes); the agent keeps no state, the queue does.
* The API key (secret config gpu-cluster:wandbApiKey) becomes the Secret the chart's Deployment
  reads (`agent.useExternalWandbSecret`, name `wandb-api-key-<release>`, key `password`), made
  here from the Pulumi secret: it never enters the Helm values, so neither the release's inputs,
  the offline plan nor the outputs hold it. The same Secret is made in the training namespace,
  as the chart itself would without an external secret: the agent's Kubernetes runner hands
  runs the key through `wandb-api-key-<release>` in the runs' namespace and refuses one there
  whose key differs, so Pulumi keeps both copies and deletes both on destroy. After rotating the
  key, restart the agent (`kubectl -n wandb-launch rollout restart deploy/launch-agent-wandb-launch`):
  its env is read once.
* RBAC: the chart has no switch for it. It binds its ClusterRole `wandb-job-creator-<release>`
  (pods, pod logs, secrets and Jobs) only through RoleBindings, in `additionalTargetNamespaces`
  and its own namespace, never cluster-wide: `additionalTargetNamespaces` is the training
  namespace alone (not the chart's default and wandb). Its own namespace it always adds, and
  its Role there grants Jobs as well; a ResourceQuota there allows no Job and only the agent's
  one pod, so the agent can run a Job in the training namespace only. (The noop builder needs no
  build Jobs; kaniko would, and is not offered.)
* The queue: the Job each run becomes is this program's training pod (components/training/job.py
  pod_template: the training image, training.gpusPerNode of the GPU resource, training's cpu and
  memory requests and limits, the GPU tolerations and node affinity, /dev/shm, the shared claim's
  mounts), one pod, `backoffLimit: 0` as in W&B's own example (a failed run is resubmitted from
  W&B, not retried behind its back), in the training namespace. Left out is what the agent owns
  and refuses from a queue (wandb.sdk.launch.utils.validate_kubernetes_resource_args): the
  securityContext (the agent sets its own restricted one: no privilege escalation, all
  capabilities dropped, RuntimeDefault seccomp; hence no RDMA's IPC_LOCK: Launch runs use NCCL
  over sockets), and what only the multi-node launcher needs (torchrun's command, rendezvous
  port, headless-Service subdomain, one-pod-per-node anti-affinity). The W&B job supplies the
  entrypoint, and an image job its own image in place of training.image. XDG_CACHE_HOME points at
  the shared cache, so Hugging Face and W&B artifact downloads land there once (seed 003's
  /root/.cache on NFS). Runs are labelled with the training-job label `wandb-${run_id}` (the
  agent fills in the run id), so the GPU dashboards show them by run. A NetworkPolicy lets runs
  reach W&B (TCP to the API's port, and 443 for artifact storage) past the namespace's default
  deny.

Why the queue config is printed, not created (stack output `wandbQueueConfig`, and
`wandb/queue-config.{yaml,json}` in `python -m render`'s output): a W&B queue belongs to the
entity, not to this cluster. Users create it in the W&B UI (Launch -> Create queue, type
Kubernetes, paste the config), as W&B's docs and seed 003 do, or with the `wandb` CLI; it keeps
its run history and may be shared with other agents. Creating it at `pulumi up` through a
dynamic provider would make `pulumi destroy` delete a team's queue and its history, need W&B's
API reachable (and the key in the provider's serialized state) on every preview, and leave the
offline render nothing to check. The config is plain, validated data instead: the tests pass it
through the wandb package's own validator and kubernetes-validate.

Teams (queues.teams, with queues.enabled), only those named in wandb.teamQueues (opt-in, none by
default): such a team gets a W&B queue of its own, `<wandb.queue>-<team>` (team_queue_name), which
the same agent polls. Its config is the same run
Job in the team's namespace, labelled with the team's LocalQueue and priority class and created
suspended, so a team's runs count against the team's quota and wait for Kueue like its other jobs;
its pods mount the team's own claim (same name, components/queues/team_storage.py). The agent's
RoleBindings reach the team namespaces (additionalTargetNamespaces), the API key's runs copy and the
egress policy are made there too. Who can read the key there: every member of the team. Its Role grants
no Secrets, but it lets them create Jobs, and a Job's pod may mount or env-reference any Secret of
its namespace (Kubernetes checks the pod's references against the namespace, not against the
creator's rights), so a member can print it; and every run's own code gets it as WANDB_API_KEY. That
is W&B Launch's design: the agent hands each run its own key (wandb's kubernetes_runner
ensure_api_key_secret writes `wandb-api-key-<release>` in the run's namespace and refuses, or
rewrites, one holding a different key), so a team cannot bring a key of its own to a shared agent.
Hence opt-in: naming a team in wandb.teamQueues trusts its members with the cluster's key; a team
that is not named gets no queue, no key Secret and no agent RoleBinding in its namespace. Stack output `wandbTeamQueues`: each team's queue name and config, to paste as above.

Does not manage: the W&B queues themselves, image builds (builder noop), sweeps schedulers beyond
the agent's default, W&B Server.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import versions
from components.namespaces import pod_security_namespace
from components.storage_contract import MOUNTS, TRAINING_NAMESPACE, SharedClaim
from components.training.job import TrainingJobArgs, pod_template
from config.chart_source import ChartSource
from config.queues import BATCH_PRIORITY_CLASS, PRIORITY_LABEL, QUEUE_LABEL
from config.scheduling_contract import GPU_RESOURCE, JOB_LABEL, addon_affinity, addon_tolerations
from config.training import Launcher, TrainingConfig
from config.wandb import WandbConfig

AGENT_NAMESPACE = "wandb-launch"
RELEASE_NAME = "wandb-launch"
# The chart's Deployment reads the key from this Secret (templates/deployment.yaml), and the
# agent's runner names the runs' copy the same way (WANDB_RELEASE_NAME).
API_KEY_SECRET = f"wandb-api-key-{RELEASE_NAME}"
API_KEY_FIELD = "password"
DEPLOYMENT = f"launch-agent-{RELEASE_NAME}"
QUOTA_NAME = "wandb-launch-agent-only"
EGRESS_POLICY = "wandb-launch-egress"
# On every run's pod (the queue config's pod template): the egress policy selects on it.
RUN_LABELS = {"app.kubernetes.io/part-of": "gpu-cluster-training", "gpu-cluster.io/launched-by": "wandb-launch"}
# The W&B run id, filled in by the agent (a macro of the queue config).
RUN_JOB_LABEL_VALUE = "wandb-${run_id}"
# What the trainer's env holds that a one-pod run keeps (the rest wires torchrun's rendezvous).
_KEPT_ENV_PREFIXES = ("NCCL_", "PYTHONUNBUFFERED")
# Artifact and object storage (W&B's or a cloud's signed URLs) is served on 443.
HTTPS_PORT = 443


@dataclass(frozen=True)
class WandbLaunchArgs:
    wandb: WandbConfig
    training: TrainingConfig
    claim: SharedClaim
    api_key: pulumi.Input[str]  # a Pulumi secret (config.StackSecrets.wandb_api_key)
    training_namespace: pulumi.Resource  # the Secret and policy there wait for it
    gpu_resource: str = GPU_RESOURCE
    # queues.enabled: the LocalQueue every run is submitted to (the program's, in the training namespace).
    queue: str | None = None
    teams: tuple[TeamQueue, ...] = ()  # queues.teams: a W&B queue per team
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the chart comes from


@dataclass(frozen=True)
class TeamQueue:
    """A team's W&B queue: its runs go to the team's LocalQueue in the team's namespace."""

    team: str
    namespace: str
    local_queue: str
    priority_class: str
    ready: tuple[pulumi.Resource, ...]  # the team's Namespace and shared claim


def team_queue_name(w: WandbConfig, team: str) -> str:
    return f"{w.queue}-{team}"


def launch_config(w: WandbConfig, teams: tuple[str, ...] = ()) -> str:
    """The agent's config file (wandb.sdk.launch.agent.config.AgentConfig), as the chart's
    `launchConfig` takes it: the queue, and each team's (`teams`: the teams' names)."""
    assert w.entity is not None and w.queue is not None  # the config model requires both with enabled
    return yaml.safe_dump({
        "entity": w.entity,
        "queues": [w.queue, *(team_queue_name(w, t) for t in teams)],
        "max_jobs": w.max_jobs,
        "builder": {"type": "noop"},  # runs use images as they are; nothing is built in the cluster
    }, sort_keys=False)


def agent_values(w: WandbConfig, teams: tuple[TeamQueue, ...] = ()) -> dict[str, Any]:
    return {
        "namespace": AGENT_NAMESPACE,
        "additionalTargetNamespaces": [TRAINING_NAMESPACE, *(t.namespace for t in teams)],
        "baseUrl": w.base_url,
        "launchConfig": launch_config(w, tuple(t.team for t in teams)),
        "agent": {
            "useExternalWandbSecret": True,  # the Secret below; the chart never sees the key
            "apiKey": "",
            "image": versions.WANDB_LAUNCH_AGENT_IMAGE,
            "imagePullPolicy": "IfNotPresent",  # a pinned tag: no need to ask the registry each start
            "tolerations": addon_tolerations(),
            "affinity": addon_affinity(),
            "minAvailable": 0,
        },
    }


def agent_quota() -> dict[str, Any]:
    """No Job and only the agent's own pod in the agent's namespace (see RBAC above). The chart's
    Deployment uses the Recreate strategy: the old pod is gone before the new one is created."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA_NAME, "namespace": AGENT_NAMESPACE},
        "spec": {"hard": {"count/jobs.batch": "0", "pods": "1"}},
    }


def api_port(w: WandbConfig) -> int:
    return urlsplit(w.base_url).port or HTTPS_PORT


def egress_policy(w: WandbConfig, namespace: str = TRAINING_NAMESPACE) -> dict[str, Any]:
    ports = sorted({HTTPS_PORT, api_port(w)})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": EGRESS_POLICY, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(RUN_LABELS)},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
                        "ports": [{"protocol": "TCP", "port": p} for p in ports]}],
        },
    }


def queue_config(training: TrainingConfig, claim: SharedClaim, gpu_resource: str = GPU_RESOURCE,
                 queue: str | None = None, namespace: str = TRAINING_NAMESPACE,
                 priority_class: str = BATCH_PRIORITY_CLASS) -> dict[str, Any]:
    """The W&B queue's config: the Kubernetes Job (without apiVersion and kind, which the agent
    adds) each run of the queue becomes, in `namespace`. See the module docstring for what is kept
    and why. With `queue` (queues.enabled) the Job carries Kueue's queue label and `priority_class`,
    and is created suspended: a run waits for its quota like any job instead of passing Kueue by."""
    one_pod = training.model_copy(update={"launcher": Launcher.INDEXED_JOB, "nodes": 1})
    template = pod_template("wandb-launch", TrainingJobArgs(training=one_pod, claim=claim,
                                                            gpu_resource=gpu_resource, pods=1))
    pod = copy.deepcopy(template["spec"])
    container = pod["containers"][0]
    env = [e for e in container.get("env", []) if e["name"].startswith(_KEPT_ENV_PREFIXES)]
    env.append({"name": "XDG_CACHE_HOME", "value": MOUNTS["cache"][1]})
    run_container = {
        "name": container["name"],
        "image": container["image"],
        "env": env,
        "resources": container["resources"],
        "volumeMounts": container["volumeMounts"],
    }
    run_pod = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # a training run, as the Job's pods: no API token
        "affinity": {"nodeAffinity": pod["affinity"]["nodeAffinity"]},
        "tolerations": pod["tolerations"],
        "containers": [run_container],
        "volumes": pod["volumes"],
    }
    labels = {**RUN_LABELS, JOB_LABEL: RUN_JOB_LABEL_VALUE}
    queued = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority_class} if queue else {}
    return {
        "metadata": {"namespace": namespace, "labels": {**labels, **queued}},
        "spec": {
            **({"suspend": True} if queue else {}),
            "backoffLimit": 0,
            "template": {"metadata": {"labels": dict(labels)}, "spec": run_pod},
        },
    }


def team_queue_config(training: TrainingConfig, claim: SharedClaim, gpu_resource: str, t: TeamQueue,
                      ) -> dict[str, Any]:
    """A team's W&B queue config: the run Job in the team's namespace, on its LocalQueue. The
    claim's name is the same in every namespace: the pods mount the team's own claim there."""
    return queue_config(training, claim, gpu_resource, t.local_queue, t.namespace, t.priority_class)


def submit_command(w: WandbConfig, queue: str | None = None) -> str:
    """The `wandb launch` line that sends an image to the queue (the project, when set, filled in)."""
    project = w.project or "<project>"
    return f"wandb launch -d <image> -q {queue or w.queue} -e {w.entity} -p {project}"


class WandbLaunch(pulumi.ComponentResource):
    """The W&B launch agent for one queue, its API key Secrets, quota and the runs' egress policy."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: WandbLaunchArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:training:WandbLaunch", name, None, opts)
        w = args.wandb
        # Only the teams trusted with the key (config/wandb_teams.py checks the names).
        args = dataclasses.replace(args, teams=tuple(t for t in args.teams if t.team in w.team_queues))
        if not w.enabled or w.entity is None or w.queue is None or args.training.image is None:
            raise ValueError("WandbLaunch needs wandb.enabled with entity and queue, and training.image")
        child = pulumi.ResourceOptions(parent=self)
        # restricted: the chart's agent pod runs as uid 1000 with every capability dropped.
        ns = pod_security_namespace(f"{name}-ns", AGENT_NAMESPACE, "restricted", child)
        in_agent_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        manifest = agent_quota()
        quota = k8s.core.v1.ResourceQuota(
            f"{name}-quota", metadata=manifest["metadata"], spec=manifest["spec"], opts=in_agent_ns
        )
        secret_key = pulumi.Output.secret(args.api_key)
        # The runs' namespaces: the training namespace and each team's, with what they wait for.
        run_namespaces: list[tuple[str, str, list[pulumi.Resource]]] = [
            ("", TRAINING_NAMESPACE, [args.training_namespace]),
            *((f"-{t.team}", t.namespace, list(t.ready)) for t in args.teams)]
        key_namespaces: list[tuple[str, str, list[pulumi.Resource]]] = [
            ("", AGENT_NAMESPACE, [ns]), *((f"-runs{s}", n, a) for s, n, a in run_namespaces)]
        keys = [
            k8s.core.v1.Secret(
                f"{name}-api-key{suffix}",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=API_KEY_SECRET, namespace=namespace),
                type="kubernetes.io/basic-auth",  # as the chart and the agent's runner make it
                string_data={API_KEY_FIELD: secret_key},
                opts=pulumi.ResourceOptions(parent=self, depends_on=after),
            )
            for suffix, namespace, after in key_namespaces
        ]
        for suffix, namespace, after in run_namespaces:
            policy = egress_policy(w, namespace)
            k8s.networking.v1.NetworkPolicy(
                f"{name}-egress{suffix}", metadata=policy["metadata"], spec=policy["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=after),
            )
        self.release = k8s.helm.v3.Release(
            f"{name}-agent",
            name=RELEASE_NAME,
            **args.charts.args(versions.WANDB_LAUNCH_AGENT_CHART, versions.WANDB_LAUNCH_AGENT_CHART_VERSION,
                               versions.WANDB_LAUNCH_AGENT_CHART_REPO),
            namespace=AGENT_NAMESPACE,
            values=agent_values(w, args.teams),
            # A RoleBinding lives in the training namespace (and each team's); the key and the
            # quota come before the pod.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, quota, *keys, args.training_namespace,
                                                                 *(r for t in args.teams for r in t.ready)]),
        )
        self.queue_config = queue_config(args.training, args.claim, args.gpu_resource, args.queue)
        self.team_queues = {t.team: {"queue": team_queue_name(w, t.team), "submit": submit_command(w, team_queue_name(w, t.team)),
                                     "config": team_queue_config(args.training, args.claim, args.gpu_resource, t)}
                            for t in args.teams}
        self.register_outputs({
            "namespace": AGENT_NAMESPACE,
            "entity": w.entity,
            "queue": w.queue,
            "queueConfig": self.queue_config,
            "teamQueues": self.team_queues,
        })
