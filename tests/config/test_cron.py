"""Cron schedules as the Kubernetes API server takes them (config/cron.py): robfig/cron v3's
standard parser (kubernetes pkg/apis/batch/validation validateScheduleFormat calls
cron.ParseStandard). Each refused case cites the rule of robfig/cron v3.0.1 that refuses it."""

from __future__ import annotations

import re
from typing import Any

import pytest

import config
from config.cron import check_cron

# robfig/cron v3.0.1 refuses each of these (parser.go unless said otherwise).
REFUSED_BY_KUBERNETES = {
    "*/0 * * * *": "getRange: 'step of range should be a positive number'",
    "1-5/0 * * * *": "getRange: a zero step after a range",
    "30-10 * * * *": "getRange: 'beginning of range (30) beyond end of range (10)'",
    "0 0 * * 6-1": "getRange: a reversed weekday range",
    "60 * * * *": "spec.go minutes bounds{0, 59}: 'end of range (60) above maximum (59)'",
    "0 24 * * *": "spec.go hours bounds{0, 23}",
    "0 0 0 * *": "spec.go dom bounds{1, 31}: 'beginning of range (0) below minimum (1)'",
    "0 0 32 * *": "spec.go dom bounds{1, 31}",
    "0 0 * 0 *": "spec.go months bounds{1, 12}",
    "0 0 * 13 *": "spec.go months bounds{1, 12}",
    "0 0 * * 7": "spec.go dow bounds{0, 6}: 7 is not Sunday for Kubernetes",
    "0 0 * * 5-7": "spec.go dow bounds{0, 6}",
    "0 0 0 * * *": "normalizeFields: 'expected exactly 5 fields, found 6' (no seconds field)",
    "0 0 * *": "normalizeFields: four fields",
    "": "Parse: 'empty spec string'",
    "@reboot": "parseDescriptor: 'unrecognized descriptor'",
    "0 0 L * *": "parseIntOrName: 'L' is no number or name (a cronsim extension)",
    "0 0 * * 5L": "parseIntOrName: '5L' (cronsim's last-weekday)",
    "0 0 * * 1#2": "parseIntOrName: '1#2' (cronsim's nth weekday)",
    "0 0 15W * *": "parseIntOrName: '15W'",
    "-5 * * * *": "getRange: a missing range start does not parse",
    "1-2-3 * * * *": "getRange: 'too many hyphens'",
    "*/5/2 * * * *": "getRange: 'too many slashes'",
    "CRON_TZ=UTC 0 0 * * *": "validateScheduleFormat: 'cannot use TZ or CRON_TZ in schedule'",
    "TZ=UTC 0 0 * * *": "validateScheduleFormat: TZ= likewise",
}


@pytest.mark.parametrize("schedule", sorted(REFUSED_BY_KUBERNETES))
def test_schedules_kubernetes_refuses_are_refused(schedule: str) -> None:
    with pytest.raises(ValueError):
        check_cron(schedule)


# Accepted by robfig/cron's ParseStandard and so by the API server.
TAKEN = ["17 3 * * *", "*/15 * * * *", "0 1-5/2 1,15 * 0", "0 0 * 12 6", "0 22 * * 1-5", "*/59 */23 */31 */12 */6",
         "59 23 31 12 6", "0 0 1 1 0", "3-3 * * * *", "05 4 * * *", "0 0 29 2 *"]

# Taken by Kubernetes but not by this program (five numeric fields only, config/cron.py says why):
# each refusal says what to write instead.
STRICTER = {"@daily": "'0 0 * * *'", "@midnight": "'0 0 * * *'", "@hourly": "'0 * * * *'", "@weekly": "'0 0 * * 0'",
            "@monthly": "'0 0 1 * *'", "@yearly": "'0 0 1 1 *'", "@annually": "'0 0 1 1 *'",
            "0 0 * * mon": "numbers", "0 0 1 jan *": "numbers", "0 0 * * ?": "numbers", "0  0 * * *": "single spaces",
            "@every 1h": "five fields", "*/61 * * * *": "more than 59", "0 */24 * * *": "more than 23"}


@pytest.mark.parametrize("schedule", sorted(STRICTER))
def test_schedules_this_program_writes_as_numbers(schedule: str) -> None:
    with pytest.raises(ValueError, match=re.escape(STRICTER[schedule])):
        check_cron(schedule)


@pytest.mark.parametrize("schedule", TAKEN)
def test_schedules_kubernetes_takes_are_taken(schedule: str) -> None:
    assert check_cron(schedule) == schedule


@pytest.mark.parametrize("schedule", ["*/0 * * * *", "30-10 * * * *", "0 0 * * 7", "0 0 0 * * *"])
@pytest.mark.parametrize("key", ["diagnostic", "ncclCheck"])
def test_a_bad_schedule_is_a_config_error_naming_the_key(key: str, schedule: str) -> None:
    raw: dict[str, Any] = {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"],
                           "gpuHealth": {key: {"schedule": schedule}}}
    with pytest.raises(config.ConfigError) as err:
        config.parse(raw)
    found = dict(err.value.problems)
    assert f"gpuHealth.{key}.schedule" in found, found
    assert schedule in found[f"gpuHealth.{key}.schedule"]


def test_the_pair_check_still_wants_one_minute_and_hour() -> None:
    """Its rounds start from the schedule's minute and hour (config/health.py): a valid step there is refused."""
    raw: dict[str, Any] = {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"],
                           "gpuHealth": {"ncclCheck": {"schedule": "*/30 4 * * *"}}}
    with pytest.raises(config.ConfigError) as err:
        config.parse(raw)
    assert "single numbers" in dict(err.value.problems)["gpuHealth.ncclCheck"]
