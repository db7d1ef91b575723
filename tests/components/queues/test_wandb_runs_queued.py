"""queues.enabled with wandb.enabled: the W&B Launch queue config makes every run a queued Job (the
program's LocalQueue of the training namespace, the batch priority class, created suspended), one
W&B's own check and Kubernetes' strict schema still take; without queues it names no queue."""

from __future__ import annotations

import json

import kubernetes_validate
from wandb.sdk.launch.utils import validate_kubernetes_resource_args

from config.queues import BATCH_PRIORITY_CLASS, PRIORITY_LABEL, PROGRAM_QUEUE, QUEUE_LABEL
from render import program
from tests.components.training.test_wandb_launch import as_the_agent_submits, wandb_config


def _queue_config(queues: bool) -> dict:
    values, secrets = wandb_config("dev")
    if queues:
        values["gpu-cluster:queues"] = json.dumps({"enabled": True})
    return program.run("dev", config=(values, secrets)).outputs["wandbQueueConfig"]


def test_a_wandb_run_is_a_queued_job_when_queues_are_on():
    queue = _queue_config(queues=True)
    assert queue["metadata"]["labels"][QUEUE_LABEL] == PROGRAM_QUEUE
    assert queue["metadata"]["labels"][PRIORITY_LABEL] == BATCH_PRIORITY_CLASS
    assert queue["spec"]["suspend"] is True
    validate_kubernetes_resource_args(queue)
    job = as_the_agent_submits(queue)
    validate_kubernetes_resource_args(job)
    assert kubernetes_validate.validate(job, "1.34", strict=True) == "1.34"


def test_without_queues_a_run_names_no_queue():
    queue = _queue_config(queues=False)
    assert QUEUE_LABEL not in queue["metadata"]["labels"] and "suspend" not in queue["spec"]
