"""KueueWorkloadPendingTooLong (components/monitoring/kueue.py) under `promtool test rules`, with
queues.pendingAlertMinutes = 60 and Prometheus evaluating every minute: it fires at the configured
minutes after the queue's workloads started waiting (not a minute before), also for a queue that
never admitted anything (no kueue_admitted_workloads_total series: Kueue makes it at the first
admission), and not while something was admitted within the window (a first admission too)."""

from __future__ import annotations

from pathlib import Path

import yaml

from components.monitoring import kueue
from tests.components.monitoring.test_kueue_monitoring import _firing, _promtool, _quiet, _test, needs_promtool

ALERT = kueue.PENDING_ALERT


def _pending(queue: str, values: str) -> dict[str, str]:
    return {"series": f'{kueue.PENDING}{{cluster_queue="{queue}", status="active"}}', "values": values}


def _admitted(queue: str, values: str) -> dict[str, str]:
    return {"series": f'{kueue.ADMITTED_TOTAL}{{cluster_queue="{queue}"}}', "values": values}


def _only(queue: str, at: str) -> dict:
    return _firing(ALERT, {"cluster_queue": queue}, at)


@needs_promtool
def test_fires_at_the_configured_minutes_not_before(tmp_path: Path) -> None:
    """A queue that runs one job after another: the last one admitted at minute 19, the next one
    pending from minute 20: fires at minute 80 (an increase() window plus `for:` of an hour fired at 139)."""
    _test(tmp_path, [_pending("team-a", "0x19 1x200"), _admitted("team-a", "0x18 1x200")],
          [_quiet(ALERT, "79m"), _only("team-a", "80m"), _only("team-a", "150m")])


@needs_promtool
def test_fires_for_a_queue_that_never_admitted_anything(tmp_path: Path) -> None:
    """A new team's queue: its workload pending from minute 20, no admitted series at all."""
    _test(tmp_path, [_pending("team-new", "0x19 1x200")],
          [_quiet(ALERT, "79m"), _only("team-new", "80m")])


@needs_promtool
def test_an_admission_inside_the_window_keeps_it_quiet(tmp_path: Path) -> None:
    """Pending from minute 0; team-c admits one at minute 50 (counter 0 -> 1), team-d its first
    ever at minute 50 (its series appears then). Quiet until an hour after that admission."""
    series = [_pending("team-c", "1x200"), _admitted("team-c", "0x49 1x150"),
              _pending("team-d", "1x200"), _admitted("team-d", "_x50 1x150"),
              # always pending, one admitted every 10 minutes: never
              _pending("team-b", "2x200"), _admitted("team-b", "0+0.1x200")]
    _test(tmp_path, series, [
        _quiet(ALERT, "60m"), _quiet(ALERT, "109m"),
        {"eval_time": "110m", "alertname": ALERT, "exp_alerts": [
            _only(q, "110m")["exp_alerts"][0] for q in ("team-c", "team-d")]},
    ])


@needs_promtool
def test_a_short_wait_or_a_gap_does_not_fire(tmp_path: Path) -> None:
    """Pending 40 minutes, then nothing; pending again from minute 100: an hour after that, not before."""
    _test(tmp_path, [_pending("team-e", "1x40 0x58 1x100")],
          [_quiet(ALERT, "60m"), _quiet(ALERT, "159m"), _only("team-e", "160m")])


@needs_promtool
def test_the_shortest_and_longest_windows_config_allows_parse(tmp_path: Path) -> None:
    """queues.pendingAlertMinutes is 5 to 10080 (a week): the subquery's step grows with it."""
    groups = [{**kueue.rule_group(minutes), "name": f"{kueue.GROUP}-{minutes}"} for minutes in (5, 10080)]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    result = _promtool(tmp_path, "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[10080m:84m]" in kueue.pending_too_long_expr(10080) and "[5m:1m]" in kueue.pending_too_long_expr(5)
