"""Upgrades that do not kill training on gke: when GKE may upgrade (gke.maintenance) and how a GPU
pool's nodes are replaced (gke.gpuPools[].upgrade). components/gke/upgrades.py maps them onto
pulumi-gcp's Cluster.maintenance_policy and NodePool.upgrade_settings.

- gke.maintenance.window: the one recurring window in which GKE's automatic maintenance may run
  (start, end, an RFC 5545 RRULE; recurring_window). GKE requires "at least 48 hours of maintenance
  availability in a 32-day rolling window", counting only "contiguous availability windows of at
  least four hours" (Google, "Configure maintenance windows and exclusions",
  cloud.google.com/kubernetes-engine/docs/maintenance-window): refused here, naming the key, when
  the window gives less. Default: Saturdays and Sundays 00:00-08:00 UTC.
- gke.maintenance.exclusions: spans with no automatic upgrades of their scope (NO_UPGRADES,
  NO_MINOR_UPGRADES, NO_MINOR_OR_NODE_UPGRADES; Google, "Maintenance windows and exclusions",
  cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions). Each has an
  end time or lasts until the end of support of the cluster's minor (untilEndOfSupport; pulumi-gcp:
  "Exactly one of end_time and exclusion_options.end_time_behavior"); NO_UPGRADES lasts at most 30
  days, so it always has an end. Default, as Google's Cluster Toolkit A3 High, A3 Ultra and A4
  blueprints set it (examples/gke-a4/gke-a4.yaml, "no-minor-or-node-upgrades-indefinite"): no minor
  or node upgrades until the end of support. The control plane still takes patch upgrades in the
  window; nodes are not drained under a running job, and the minor stays the one kubernetesVersion
  names (components/gke/upgrades.py pins it).
- gke.gpuPools[].upgrade: surge (the default: maxSurge 0, maxUnavailable 1, one node at a time and no
  spare GPU VM that may not exist when GPUs are scarce; the Cluster Toolkit's gke-node-pool defaults
  are the same) or blueGreen (a whole second pool, then a soak: needs the capacity twice over).
"""

from __future__ import annotations

import datetime as dt
import enum
import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model

# GKE: at least 48 hours of windows of at least 4 contiguous hours in every 32 days.
MIN_WINDOW_HOURS = 4
MIN_HOURS_PER_32_DAYS = 48
NO_UPGRADES_MAX_DAYS = 30
# pulumi-gcp: "A cluster can have up to 20 maintenance exclusions at a time".
MAX_EXCLUSIONS = 20
_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


class ExclusionScope(enum.StrEnum):
    NO_UPGRADES = "NO_UPGRADES"
    NO_MINOR_UPGRADES = "NO_MINOR_UPGRADES"
    NO_MINOR_OR_NODE_UPGRADES = "NO_MINOR_OR_NODE_UPGRADES"


class UpgradeStrategy(enum.StrEnum):
    SURGE = "surge"
    BLUE_GREEN = "blueGreen"

    @property
    def gke(self) -> str:
        return "SURGE" if self is UpgradeStrategy.SURGE else "BLUE_GREEN"


def _utc(v: str) -> str:
    """An RFC 3339 time in UTC ('Z'): GKE returns UTC, so another offset would diff forever (pulumi-gcp)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", v):
        raise ValueError(f"{v[:40]!r} is not an RFC 3339 UTC time such as 2026-01-03T00:00:00Z")
    try:
        dt.datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError as err:
        raise ValueError(f"{v!r}: {err}") from None
    return v


def _time(v: str) -> dt.datetime:
    return dt.datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ")


class MaintenanceWindow(Model):
    start: str = Field(default="2026-01-03T00:00:00Z", description="First window's start, RFC 3339 UTC.")
    end: str = Field(default="2026-01-03T08:00:00Z", description="First window's end (sets each window's length).")
    recurrence: str = Field(default="FREQ=WEEKLY;BYDAY=SA,SU",
                            description="RFC 5545 RRULE: FREQ=DAILY or FREQ=WEEKLY;BYDAY=<MO..SU list>.")

    _times = field_validator("start", "end")(classmethod(lambda cls, v: _utc(v)))

    @field_validator("recurrence")
    @classmethod
    def _recurrence(cls, v: str) -> str:
        if v != "FREQ=DAILY" and not _weekly_days(v):
            raise ValueError(f"{v[:60]!r}: this program takes FREQ=DAILY or FREQ=WEEKLY;BYDAY=<days from "
                             f"{','.join(_DAYS)}> (the RRULEs whose hours per 32 days it can count)")
        return v

    def hours(self) -> float:
        return (_time(self.end) - _time(self.start)).total_seconds() / 3600

    def hours_per_32_days(self) -> float:
        """The fewest window hours any 32 consecutive days hold: daily 32, each weekday at least 4 times."""
        per = 32 if self.recurrence == "FREQ=DAILY" else 4 * len(_weekly_days(self.recurrence))
        return per * self.hours()


def _weekly_days(rule: str) -> tuple[str, ...]:
    m = re.fullmatch(r"FREQ=WEEKLY;BYDAY=((?:MO|TU|WE|TH|FR|SA|SU)(?:,(?:MO|TU|WE|TH|FR|SA|SU))*)", rule)
    if not m:
        return ()
    days = tuple(m.group(1).split(","))
    return days if len(set(days)) == len(days) else ()


class MaintenanceExclusion(Model):
    name: str = Field(description="The exclusion's name.")
    start: str = Field(description="Start, RFC 3339 UTC.")
    end: str | None = Field(default=None, description="End, RFC 3339 UTC (or untilEndOfSupport).")
    until_end_of_support: bool = Field(default=False, description="Last until the end of support of the minor.")
    scope: ExclusionScope = Field(default=ExclusionScope.NO_MINOR_OR_NODE_UPGRADES,
                                  description="NO_UPGRADES, NO_MINOR_UPGRADES or NO_MINOR_OR_NODE_UPGRADES.")

    _start = field_validator("start")(classmethod(lambda cls, v: _utc(v)))
    _end = field_validator("end")(classmethod(lambda cls, v: v if v is None else _utc(v)))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v):
            raise ValueError("must use a-z, 0-9 and '-' (at most 63 characters)")
        return v


# What Google's Cluster Toolkit A3 High / A3 Ultra / A4 blueprints set (examples/gke-a4/gke-a4.yaml).
DEFAULT_EXCLUSION = MaintenanceExclusion(name="no-minor-or-node-upgrades-indefinite", start="2025-12-01T00:00:00Z",
                                         until_end_of_support=True)


class GkeMaintenance(Model):
    """gke.maintenance: when GKE's automatic maintenance may run, and when not."""

    window: MaintenanceWindow = Field(default_factory=MaintenanceWindow,
                                      description="The recurring window in which automatic maintenance may run.")
    exclusions: tuple[MaintenanceExclusion, ...] = Field(
        default=(DEFAULT_EXCLUSION,),
        description="Spans without automatic upgrades of their scope (default: no minor or node upgrades "
                    "until the end of support of the minor).")


class GkePoolUpgrade(Model):
    """gke.gpuPools[].upgrade: how GKE replaces the pool's nodes when it upgrades them."""

    strategy: UpgradeStrategy = Field(default=UpgradeStrategy.SURGE, description="surge or blueGreen.")
    max_surge: int = Field(default=0, ge=0, le=100, description="surge: extra nodes during an upgrade.")
    max_unavailable: int = Field(default=1, ge=0, le=100, description="surge: nodes down at once.")
    soak: str = Field(default="3600s", description="blueGreen: how long the old pool stays after draining.")

    @field_validator("soak")
    @classmethod
    def _soak(cls, v: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]{0,5}s", v):
            raise ValueError(f"{v[:20]!r} is not a duration in seconds such as 3600s")
        return v


def maintenance_problems(m: GkeMaintenance) -> Problems:
    problems: Problems = []
    key, w = "gke.maintenance.window", m.window
    if w.hours() < MIN_WINDOW_HOURS:
        problems.append((f"{key}.end", f"the window lasts {w.hours():g} h; GKE counts only windows of at least "
                                       f"{MIN_WINDOW_HOURS} contiguous hours"))
    elif w.hours_per_32_days() < MIN_HOURS_PER_32_DAYS:
        problems.append((f"{key}.recurrence", f"{w.recurrence} gives {w.hours_per_32_days():g} h in some 32 days; "
                                              f"GKE requires at least {MIN_HOURS_PER_32_DAYS} h of maintenance "
                                              "availability in every 32-day rolling window"))
    if w.hours() >= 24 * 7:
        problems.append((f"{key}.end", "the window must be shorter than a week"))
    if len(m.exclusions) > MAX_EXCLUSIONS:
        problems.append(("gke.maintenance.exclusions", f"at most {MAX_EXCLUSIONS} exclusions at a time"))
    seen: set[str] = set()
    for i, e in enumerate(m.exclusions):
        k = f"gke.maintenance.exclusions[{i}]"
        if e.name in seen:
            problems.append((f"{k}.name", f"{e.name!r} is used twice"))
        seen.add(e.name)
        if (e.end is None) == (not e.until_end_of_support):
            problems.append((f"{k}.end", "set exactly one of end and untilEndOfSupport"))
            continue
        if e.scope is ExclusionScope.NO_UPGRADES and e.until_end_of_support:
            problems.append((f"{k}.untilEndOfSupport", f"a NO_UPGRADES exclusion lasts at most {NO_UPGRADES_MAX_DAYS} "
                                                       "days: give it an end, or use NO_MINOR_OR_NODE_UPGRADES"))
        if e.end is not None:
            days = (_time(e.end) - _time(e.start)).total_seconds() / 86400
            if days <= 0:
                problems.append((f"{k}.end", f"{e.end} is not after start {e.start}"))
            elif e.scope is ExclusionScope.NO_UPGRADES and days > NO_UPGRADES_MAX_DAYS:
                problems.append((f"{k}.end", f"a NO_UPGRADES exclusion lasts at most {NO_UPGRADES_MAX_DAYS} days "
                                             f"(this one {days:g})"))
    return problems


def pool_upgrade_problems(key: str, u: GkePoolUpgrade) -> Problems:
    """`key` is gke.gpuPools[i]."""
    problems: Problems = []
    surge = u.strategy is UpgradeStrategy.SURGE
    if surge and u.max_surge == 0 and u.max_unavailable == 0:
        problems.append((f"{key}.upgrade.maxUnavailable", "maxSurge and maxUnavailable are both 0: no node could "
                                                          "ever be upgraded (GKE requires one of them above 0)"))
    if not surge and (u.max_surge, u.max_unavailable) != (0, 1):
        problems.append((f"{key}.upgrade.maxSurge", "maxSurge and maxUnavailable apply to strategy surge; "
                                                    "blueGreen replaces the whole pool"))
    if surge and u.soak != GkePoolUpgrade().soak:
        problems.append((f"{key}.upgrade.soak", "applies to strategy blueGreen"))
    return problems
