"""EtcdDefragFailed (components/monitoring/etcd.py), with `promtool test rules`: it fires for the
control plane whose last scheduled defragmentation refused or failed, and not for one whose run
succeeded or left the work to the first member; it clears when a later run succeeds. The metric is
the one the real script writes (tests/components/lab/test_etcd_defrag_real.py reads it back).
And the wiring: lab gets the group; dev does not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from components.monitoring import etcd
from render import program

PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_fires_for_the_failed_run_only_and_clears_after_a_success(tmp_path: Path) -> None:
    metric = etcd.DEFRAG_LAST_RUN_OK
    rule = etcd.rule_group()["rules"][0]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [etcd.rule_group()]}))
    series = [
        # cp-1 refused (a member was down), then a run by hand at 40m succeeded; cp-2 left it to cp-1.
        {"series": f'{metric}{{etcd_member="cp-1"}}', "values": "0x40 1x20"},
        {"series": f'{metric}{{etcd_member="cp-2"}}', "values": "1x60"},
    ]
    alerts = [
        {"eval_time": "10m", "alertname": etcd.DEFRAG_FAILED_ALERT, "exp_alerts": [
            {"exp_labels": {"severity": "warning", "etcd_member": "cp-1"},
             "exp_annotations": {**rule["annotations"], "description": rule["annotations"]["description"].replace(
                 "{{ $labels.etcd_member }}", "cp-1")}}]},
        {"eval_time": "50m", "alertname": etcd.DEFRAG_FAILED_ALERT, "exp_alerts": []},
    ]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}]}))
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("stack", "wanted"), [("lab", True), ("dev", False)])
def test_lab_gets_the_group(stack: str, wanted: bool) -> None:
    plan = program.run(stack, config=program.stack_config(stack))
    groups = {g["name"] for r in plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
              for g in r.inputs["spec"]["groups"]}
    assert (etcd.GROUP in groups) is wanted
