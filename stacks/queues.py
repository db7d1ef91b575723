"""queues.enabled: Kueue, the teams' queues and the program's own (components/queues), as the
add-ons wire them (stacks/addons.py): after monitoring (the chart's ServiceMonitor needs its CRD),
before every job of the training namespace (Kueue's webhooks answer there once its release is up).
"""

from __future__ import annotations

from decimal import Decimal

import pulumi

from components.queues import Queues, QueuesArgs
from components.queues.requests import job_requests
from components.rdma_network import RDMA_RESOURCE_PREFIX, PodRdma
from components.training.job import TrainingJobArgs, pod_template
from config.addons import Addons
from config.queues import flavors
from stacks.contract import Cluster

__all__ = ["Queues", "program_queue_need", "queue_stack"]


def program_queue_need(cfg: Addons, pods: int, gpu_resource: str, pod_net: PodRdma | None) -> dict[str, Decimal]:
    """What the program's largest queued job (`pods` pods) counts against its own ClusterQueue: the
    training job, the acceptance Job and the RDMA link test share one pod template."""
    args = TrainingJobArgs(training=cfg.training, claim=None, gpu_resource=gpu_resource, rdma=pod_net)
    return job_requests(pods, pod_template("need", args)["spec"], (f"{RDMA_RESOURCE_PREFIX}/",))


def queue_stack(cfg: Addons, cluster: Cluster, opts: pulumi.ResourceOptions, metrics: bool,
                gpu_resource: str, pods: int, pod_net: PodRdma | None) -> Queues:
    """queues.enabled: Kueue, the teams and the program's own queue (components/queues), sized for
    the program's largest job of `pods` pods."""
    program_ns = cluster.training_namespace if cfg.runs_jobs else None
    return Queues(
        "queues",
        QueuesArgs(queues=cfg.queues, flavors=flavors(cfg), gpu_resource=gpu_resource,
                   program_need=program_queue_need(cfg, pods, gpu_resource, pod_net) if program_ns is not None else {},
                   metrics=metrics, training_namespace=program_ns, charts=cfg.chart_source,
                   team_volumes=cluster.shared_claim.teams if cluster.shared_claim else None,
                   shared_claim=tuple(cluster.shared_claim.ready) if cluster.shared_claim else ()),
        opts=opts,
    )
