"""Cron schedules as a Kubernetes CronJob takes them.

The API server validates `spec.schedule` with robfig/cron v3's ParseStandard (kubernetes
pkg/apis/batch/validation/validation.go, validateScheduleFormat): five fields (minute hour
day-of-month month day-of-week) or a descriptor, and no TZ=/CRON_TZ= prefix ("use timeZone field
instead"). robfig/cron v3 parser.go (getRange) refuses a zero step ("step of range should be a
positive number"), a reversed range ("beginning of range beyond end of range") and values outside
each field's bounds (spec.go: minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6).

The fields are evaluated by cronsim (the parser Healthchecks runs), which refuses all of those as
well. What cronsim accepts beyond robfig's grammar (a seconds field, 7 for Sunday, L, W and #) is
refused here, so a schedule that passes is one the API server takes. This program is stricter than
Kubernetes in two ways, kept from before: five numeric fields separated by single spaces, no
descriptors (@daily) and no month or weekday names, so every schedule reads alike and the NCCL pair
check can add its rounds to the minute and hour; and no step beyond a field's range ('*/61' runs
at minute 0 only, not every 61 minutes).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

# robfig/cron v3 parseDescriptor: refused with the five fields each stands for.
_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
# robfig/cron v3 spec.go: each field's bounds.
_BOUNDS = {"minute": "0-59", "hour": "0-23", "day-of-month": "1-31", "month": "1-12", "day-of-week": "0-6"}
# What robfig/cron's getRange reads in a field, numbers only: a list of '*', a number or a range,
# each with an optional step. cronsim's extensions (L, W, #) never match.
_TERM = r"(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?"
_FIELD = re.compile(rf"{_TERM}(,{_TERM})*")
_EXAMPLE = "e.g. '17 3 * * *' (03:17 UTC every day)"


def check_cron(value: str) -> str:
    """`value` if the Kubernetes API server takes it as a CronJob schedule, else ValueError saying why."""
    if "TZ" in value:
        raise ValueError(f"{value!r}: Kubernetes refuses TZ or CRON_TZ in a schedule; the schedule is in UTC")
    if value in _DESCRIPTORS:
        raise ValueError(f"{value!r}: write the five fields it stands for, {_DESCRIPTORS[value]!r} (this program "
                         "takes five numeric fields only)")
    fields = value.split(" ")
    if len(fields) != 5:
        raise ValueError(f"{value!r} is not a cron schedule of five fields separated by single spaces "
                         f"({' '.join(FIELDS)}), {_EXAMPLE}")
    for name, text in zip(FIELDS, fields, strict=True):
        if not _FIELD.fullmatch(text):
            raise ValueError(f"{value!r}: the {name} field {text!r} is not '*', numbers, ranges (a-b), steps (/n) "
                             f"or lists (,) of them; {_EXAMPLE}")
    for name, text in zip(FIELDS, fields, strict=True):
        high = int(_BOUNDS[name].split("-")[1])
        for term in text.split(","):
            span, _, step = term.partition("/")
            # robfig's weekday bounds are 0-6 (Sunday is 0); cronsim also takes 7.
            if name == "day-of-week" and any(b.isdigit() and int(b) > 6 for b in span.split("-")):
                raise ValueError(f"{value!r}: the day-of-week field {text!r} has a value outside 0-6 (Sunday is 0; "
                                 "Kubernetes takes no 7)")
            # Kubernetes takes '*/61' as minute 0 only: refused, as this program always did.
            if step.isdigit() and int(step) > high:
                raise ValueError(f"{value!r}: the {name} field {text!r} steps by more than {high}, which selects "
                                 f"its first value only; {_EXAMPLE}")
    try:
        CronSim(value, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as err:
        # cronsim names the field ("Bad minute"): a value outside its bounds, a zero step, a
        # reversed range, or a day no month has (a schedule that would never run).
        name = str(err).removeprefix("Bad ")
        text = fields[FIELDS.index(name)] if name in FIELDS else value
        raise ValueError(f"{value!r}: the {name} field {text!r} has a value outside {_BOUNDS.get(name, 'its bounds')}, "
                         "a step of 0, a range whose start is after its end, or a date no month has (it would "
                         f"never run); {_EXAMPLE}") from None
    return value
