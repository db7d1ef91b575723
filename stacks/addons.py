"""The in-cluster add-ons every stack gets, whatever made the cluster: one call that takes the
add-ons config and the platform's cluster contract (stacks/contract.py), nothing platform-specific.

Order: monitoring (its CRDs come first: the DCGM exporter's ServiceMonitor needs them) -> GPU
software stack -> GPU-ready gate -> (network.roce: the RDMA network) -> namespace NetworkPolicies
-> (pytorchjob: the training operator) -> (network.roce with acceptance.nccl: the RDMA link test)
-> NCCL acceptance Job (acceptance.nccl), and beside it (training.prepareData) the dataset download
Job -> training job (training.enabled). Every GPU job depends on the gate, so no pod asks for a GPU
before every GPU node passed. wandb.enabled: the W&B launch agent, once the training namespace and
shared claim exist (its runs are submitted later, from W&B). gpuHealth (on by default on lab and
dev): the GPU health service and its diagnostic CronJobs, after the GPU stack; monitoring routes the
GPU fault alerts to it. queues.enabled: Kueue and the teams' queues after monitoring (stacks/queues.py),
and every job of the training namespace after Kueue, the program's jobs submitted to its own queue.
"""

from __future__ import annotations

import pulumi

from components.gpu_health import NAMESPACE as GPU_HEALTH_NAMESPACE
from components.gpu_health import WEBHOOK_URL as GPU_HEALTH_WEBHOOK
from components.gpu_health import GpuHealth, GpuHealthArgs, level2_command
from components.gpu_health_access import webhook_token
from components.gpu_health_pairs import NcclPairCheckArgs, NcclPairChecks
from components.gpu_stack import GpuSoftwareStack, GpuSoftwareStackArgs
from components.monitoring import NAMESPACE as MONITORING_NAMESPACE
from components.monitoring import Monitoring, MonitoringArgs
from components.rdma_network import NETWORK_NAME, RDMA_RESOURCE, PodRdma, RdmaNetwork, RdmaNetworkArgs, pod_rdma
from components.ready_gate import GpuReadyGate, GpuReadyGateArgs
from components.storage_contract import TRAINING_NAMESPACE, SharedClaim
from components.training import launch
from components.training.job import TrainingJob, TrainingJobArgs, TrainingOperator
from components.training.namespace_policies import NamespacePolicies
from components.training.prepare import PrepareData, PrepareDataArgs
from components.training.wandb_launch import AGENT_NAMESPACE as WANDB_NAMESPACE
from components.training.wandb_launch import DEPLOYMENT as WANDB_AGENT
from components.training.wandb_launch import WandbLaunch, WandbLaunchArgs, submit_command
from config import StackSecrets, scheduling_contract
from config.addons import Addons
from config.gpu import MigStrategy, SharingMode
from config.queue_flavors import required_topology
from config.queues import PROGRAM_QUEUE
from config.training import POD_RDMA_INTERFACE, Launcher
from stacks.contract import Cluster
from stacks.queues import Queues, queue_stack

ACCEPTANCE_JOB = "nccl-acceptance"
RDMA_LINK_JOB = "rdma-link"
TRAINING_JOB = "train"
PREPARE_JOB = "prepare-data"
# How long `up` waits for the acceptance sweep (image pull included) before reporting failure.
ACCEPTANCE_AWAIT_MINUTES = 30
# The RDMA link test: a server and a client pod on two RDMA nodes.
RDMA_LINK_PODS = 2
RDMA_LINK_AWAIT_MINUTES = 20


def gpu_resource(cfg: Addons) -> str:
    """The extended resource one GPU pod asks for (a MIG slice under the mixed strategy)."""
    sharing = cfg.gpu.sharing
    mixed = sharing.mode is SharingMode.MIG and sharing.mig_strategy is MigStrategy.MIXED
    return scheduling_contract.gpu_resource(sharing.mig_profile if mixed else None)


def acceptance_args(cfg: Addons) -> tuple[str, ...]:
    """Arguments of `python -m trainer.allreduce_bench` for this stack's declared network."""
    acc, net, link_gbps = cfg.acceptance, cfg.network, cfg.acceptance_link_gbps
    assert link_gbps is not None  # the config model requires it with acceptance.nccl
    return (
        "--link-gbps", f"{link_gbps:g}",
        # unset: a lower default over sockets than over RDMA (config/training.py says why)
        "--min-busbw-fraction", f"{acc.busbw_fraction(net.rdma):g}",
        "--max-bytes", str(acc.max_bytes),
        *(("--rdma",) if net.rdma else ()),  # a socket fallback then fails the verdict
    )


def rdma_link_command(cfg: Addons) -> tuple[str, ...]:
    """The RDMA link test's command (workloads/trainer/rdma_link.py): ib_write_bw between the two
    pods' RDMA devices, held to network.roce.minLinkFraction x network.linkGbps."""
    roce, net = cfg.network.roce, cfg.network
    assert roce is not None and net.link_gbps is not None  # the config model requires both here
    return (
        "python", "-m", "trainer.rdma_link",
        f"--interface={POD_RDMA_INTERFACE}",
        f"--hca={roce.hca}",
        f"--gid-index={roce.gid_index}",
        f"--link-gbps={net.link_gbps:g}",
        f"--min-fraction={roce.min_link_fraction:g}",
    )


def rank0_logs(launcher: Launcher, job: str) -> str:
    """The command that prints node rank 0's log (the acceptance verdict, the training progress)."""
    if launcher is Launcher.PYTORCHJOB:
        return f"kubectl -n {TRAINING_NAMESPACE} logs {job}-master-0"
    return (f"kubectl -n {TRAINING_NAMESPACE} logs --tail=-1 "
            f"-l {scheduling_contract.JOB_LABEL}={job},batch.kubernetes.io/job-completion-index=0")


def wandb_launch(cfg: Addons, cluster: Cluster, secrets: StackSecrets, queues: Queues | None = None,
                 ) -> dict[str, object]:
    """wandb.enabled: the W&B launch agent (components/training/wandb_launch.py); its outputs,
    none secret: the queue configs are for pasting into the W&B queues (one per team with queues)."""
    ns, claim, key = cluster.training_namespace, cluster.shared_claim, secrets.wandb_api_key
    if ns is None or claim is None or key is None:  # the config and wiring make all three
        raise ValueError("wandb.enabled needs the training namespace, a shared claim and the wandbApiKey secret")
    teams = queues.wandb_team_queues() if queues is not None else ()
    agent = WandbLaunch(
        "wandb-launch",
        WandbLaunchArgs(wandb=cfg.wandb, training=cfg.training, claim=claim, api_key=key,
                        training_namespace=ns, gpu_resource=gpu_resource(cfg), queue=_queue(cfg), teams=teams,
                        charts=cfg.chart_source),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[*cluster.ready, ns, *claim.ready]),
    )
    return {
        "wandbLaunch": {
            "agentNamespace": WANDB_NAMESPACE,
            "entity": cfg.wandb.entity,
            "queue": cfg.wandb.queue,
            "queueConfig": "paste `pulumi stack output wandbQueueConfig --json` into the queue's config "
                           "(python -m render: wandb/queue-config.yaml)",
            "submit": submit_command(cfg.wandb),
            "agentLogs": f"kubectl -n {WANDB_NAMESPACE} logs deploy/{WANDB_AGENT}",
        },
        "wandbQueueConfig": agent.queue_config,
        **({"wandbTeamQueues": agent.team_queues} if agent.team_queues else {}),
    }


def diag_nodes(cfg: Addons, cluster: Cluster) -> dict[str, int]:
    """GPU node -> the GPU resources it offers, which the scheduled diagnostic asks for all of (so
    it runs only where no GPU pod does): the count the platform knows (lab: each host's gpus), else
    (dev declares none per node) training.gpusPerNode. Time-slicing multiplies them; MIG: none
    (DCGM's diagnostic does not run on MIG-partitioned GPUs)."""
    sharing = cfg.gpu.sharing
    if sharing.mode is SharingMode.MIG or not cfg.gpu_health.diagnostic.enabled:
        return {}
    replicas = sharing.replicas if sharing.mode is SharingMode.TIME_SLICING else 1
    return {node: cluster.gpu_counts.get(node, cfg.training.gpus_per_node) * replicas for node in cluster.gpu_nodes}


def pair_check_nodes(cfg: Addons, cluster: Cluster) -> dict[str, int]:
    """GPU node -> physical GPUs, for the NCCL pair check (one sweep process per GPU): only where
    the platform knows each node's count (lab). A guess (training.gpusPerNode) could be fewer than
    the node has: the check's pods would then share the node, and its NIC, with training pods and
    measure them. None under MIG or time-slicing."""
    if cfg.gpu.sharing.mode is not SharingMode.NONE:
        return {}
    return {node: cluster.gpu_counts[node] for node in cluster.gpu_nodes if node in cluster.gpu_counts}


def gpu_health(cfg: Addons, cluster: Cluster, monitoring: Monitoring | None,
               after: list[pulumi.Resource], pod_net: PodRdma | None,
               token: pulumi.Output[str] | None = None) -> dict[str, object]:
    """gpuHealth: the GPU health service, its diagnostic (components/gpu_health.py) and the NCCL
    pair check (components/gpu_health_pairs.py); their outputs, none secret."""
    image = cfg.gpu_health_image
    assert image is not None  # the config model requires it when enabled
    nodes = diag_nodes(cfg, cluster)
    health = GpuHealth(
        "gpu-health",
        GpuHealthArgs(health=cfg.gpu_health, image=image, diag_nodes=nodes, gpu_resource=gpu_resource(cfg),
                      service_monitor=monitoring is not None, webhook_token=token),
        # With monitoring: its ServiceMonitor needs the chart's CRDs.
        opts=pulumi.ResourceOptions(provider=cluster.provider,
                                    depends_on=[*after, *([monitoring.release] if monitoring else [])]),
    )
    pairs: object = "off: gpuHealth.ncclCheck.enabled is false, or unset without network.linkGbps and training.image"
    if cfg.nccl_check_enabled:
        ns = cluster.training_namespace
        if ns is None:  # the wiring makes it whenever the check is on (Addons.needs_training_namespace)
            raise ValueError("gpuHealth.ncclCheck needs the training namespace")
        checks = NcclPairChecks(
            "nccl-pair-check",
            NcclPairCheckArgs(check=cfg.gpu_health.nccl_check, training=cfg.training,
                              acceptance_args=acceptance_args(cfg), gpu_counts=pair_check_nodes(cfg, cluster),
                              gpu_resource=gpu_resource(cfg), rdma=pod_net),
            opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[*after, ns, health]),
        )
        pairs = ({"schedule": [cfg.gpu_health.nccl_check.round_schedule(i)
                               for i in range(1 + max(c.round for c in checks.checks))],
                  "pairs": {c.name: ",".join(c.pair) for c in checks.checks},
                  "runNow": f"kubectl -n {TRAINING_NAMESPACE} create job --from=cronjob/<check> <check>-$(date +%s)"}
                 if checks.checks else "none: needs two GPU nodes of equal GPU count known by name, no MIG "
                                       "or time-slicing")
    return {"gpuHealth": {
        "namespace": GPU_HEALTH_NAMESPACE,
        "dryRun": cfg.gpu_health.dry_run,
        "circuitBreaker": {"maxNodesOut": cfg.gpu_health.max_nodes_out,
                           "maxPercentOut": cfg.gpu_health.max_percent_out},
        "alertWebhook": GPU_HEALTH_WEBHOOK if monitoring is not None else "none: monitoring is off",
        "diagnostic": ({"schedule": cfg.gpu_health.diagnostic.schedule, "level": cfg.gpu_health.diagnostic.level,
                        "nodes": sorted(nodes), "level2": level2_command("<node>")}
                       if nodes else "none: disabled, MIG, or no GPU node known by name"),
        "ncclPairCheck": pairs,
        "logs": f"kubectl -n {GPU_HEALTH_NAMESPACE} logs deploy/gpu-health",
    }}


def deploy(cfg: Addons, cluster: Cluster, secrets: StackSecrets | None = None) -> dict[str, object]:
    """Register the add-ons on `cluster`; returns the stack outputs they add. The phases in order
    (the module docstring says why): monitoring, GPU stack and gate, network, health, jobs."""
    # The GPU health webhook's bearer token: the service's Secret and Alertmanager's hold the same.
    health_token = webhook_token("gpu-health-webhook-token") if cfg.gpu_health_enabled else None
    monitoring = monitoring_stack(cfg, cluster, health_token)
    gpu, gate, outputs = gpu_stack_and_gate(cfg, cluster, monitoring)
    if monitoring is not None:
        outputs["grafanaAdminPassword"] = monitoring.grafana_admin_password
        outputs["grafanaPortForward"] = monitoring.grafana_port_forward
    rdma, pod_net = None, None
    if cfg.network.roce is not None:
        rdma, pod_net, outputs["rdmaNetwork"] = rdma_network(cfg, cluster, monitoring)
    if cfg.gpu_health_enabled:
        outputs.update(gpu_health(cfg, cluster, monitoring, [*cluster.ready, gpu, *(rdma.ready if rdma else [])],
                                  pod_net, health_token))
    claim = cluster.shared_claim
    if claim is not None:
        outputs["sharedClaim"] = {"claim": f"{claim.namespace}/{claim.name}", "backend": claim.backend}
    queues = None
    if cfg.queues.enabled:
        link_pods = RDMA_LINK_PODS if cfg.acceptance.nccl and pod_net is not None else 0
        queues = queue_stack(cfg, cluster, _after_monitoring(cluster, monitoring), monitoring is not None,
                             gpu_resource(cfg), max(cfg.training.nodes, link_pods), pod_net)
        outputs["queues"] = queues.team_outputs
    if cfg.wandb.enabled:  # after the teams' namespaces: each team gets a W&B queue
        outputs.update(wandb_launch(cfg, cluster, secrets or StackSecrets(), queues))
    if cfg.runs_jobs:
        outputs.update(jobs(cfg, cluster, gate, rdma, pod_net, queues))
    return outputs


def _after_monitoring(cluster: Cluster, monitoring: Monitoring | None) -> pulumi.ResourceOptions:
    """In the cluster once it is ready, and after the monitoring chart (its CRDs) when there is one."""
    return pulumi.ResourceOptions(provider=cluster.provider,
                                  depends_on=[*cluster.ready, *([monitoring.release] if monitoring else [])])


def monitoring_stack(cfg: Addons, cluster: Cluster, health_token: pulumi.Output[str] | None) -> Monitoring | None:
    """monitoring.enabled: Prometheus, Alertmanager and Grafana (components/monitoring)."""
    if not cfg.monitoring.enabled:
        return None
    # network.roce: the RDMA row and alerts over the RDMA exporter (components/rdma_network.py)
    rdma_metrics = cfg.network.roce is not None
    return Monitoring(
        "monitoring",
        MonitoringArgs(monitoring=cfg.monitoring, rdma=rdma_metrics, charts=cfg.chart_source,
                       rdma_link_gbps=cfg.network.link_gbps if rdma_metrics else None,
                       gpu_health_webhook=GPU_HEALTH_WEBHOOK if cfg.gpu_health_enabled else None,
                       gpu_health_webhook_token=health_token,
                       gpu_health_reconcile_seconds=cfg.gpu_health.reconcile_seconds,
                       etcd_backup_interval_seconds=cluster.etcd_backup_interval_seconds,
                       etcd_metrics=cluster.etcd_metrics,
                       certificate_expiry_metrics=cluster.certificate_expiry_metrics,
                       kueue_pending_minutes=cfg.queues.pending_alert_minutes if cfg.queues.enabled else None,
                       kueue_gpu_resource=gpu_resource(cfg)),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=cluster.ready),
    )


def gpu_stack_and_gate(cfg: Addons, cluster: Cluster, monitoring: Monitoring | None,
                       ) -> tuple[GpuSoftwareStack, GpuReadyGate | None, dict[str, object]]:
    """The GPU software stack and the GPU-ready gate every GPU job waits for; their outputs."""
    gpu = GpuSoftwareStack(
        "gpu",
        GpuSoftwareStackArgs(gpu=cfg.gpu, driver=cluster.driver, service_monitor=monitoring is not None, charts=cfg.chart_source,
                             gpu_nodes=cluster.gpu_nodes, nodes_ready=tuple(cluster.gpu_nodes_ready),
                             dcgm_exporter=cluster.dcgm_exporter),
        opts=_after_monitoring(cluster, monitoring),
    )
    gate = None
    if cfg.gpu.gate.enabled and cluster.gpu_node_count > 0:
        gate = GpuReadyGate(
            "gpu-ready",
            GpuReadyGateArgs(
                gpu_nodes=cluster.gpu_node_count,
                timeout_minutes=cfg.gpu.gate.timeout_minutes,
                gpu_resource=gpu_resource(cfg),
            ),
            # The gate's deadline starts once the GPU nodes are Ready, not while drivers install.
            opts=pulumi.ResourceOptions(
                provider=cluster.provider, depends_on=[*cluster.ready, *cluster.gpu_nodes_ready, gpu, *gpu.resources]
            ),
        )
    return gpu, gate, {
        "gpuStack": cfg.gpu.stack.value,
        "gpuReadyGate": gate.result if gate is not None else "skipped: disabled or no GPU node configured",
    }


def rdma_network(cfg: Addons, cluster: Cluster, monitoring: Monitoring | None,
                 ) -> tuple[RdmaNetwork, PodRdma, dict[str, object]]:
    """network.roce: the secondary RDMA network (components/rdma_network.py), what a pod attaches
    to it with, and its output."""
    roce = cfg.network.roce
    if roce is None or cluster.training_namespace is None or cfg.training.image is None:
        raise ValueError("network.roce needs the training namespace and training.image")  # config and wiring make both
    rdma = RdmaNetwork(
        "rdma",
        RdmaNetworkArgs(roce=roce, image=cfg.training.image, charts=cfg.chart_source,
                        monitoring_namespace=MONITORING_NAMESPACE if monitoring is not None else None),
        training_namespace=cluster.training_namespace,
        opts=_after_monitoring(cluster, monitoring),
    )
    pod_net = pod_rdma(roce, cfg.training.image if monitoring is not None else None)
    return rdma, pod_net, {
        "network": f"{TRAINING_NAMESPACE}/{NETWORK_NAME}",
        "resource": RDMA_RESOURCE,
        "range": str(roce.range),
        "podInterface": POD_RDMA_INTERFACE,
    }


def _queue(cfg: Addons) -> str | None:
    """queues.enabled: every job of the program is submitted to its own LocalQueue."""
    return PROGRAM_QUEUE if cfg.queues.enabled else None


def _rdma_topology(cfg: Addons, pod_net: PodRdma | None) -> str | None:
    """With queues and a Topology, the label of queues.rdmaTopologyLevel (config/queue_flavors.py) for
    a job over RDMA (pod_net, lab) or, where the inventory says the level binds every multi-node job
    (gke: no RoCE there), one across nodes: all its pods are admitted into one domain of that level."""
    across_nodes = cfg.inventory.level_binds_multinode_jobs and cfg.training.nodes > 1
    return required_topology(cfg) if pod_net is not None or across_nodes else None


def jobs(cfg: Addons, cluster: Cluster, gate: GpuReadyGate | None, rdma: RdmaNetwork | None,
         pod_net: PodRdma | None, queues: Queues | None = None) -> dict[str, object]:
    """The jobs (cfg.runs_jobs): the RDMA link test, the NCCL acceptance, the dataset download and
    the training job, in the training namespace behind its NetworkPolicies; their outputs. Every GPU
    job waits for the gate."""
    ns, claim = cluster.training_namespace, cluster.shared_claim
    if ns is None or claim is None:  # the platforms' wiring and config make both when a job runs
        raise ValueError("a training or acceptance job needs the training namespace and a shared claim")
    # queues: Kueue's webhooks (its release) answer in the training namespace before any Job there.
    provider, after, t = cluster.provider, [*cluster.ready, *(queues.ready if queues else [])], cfg.training
    outputs: dict[str, object] = {}
    policies = NamespacePolicies("training-policies", opts=pulumi.ResourceOptions(provider=provider, depends_on=[ns]))
    before_jobs: list[pulumi.Resource] = [ns, policies, *after, *([gate] if gate is not None else [])]
    if t.launcher is Launcher.PYTORCHJOB:
        before_jobs.append(TrainingOperator("training-operator", charts=cfg.chart_source,
                                            opts=pulumi.ResourceOptions(provider=provider, depends_on=after)))
    if rdma is not None:
        before_jobs += rdma.ready
    if cfg.acceptance.nccl and pod_net is not None:
        # Before the NCCL sweep: a link that fails ib_write_bw cannot pass it, and says why sooner.
        link, outputs["rdmaLinkTest"] = rdma_link_test(cfg, cluster, claim, pod_net, before_jobs)
        before_jobs = [*before_jobs, link]
    acceptance = None
    if cfg.acceptance.nccl:
        acceptance, outputs["ncclAcceptance"] = nccl_acceptance(cfg, cluster, claim, pod_net, before_jobs)
    if t.enabled and t.prepare_data and t.dataset.downloadable:
        prepare, outputs["prepareData"] = prepare_data(cfg, cluster, claim, [ns, policies, *after])
        before_jobs = [*before_jobs, prepare]
    if t.enabled:
        # After the acceptance Job: both want the same GPUs, and a failed network check should
        # stop the run before it starts.
        outputs["training"] = training_job(cfg, cluster, claim, pod_net,
                                           [*before_jobs, *([acceptance] if acceptance else [])])
    return outputs


def rdma_link_test(cfg: Addons, cluster: Cluster, claim: SharedClaim, pod_net: PodRdma,
                   before: list[pulumi.Resource]) -> tuple[TrainingJob, dict[str, object]]:
    """network.roce with acceptance.nccl: ib_write_bw between two RDMA nodes (an Indexed Job)."""
    link = TrainingJob(
        RDMA_LINK_JOB,
        TrainingJobArgs(
            training=cfg.training.model_copy(update={"launcher": Launcher.INDEXED_JOB}),
            claim=claim,
            command=rdma_link_command(cfg),
            queue=_queue(cfg),
            required_topology=_rdma_topology(cfg, pod_net),
            pods=RDMA_LINK_PODS,
            await_minutes=RDMA_LINK_AWAIT_MINUTES,
            gpu_resource=gpu_resource(cfg),
            rdma=pod_net,
        ),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=list(before)),
    )
    return link, {
        "job": f"{TRAINING_NAMESPACE}/{RDMA_LINK_JOB}",
        "result": rank0_logs(Launcher.INDEXED_JOB, RDMA_LINK_JOB),
    }


def nccl_acceptance(cfg: Addons, cluster: Cluster, claim: SharedClaim, pod_net: PodRdma | None,
                    before: list[pulumi.Resource]) -> tuple[TrainingJob, dict[str, object]]:
    """acceptance.nccl: the NCCL all-reduce sweep across the GPU nodes, awaited by `up`."""
    acceptance = TrainingJob(
        ACCEPTANCE_JOB,
        TrainingJobArgs(
            training=cfg.training,
            claim=claim,
            module=launch.BENCH_MODULE,  # it turns NCCL's INFO log on itself to read the transport
            module_args=acceptance_args(cfg),
            queue=_queue(cfg),
            required_topology=_rdma_topology(cfg, pod_net),
            await_minutes=ACCEPTANCE_AWAIT_MINUTES,
            gpu_resource=gpu_resource(cfg),
            rdma=pod_net,
            gpudirect=cluster.gpudirect,  # across nodes by its nature
        ),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=before),
    )
    return acceptance, {
        "job": f"{TRAINING_NAMESPACE}/{ACCEPTANCE_JOB}",
        "result": rank0_logs(cfg.training.launcher, ACCEPTANCE_JOB),
    }


def prepare_data(cfg: Addons, cluster: Cluster, claim: SharedClaim,
                 before: list[pulumi.Resource]) -> tuple[PrepareData, dict[str, object]]:
    """training.prepareData: the dataset downloaded into the data mount and awaited before training
    starts. It needs no GPU, so neither the gate nor the acceptance sweep holds it back. The egress
    policy leaves private ranges out everywhere, and the cluster's own where known."""
    t = cfg.training
    assert t.image is not None  # the config model requires it with training.enabled
    prepare = PrepareData(
        PREPARE_JOB,
        PrepareDataArgs(image=t.image, dataset=t.dataset.value, claim=claim, cluster_cidrs=cluster.internal_cidrs),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=before),
    )
    return prepare, {
        "job": f"{TRAINING_NAMESPACE}/{PREPARE_JOB}",
        "dataset": t.dataset.value,
        "logs": f"kubectl -n {TRAINING_NAMESPACE} logs job/{PREPARE_JOB}",
    }


def training_job(cfg: Addons, cluster: Cluster, claim: SharedClaim, pod_net: PodRdma | None,
                 before: list[pulumi.Resource]) -> dict[str, object]:
    """training.enabled: the torchrun training job; its output."""
    t = cfg.training
    TrainingJob(
        TRAINING_JOB,
        TrainingJobArgs(training=t, claim=claim, gpu_resource=gpu_resource(cfg), rdma=pod_net, queue=_queue(cfg),
                        required_topology=_rdma_topology(cfg, pod_net), data_bucket=cluster.data_bucket,
                        gpudirect=cluster.gpudirect if t.nodes > 1 else None),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=before),
    )
    return {
        "job": f"{TRAINING_NAMESPACE}/{TRAINING_JOB}",
        "launcher": t.launcher.value,
        "image": t.image,
        "logs": rank0_logs(t.launcher, TRAINING_JOB),
    }
