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
* ncclCheck.enabled: unset means on wherever the service is, network.linkGbps is declared and
  training.image is set (the sweep's threshold and its code); nothing runs without two GPU nodes of
  equal GPU count known by name.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from config.cron import check_cron
from config.errors import Problems
from config.fields import Model, check_pinned_image, empty_to_none


class GpuDiagnostic(Model):
    """The scheduled DCGM diagnostic (`dcgmi diag -r <level>`) on each GPU node without GPU pods."""

    enabled: bool = Field(default=True, description="Run the scheduled diagnostic.")
    schedule: str = Field(
        default="17 3 * * *", description="Cron schedule in UTC, five numeric fields as Kubernetes reads them."
    )
    level: int = Field(default=1, ge=1, le=2, description="1: quick (seconds); 2: medium (minutes).")
    valid_hours: int = Field(default=48, ge=1, le=720,
                             description="A result's expiry: the service trusts it this long.")
    timeout_minutes: int = Field(default=30, ge=5, le=240,
                                 description="A run waiting for its node's GPUs to be free gives up after this.")

    _schedule = field_validator("schedule")(classmethod(lambda cls, v: check_cron(v)))


# A ring's pairs in rounds of disjoint pairs (no node in two pairs of a round, so two checks never
# wait on each other's GPUs): 1 round for two nodes, 2 for an even ring, 3 for an odd one.
PAIR_ROUNDS_MAX = 3


class NcclPairCheck(Model):
    """The scheduled two-node NCCL check (components/gpu_health_pairs.py): GPU nodes with equal GPU
    counts in a ring of pairs, each pair swept like the acceptance test, on idle nodes only."""

    enabled: bool | None = Field(default=None, description="unset: on with network.linkGbps and training.image.")
    schedule: str = Field(default="47 4 * * *",
                          description="Cron schedule in UTC; minute and hour single numbers (rounds start "
                                      "timeoutMinutes + 2 apart and stay within the day).")
    valid_hours: int = Field(default=48, ge=1, le=720,
                             description="A result's expiry: the service trusts it this long.")
    timeout_minutes: int = Field(default=30, ge=5, le=240,
                                 description="A run waiting for both nodes' GPUs to be free gives up after this.")

    _enabled = field_validator("enabled", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _schedule = field_validator("schedule")(classmethod(lambda cls, v: check_cron(v)))

    @model_validator(mode="after")
    def _rounds_fit_the_day(self) -> NcclPairCheck:
        minute, hour = ([*self.schedule.split(" "), ""])[:2]
        if not (minute.isdigit() and hour.isdigit()):
            raise ValueError(f"schedule {self.schedule!r}: the minute and hour must be single numbers (e.g. "
                             "'47 4 * * *'): the rounds of pairs start from that time, timeoutMinutes + 2 apart")
        last = int(hour) * 60 + int(minute) + (PAIR_ROUNDS_MAX - 1) * self.round_minutes
        if last >= 24 * 60:
            raise ValueError(f"schedule {self.schedule!r} with timeoutMinutes {self.timeout_minutes}: the last round "
                             f"of pairs would start {last - 24 * 60} minutes past midnight, on another day; start "
                             "earlier or shorten timeoutMinutes")
        return self

    @property
    def round_minutes(self) -> int:
        """Rounds of pairs start this far apart: a round's Jobs start at most a minute late
        (startingDeadlineSeconds 60) and end by their deadline before the next round starts."""
        return self.timeout_minutes + 2

    def round_schedule(self, index: int) -> str:
        """The cron schedule of round `index` (0-based): the base time plus index x round_minutes."""
        minute, hour, *days = self.schedule.split(" ")
        start = int(hour) * 60 + int(minute) + index * self.round_minutes
        return " ".join([str(start % 60), str(start // 60), *days])


class GpuHealthConfig(Model):
    """The GPU health service and its checks."""

    enabled: bool | None = Field(default=None, description="unset: on for lab and dev (with an image), off for gke.")
    image: str | None = Field(default=None, description="Pinned image holding `gpuhealth` (default: training.image).")
    dry_run: bool = Field(default=False, description="Only report (Events, metrics); change no node.")
    max_nodes_out: int = Field(
        default=1, ge=0, le=1000, description="Circuit breaker: at most this many GPU nodes out of service at once."
    )
    max_percent_out: int = Field(
        default=25, ge=0, le=100,
        description="Circuit breaker: at most this % of GPU nodes out at once (rounded up; the stricter limit wins).",
    )
    reconcile_seconds: int = Field(default=60, ge=10, le=3600,
                                   description="How often the service re-reads nodes and diagnostic results.")
    diagnostic: GpuDiagnostic = Field(
        default_factory=GpuDiagnostic,
        description="The DCGM diagnostic CronJob per GPU node and how long a result counts (off on gke).",
    )
    nccl_check: NcclPairCheck = Field(
        default_factory=NcclPairCheck, description="The two-node NCCL check per pair of GPU nodes of equal count."
    )

    _optional = field_validator("enabled", "image", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _image = field_validator("image")(classmethod(lambda cls, v: v if v is None else check_pinned_image(v)))


def gpu_health_problems(h: GpuHealthConfig, image: str | None, training_image: str | None = None,
                        link_gbps: float | None = None) -> Problems:
    """`image`: the image the service would run from (gpuHealth.image, else training.image); the
    NCCL pair check runs the acceptance sweep from training.image against network.linkGbps."""
    problems: Problems = []
    if h.enabled and image is None:
        problems.append(("gpuHealth.image", "gpuHealth.enabled needs the workload image that carries the service: "
                                            "set training.image or gpuHealth.image (a pinned tag or digest)"))
    if h.nccl_check.enabled:
        if link_gbps is None:
            problems.append(("gpuHealth.ncclCheck.enabled", "the NCCL pair check holds each pair's bus bandwidth "
                                                            "to the link rate: set network.linkGbps, or turn it off"))
        if training_image is None:
            problems.append(("gpuHealth.ncclCheck.enabled", "the NCCL pair check runs the acceptance sweep from "
                                                            "training.image: set it, or turn the check off"))
    return problems
