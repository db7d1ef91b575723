"""gpuHealth: the GPU health service (components/gpu_health.py): it takes a GPU node that fails out
of service (cordon, taint, evict its GPU pods), and back after a passing diagnostic.

Defaults, and why:
* enabled: unset means the platform's default. lab and dev: on, whenever an image to run it from is
  known (gpuHealth.image, else training.image: the service ships in the workload image). gke: off;
  GKE's node auto-repair (on for every pool this program makes) already recreates failing nodes, and
  two actors draining the same node fight. Set it to true on gke to run it beside auto-repair.
* dryRun: false. The circuit breaker (maxNodesOut 1) bounds what a first rollout can do to one
  node, and a node with a fatal XID is unusable whether or not it is cordoned; a service that only
  reports by default would leave the alerts unanswered, which is what it exists to change.
* maxNodesOut 1, maxPercentOut 25: at most one GPU node, and at most a quarter of them, out of
  service at once (the service rounds the percentage up, so one node can always go unless
  maxNodesOut is 0, which stops every new action).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, check_pinned_image, empty_to_none

# Five cron fields (minute hour day-of-month month day-of-week) as a Kubernetes CronJob takes them:
# numbers, '*', ranges, steps and lists; no @macros or names, so the check stays exact.
_CRON_FIELD = re.compile(r"(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?(,(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?)*")
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def check_cron(value: str) -> str:
    fields = value.split(" ")
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
        raise ValueError(f"{value!r} is not a cron schedule of five fields separated by single spaces "
                         "(minute hour day-of-month month day-of-week), e.g. '17 3 * * *'")
    for text, (low, high) in zip(fields, _CRON_RANGES, strict=True):
        for number in re.findall(r"[0-9]+", text.replace("/", " / ")):
            if not low <= int(number) <= high:
                raise ValueError(f"{value!r}: {number} is outside {low}-{high} in field {text!r}")
    return value


class GpuDiagnostic(Model):
    """The scheduled DCGM diagnostic (`dcgmi diag -r <level>`) on each GPU node without GPU pods."""

    enabled: bool = Field(default=True, description="Run the scheduled diagnostic.")
    schedule: str = Field(default="17 3 * * *", description="Cron schedule (cluster time zone: UTC).")
    level: int = Field(default=1, ge=1, le=2, description="1: quick (seconds); 2: medium (minutes).")
    valid_hours: int = Field(default=48, ge=1, le=720,
                             description="A result's expiry: the service trusts it this long.")
    timeout_minutes: int = Field(default=30, ge=5, le=240,
                                 description="A run waiting for its node's GPUs to be free gives up after this.")

    _schedule = field_validator("schedule")(classmethod(lambda cls, v: check_cron(v)))


class GpuHealthConfig(Model):
    """The GPU health service and its checks."""

    enabled: bool | None = Field(default=None, description="unset: on for lab and dev (with an image), off for gke.")
    image: str | None = Field(default=None, description="Pinned image holding `gpuhealth` (default: training.image).")
    dry_run: bool = Field(default=False, description="Only report (Events, metrics); change no node.")
    max_nodes_out: int = Field(default=1, ge=0, le=1000, description="Circuit breaker: GPU nodes out at once.")
    max_percent_out: int = Field(default=25, ge=0, le=100, description="Circuit breaker: % of GPU nodes out at once.")
    reconcile_seconds: int = Field(default=60, ge=10, le=3600,
                                   description="How often the service re-reads nodes and diagnostic results.")
    diagnostic: GpuDiagnostic = Field(default_factory=GpuDiagnostic)

    _optional = field_validator("enabled", "image", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _image = field_validator("image")(classmethod(lambda cls, v: v if v is None else check_pinned_image(v)))


def gpu_health_problems(h: GpuHealthConfig, image: str | None) -> Problems:
    """`image`: the image the service would run from (gpuHealth.image, else training.image)."""
    if h.enabled and image is None:
        return [("gpuHealth.image", "gpuHealth.enabled needs the workload image that carries the service: "
                                    "set training.image or gpuHealth.image (a pinned tag or digest)")]
    return []
