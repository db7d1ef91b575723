"""gke.maintenance (a recurring window GKE accepts, exclusions) and gke.gpuPools[].upgrade (surge 0 /
unavailable 1 by default, or blue-green): defaults, and each refusal naming its key
(config/gke_upgrades.py has the rules and Google's pages they come from)."""

from __future__ import annotations

import pytest

import config
from config.gke_upgrades import ExclusionScope, UpgradeStrategy
from tests.config.test_gke_config import L4, assert_problem, gke_raw, pool


def _maintenance(**m):
    return gke_raw(maintenance=m)


def test_defaults_hold_minor_and_node_upgrades_and_replace_gpu_nodes_one_at_a_time():
    cfg = config.parse(gke_raw())
    (hold,) = cfg.gke.maintenance.exclusions
    assert (hold.scope, hold.until_end_of_support, hold.end) == (ExclusionScope.NO_MINOR_OR_NODE_UPGRADES, True, None)
    w = cfg.gke.maintenance.window
    assert (w.recurrence, w.hours()) == ("FREQ=WEEKLY;BYDAY=SA,SU", 8)
    for p in cfg.gke.gpu_pools:
        assert (p.upgrade.strategy, p.upgrade.max_surge, p.upgrade.max_unavailable) == (UpgradeStrategy.SURGE, 0, 1)


@pytest.mark.parametrize("window, hours", [
    ({"recurrence": "FREQ=DAILY", "start": "2026-01-01T02:00:00Z", "end": "2026-01-01T06:00:00Z"}, 128),
    ({"recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"}, 64),
    ({"recurrence": "FREQ=WEEKLY;BYDAY=SA", "start": "2026-01-03T00:00:00Z", "end": "2026-01-03T12:00:00Z"}, 48),
])
def test_windows_with_48_hours_in_every_32_days_are_accepted(window, hours):
    assert config.parse(_maintenance(window=window)).gke.maintenance.window.hours_per_32_days() == hours


def test_a_window_too_short_to_count_is_refused():
    assert_problem(_maintenance(window={"start": "2026-01-03T00:00:00Z", "end": "2026-01-03T03:00:00Z"}),
                   "gke.maintenance.window.end", "3 h", "at least 4 contiguous hours")


def test_a_window_with_too_few_hours_per_32_days_is_refused():
    # Sundays 00:00-08:00: 4 x 8 = 32 h in some 32 days, below GKE's 48.
    assert_problem(_maintenance(window={"recurrence": "FREQ=WEEKLY;BYDAY=SU"}), "gke.maintenance.window.recurrence",
                   "32 h", "at least 48 h")


@pytest.mark.parametrize("window, key, words", [
    ({"recurrence": "FREQ=MONTHLY"}, "recurrence", ("FREQ=DAILY", "FREQ=WEEKLY;BYDAY")),
    ({"recurrence": "FREQ=WEEKLY;BYDAY=SA,SA"}, "recurrence", ("FREQ=WEEKLY;BYDAY",)),
    ({"start": "2026-01-03T00:00:00+01:00"}, "start", ("UTC",)),
    ({"end": "2026-02-30T00:00:00Z"}, "end", ("2026-02-30",)),
])
def test_window_fields_are_refused_naming_the_key(window, key, words):
    assert_problem(_maintenance(window=window), f"gke.maintenance.window.{key}", *words)


def test_an_exclusion_for_a_training_run_is_accepted():
    run = {"name": "llm-run-7", "start": "2026-03-01T00:00:00Z", "end": "2026-03-25T00:00:00Z", "scope": "NO_UPGRADES"}
    (e,) = config.parse(_maintenance(exclusions=[run])).gke.maintenance.exclusions
    assert (e.name, e.scope, e.end) == ("llm-run-7", ExclusionScope.NO_UPGRADES, "2026-03-25T00:00:00Z")


@pytest.mark.parametrize("exclusion, key, words", [
    ({"end": "2026-04-15T00:00:00Z", "scope": "NO_UPGRADES"}, "end", ("at most 30 days",)),
    ({"untilEndOfSupport": True, "scope": "NO_UPGRADES"}, "untilEndOfSupport", ("at most 30 days",)),
    ({}, "end", ("exactly one of end and untilEndOfSupport",)),
    ({"end": "2026-03-01T00:00:00Z", "untilEndOfSupport": True}, "end", ("exactly one",)),
    ({"end": "2026-02-01T00:00:00Z"}, "end", ("not after start",)),
    ({"name": "Run_1", "end": "2026-03-02T00:00:00Z"}, "name", ("a-z, 0-9",)),
])
def test_exclusions_are_refused_naming_the_key(exclusion, key, words):
    e = {"name": "run", "start": "2026-03-01T00:00:00Z", **exclusion}
    assert_problem(_maintenance(exclusions=[e]), f"gke.maintenance.exclusions[0].{key}", *words)


def test_blue_green_takes_no_surge_settings_and_surge_needs_a_node_to_move():
    assert config.parse(gke_raw(pool(L4, upgrade={"strategy": "blueGreen", "soak": "600s"}))).gke.gpu_pools[0].upgrade.soak == "600s"
    assert_problem(gke_raw(pool(L4, upgrade={"strategy": "blueGreen", "maxSurge": 1})),
                   "gke.gpuPools[0].upgrade.maxSurge", "apply to strategy surge")
    assert_problem(gke_raw(pool(L4, upgrade={"maxUnavailable": 0})), "gke.gpuPools[0].upgrade.maxUnavailable",
                   "both 0")
    assert_problem(gke_raw(pool(L4, upgrade={"soak": "600s"})), "gke.gpuPools[0].upgrade.soak", "blueGreen")
