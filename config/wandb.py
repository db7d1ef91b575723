"""wandb: W&B Launch on this cluster (every platform, off by default).

An agent (W&B's launch-agent chart) polls one queue of one entity and runs what is submitted to it
as Kubernetes Jobs in the training namespace; the queue's configuration (the Job those runs get)
is this program's training pod, which the user pastes into the queue (components/training/
wandb_launch.py says why it is not created through W&B's API). With queues.teams, the agent also polls
one queue per team, `<queue>-<team>`, whose runs go to the team's LocalQueue in its namespace.

The API key is the secret `gpu-cluster:wandbApiKey` (`pulumi config set --secret`), never a key
of this section: like the other secrets it stays a Pulumi secret (config.StackSecrets) and is
refused when set as plaintext.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, check_remote_host, empty_to_none
from config.training import TrainingConfig

API_KEY = "wandbApiKey"  # the secret key (gpu-cluster:wandbApiKey)

# W&B entity (user or team) names: lowercase letters, digits, '-' and '_' (wandb.ai's sign-up
# rules). They end up in the agent's YAML config and in CLI lines the outputs print.
_ENTITY = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Queue and project names: W&B allows more, but never '/', ':' or whitespace in what the CLI
# takes (`-q`, `-p`); this subset also stays a safe file and label-free string.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# https://host[:port][/path]: the chart writes it into a ConfigMap unquoted, and the agent's
# egress NetworkPolicy opens its port (components/training/wandb_launch.py).
_BASE_URL = re.compile(r"https://(?P<host>[^/:]+)(:(?P<port>[0-9]+))?(?P<path>(/[A-Za-z0-9._~-]+)*/?)")


def _check(pattern: re.Pattern[str], v: str | None, what: str) -> str | None:
    if v is not None and not pattern.fullmatch(v):
        raise ValueError(f"{v!r} is not a W&B {what}")
    return v


class WandbConfig(Model):
    """W&B Launch: the launch agent and the queue it polls."""

    enabled: bool = Field(default=False, description="Deploy a W&B launch agent for one queue.")
    entity: str | None = Field(default=None, description="W&B entity (user or team) that owns the queue.")
    queue: str | None = Field(default=None, description="Name of the Kubernetes queue the agent polls (you create the queue in W&B).")
    project: str | None = Field(
        default=None, description="Default W&B project of launched runs (in the printed `wandb launch` line)."
    )
    max_jobs: int = Field(default=1, ge=1, le=64, description="Runs the agent keeps running at once.")
    team_queues: tuple[str, ...] = Field(
        default=(),
        description="Teams (queues.teams[].name) that get a W&B queue of their own on this agent, <queue>-<team>. "
                    "Each gets the cluster's API key in its namespace (the agent hands every run its own key): "
                    "every member of a named team can read it (docs/queues.md). Name only teams you trust with it.",
    )
    base_url: str = Field(default="https://api.wandb.ai", description="W&B API address, https://<host>[:<port>][/<path>] (W&B Server: your own).")

    _optional = field_validator("entity", "queue", "project", mode="before")(
        classmethod(lambda cls, v: empty_to_none(v))
    )
    _entity = field_validator("entity")(classmethod(lambda cls, v: _check(
        _ENTITY, v, "entity name (lowercase a-z, 0-9, '-' and '_', at most 64 characters)")))
    _names = field_validator("queue", "project")(classmethod(lambda cls, v: _check(
        _NAME, v, "name here (A-Z a-z 0-9, '.', '-' and '_', starting alphanumeric, at most 128 characters)")))

    @field_validator("base_url")
    @classmethod
    def _https(cls, v: str) -> str:
        m = _BASE_URL.fullmatch(v)
        if not m:
            raise ValueError("must be an https:// address 'https://<host>[:<port>][/<path>]' such as "
                             "'https://api.wandb.ai' (https: the API key travels with every request)")
        try:
            check_remote_host(m["host"])
        except ValueError as err:
            raise ValueError(f"the host {m['host']!r}: {err}") from None
        port = m["port"]
        if port is not None and (port.startswith("0") or len(port) > 5 or int(port) > 65535):
            raise ValueError(f"the port {port} is not a TCP port: 1-65535, without leading zeros (or none: 443)")
        return v.rstrip("/")


def wandb_problems(w: WandbConfig, training: TrainingConfig, secrets: frozenset[str],
                   shared_storage: bool) -> Problems:
    """What wandb.enabled needs: entity, queue, the API key secret, the training image and the
    shared claim the queue's pods mount."""
    if not w.enabled:
        return []
    problems: Problems = []
    for key, value in (("entity", w.entity), ("queue", w.queue)):
        if value is None:
            problems.append((f"wandb.{key}", "is required with wandb.enabled"))
    if API_KEY not in secrets:
        problems.append((API_KEY, "wandb.enabled needs the W&B API key: "
                                  f"`pulumi config set --secret {API_KEY}` (from wandb.ai/authorize)"))
    if training.image is None:
        problems.append(("training.image", "wandb.enabled: the queue's pods run the workload image; "
                                           "set it, pinned ('registry/trainer:1.0.0')"))
    if not shared_storage:
        problems.append(("storage", "wandb.enabled: the queue's pods mount the shared claim; "
                                    "configure shared storage (docs/training.md, Shared storage)"))
    return problems
