"""The RDMA row of the fleet dashboard and the RDMA alert rules (components/monitoring/rdma.py):

* `promtool test rules`: every alert fires on series shaped as two exporters report them (the
  node's DaemonSet and the training pod's sidecar, same device) and stays quiet on series that
  must not fire it; several quiet cases would fire if the two exporters' copies were added.
* every query takes `max by (node, device, port[, counter])` before anything else touches the data;
  every panel query and alert expression passes `promtool check rules`;
* end to end: two real exporters (workloads/trainer/rdma_exporter.py) read one fake sysfs tree, a
  real Prometheus on 127.0.0.1 scrapes both for a few seconds (with `node` set as the scrape
  config would) and evaluates the rule group: every panel query returns series, one per port
  (not one per exporter), every alert expression returns exactly the ports it should, and every
  rule evaluates without error and goes pending. This proves the metric and label names match.
* the wiring: MonitoringArgs(rdma=True) adds the row and the rule group, False adds neither.

promtool and prometheus come from Debian's `prometheus` package; without them those tests skip.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components.monitoring import Monitoring, MonitoringArgs, dashboards, prometheus_rule, rdma
from components.monitoring.alerts import rule_groups
from config.monitoring import MonitoringConfig
from tests.components.monitoring.test_monitoring_rules import _expand  # the alert templates' expansion
from tests.monitoring_crd_schema import validate_custom_resource
from tests.processes import stop
from tests.workloads.test_rdma_exporter import FakeSysfs, running_exporter

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)")

LINK_GBPS = 25.0  # seed 002: 25GbE RoCE

# One port as the two exporters report it after relabeling: `node` from the scraped pod's node.
PORT = {"node": "gpu-1", "device": "mlx5_0", "port": "1"}
DAEMONSET = {**PORT, "job": "rdma-exporter", "namespace": "rdma", "pod": "rdma-exporter-x",
             "instance": "10.0.0.1:9879"}
SIDECAR = {**PORT, "job": "train", "namespace": "team", "pod": "train-0", "instance": "10.1.0.5:9879"}
PORT2 = {"device": "mlx5_0", "port": "2"}
IRDMA = {"device": "irdma0", "port": "1"}


def _series(metric: str, labels: dict[str, str], values: str, **extra: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in {**labels, **extra}.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def _both(metric: str, values: str, **extra: str) -> list[dict[str, str]]:
    """The same device as both exporters report it."""
    return [_series(metric, DAEMONSET, values, **extra), _series(metric, SIDECAR, values, **extra)]


def _hw(counter: str, values: str, labels: dict[str, str] = DAEMONSET) -> dict[str, str]:
    return _series(rdma.HW_COUNTER, labels, values, counter=counter)


def _state(values: str, **extra: str) -> list[dict[str, str]]:
    return _both(rdma.PORT_STATE, values, **extra)


GBPS = 1_000_000_000
# alert -> (eval time, series that fire it, labels of the alert (no rule labels), $value, quiet series)
Case = tuple[str, list[dict[str, str]], dict[str, str], str, list[dict[str, str]]]
CASES: dict[str, Case] = {
    "RdmaPortDown": (
        "6m", _state("1x10"), PORT, "1",
        [*_state("4x10"), *_state("1x3 4x7", **PORT2)],  # up again before 5 minutes
    ),
    "RdmaLinkRateDegraded": (
        "11m", [*_both(rdma.PORT_RATE, f"{10 * GBPS}x20"), *_state("4x20")], PORT, "",
        [*_both(rdma.PORT_RATE, f"{25 * GBPS}x20"), *_state("4x20"),
         # a slow port that is DOWN is RdmaPortDown's
         *_both(rdma.PORT_RATE, f"{10 * GBPS}x20", **PORT2), *_state("1x20", **PORT2)],
    ),
    "RdmaPacketSequenceErrors": (
        "25m", [_hw("out_of_sequence", "0+120x30"), _hw("out_of_sequence", "0+120x30", SIDECAR)], PORT, "",
        [
            # 0.8/s seen by both exporters: 1.6/s if the copies were added
            _hw("out_of_sequence", "0+48x30"), _hw("out_of_sequence", "0+48x30", SIDECAR),
            # a burst that stopped 15 minutes ago
            _hw("packet_seq_err", "0+600x10 6000x20", {**DAEMONSET, **PORT2}),
        ],
    ),
    "RdmaRetransmits": (
        "25m", [_hw("local_ack_timeout_err", "0+120x30")], PORT, "",
        [_hw("roce_adp_retrans", "0+48x30"), _hw("roce_adp_retrans", "0+48x30", SIDECAR),
         _hw("tcpRetransSegs", "0+30x30", {**DAEMONSET, **IRDMA})],
    ),
    "RdmaCongestionHeavy": (
        "25m", [_hw("rp_cnp_handled", "0+120000x30"), _hw("rp_cnp_handled", "0+120000x30", SIDECAR)], PORT, "",
        [
            # 600/s of ECN marks on each copy: 1200/s if added
            _hw("RxECNMrkd", "0+36000x30", {**DAEMONSET, **IRDMA}), _hw("RxECNMrkd", "0+36000x30", {**SIDECAR, **IRDMA}),
            # sending CNPs (this port is the congested receiver's NIC) is not in the expression
            _hw("np_cnp_sent", "0+600000x30"),
        ],
    ),
    "RdmaExporterReadErrors": (
        "25m", [_series(rdma.READ_ERRORS, DAEMONSET, "0+1x30", file="hw_counters/cnpSent")], {"node": "gpu-1"}, "",
        [_series(rdma.READ_ERRORS, DAEMONSET, "0+1x3 3x27", file="hw_counters/cnpSent")],  # stopped failing
    ),
}
# RdmaLinkRateDegraded without a declared rate: below the port's own best of the last day.
OWN_BEST_CASE: Case = (
    "17m", [*_both(rdma.PORT_RATE, f"{25 * GBPS}x5 {10 * GBPS}x20"), *_state("4x25")], PORT, "",
    [*_both(rdma.PORT_RATE, f"{25 * GBPS}x25"), *_state("4x25"),
     *_both(rdma.PORT_RATE, f"{25 * GBPS}x12 {10 * GBPS}x13", **PORT2), *_state("4x25", **PORT2)],  # not yet 10 min
)

def _rules(link_gbps: float | None = LINK_GBPS) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rdma.rule_group(link_gbps)["rules"]}


def _panel_exprs() -> list[tuple[str, str, str]]:
    """(panel title, expr, legend) of every target of the RDMA row."""
    return [(p.title, expr, legend) for p in rdma.panel_group().panels for expr, legend in p.exprs]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def _write_rules(path: Path, link_gbps: float | None = LINK_GBPS) -> Path:
    path.write_text(yaml.safe_dump({"groups": [rdma.rule_group(link_gbps)]}, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------
# static


def test_every_alert_has_cases_severity_and_runbook() -> None:
    assert set(CASES) == set(_rules())
    for name, rule in _rules().items():
        assert name.startswith("Rdma")
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert {"summary", "description", "runbook", "runbook_url"} == set(rule["annotations"]), name
        assert all(v.strip() for v in rule["annotations"].values()), name


_DATA = re.compile(r"(?:(?:rate|increase|max_over_time)\()?\brdma_\w+")


def _dedup_violations(expr: str) -> list[str]:
    """Every read of an exporter metric (bare, or in rate/increase/max_over_time) must sit directly
    in `max by (...node, device, port...) (`."""
    bad = []
    for m in _DATA.finditer(expr):
        before = expr[:m.start()]
        agg = re.search(r"max by \(([^)]*)\) \($", before)
        keys = {k.strip() for k in agg.group(1).split(",")} if agg else set()
        if not {"node", "device", "port"} <= keys:
            bad.append(f"{m.group()} at {m.start()}: {before[-40:]!r}")
    return bad


def test_every_query_deduplicates_the_two_exporters_first() -> None:
    exprs = [e for _, e, _ in _panel_exprs()] + [r["expr"] for r in _rules().values()]
    exprs += [r["expr"] for r in _rules(None).values()]
    for expr in exprs:
        assert _DATA.search(expr), expr
        assert _dedup_violations(expr) == [], expr
    # the check is not vacuous
    assert _dedup_violations(f"sum by (node) (rate({rdma.HW_COUNTER}[5m]))")
    assert _dedup_violations(f"max by (node, device) (rate({rdma.HW_COUNTER}[5m]))")
    assert _dedup_violations(f"max by (node, device, port) ({rdma.PORT_STATE}) + {rdma.PORT_RATE}")


def test_congestion_counters_cover_irdma_and_mlx5() -> None:
    """irdma's names are seed 002's hw_counters listing; mlx5's the kernel's / NVIDIA's."""
    seed = (Path(__file__).resolve().parents[3].parent / "shared" / "seeds" / "002_8bd1413468bb1312.txt")
    irdma = {"RxECNMrkd", "cnpSent", "cnpHandled", "cnpIgnored", "tcpRetransSegs"}
    if seed.is_file():
        listing = seed.read_text()
        assert all(re.search(rf"\b{name}\b", listing) for name in irdma)
    mlx5 = {"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "out_of_sequence",
            "local_ack_timeout_err"}
    names = set(rdma.ECN_MARKED + rdma.CNP_SENT + rdma.CNP_HANDLED + rdma.CNP_IGNORED + rdma.OUT_OF_SEQUENCE
                + rdma.RETRANSMITS)
    assert irdma | mlx5 <= names
    row = " ".join(e for _, e, _ in _panel_exprs())
    for name in irdma | mlx5:
        assert name in row, name


def test_legends_name_labels_the_query_keeps() -> None:
    for title, expr, legend in _panel_exprs():
        wanted = set(re.findall(r"\{\{(\w+)\}\}", legend))
        m = re.match(r"\w+ by \(([^)]*)\)", expr)
        assert m, expr
        assert wanted <= {k.strip() for k in m.group(1).split(",")}, title


def test_link_rate_alert_uses_the_declared_rate_when_given() -> None:
    assert "25000000000" in _rules(25)["RdmaLinkRateDegraded"]["expr"]
    assert "max_over_time" in _rules(None)["RdmaLinkRateDegraded"]["expr"]
    assert "25 Gbit/s" in _rules(25)["RdmaLinkRateDegraded"]["annotations"]["description"]


@needs_promtool
def test_promtool_checks_rules_and_panel_queries(tmp_path: Path) -> None:
    for link in (LINK_GBPS, None):
        result = _promtool("check", "rules", str(_write_rules(tmp_path / f"rules-{link}.yaml", link)))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(CASES)} rules found" in result.stdout
    queries = [{"record": f"rdma:panel_query_{i}", "expr": e.replace("$node", ".*")}
               for i, (_, e, _) in enumerate(_panel_exprs())]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": queries}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def _test_spec(rules_file: Path, cases: dict[str, Case], link_gbps: float | None) -> dict[str, Any]:
    rules = _rules(link_gbps)
    tests = []
    for alert, (at, fire, labels, value, quiet) in cases.items():
        rule = rules[alert]
        tests.append({"name": f"{alert} fires", "interval": "1m", "input_series": fire, "alert_rule_test": [{
            "eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": {**labels, **rule["labels"]},
                            "exp_annotations": {k: _expand(v, labels, value) for k, v in rule["annotations"].items()}}],
        }]})
        tests.append({"name": f"{alert} stays quiet", "interval": "1m", "input_series": quiet,
                      "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": []}]})
    return {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}


@needs_promtool
@pytest.mark.parametrize("link_gbps", [LINK_GBPS, None], ids=["declared", "own-best"])
def test_promtool_test_rules(tmp_path: Path, link_gbps: float | None) -> None:
    cases = CASES if link_gbps else {"RdmaLinkRateDegraded": OWN_BEST_CASE}
    spec = _test_spec(_write_rules(tmp_path / "rules.yaml", link_gbps), cases, link_gbps)
    test_file = tmp_path / "rdma.test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
    # not vacuous: every fire case fails when given its quiet series
    for i in range(0, len(spec["tests"]), 2):
        broken = json.loads(json.dumps(spec))
        broken["tests"] = [{**spec["tests"][i], "input_series": spec["tests"][i + 1]["input_series"]}]
        test_file.write_text(yaml.safe_dump(broken, sort_keys=False))
        assert _promtool("test", "rules", str(test_file)).returncode != 0, spec["tests"][i]["name"]


# ------------------------------------------------------------------------------------------------
# the wiring


def _build(rdma_on: bool) -> None:
    pulumi.runtime.test(lambda: Monitoring("monitoring", MonitoringArgs(
        monitoring=MonitoringConfig.model_validate({}), rdma=rdma_on, rdma_link_gbps=LINK_GBPS)))()


@pytest.mark.parametrize("rdma_on", [True, False])
def test_rdma_flag_adds_the_row_and_the_rule_group(mocks, rdma_on: bool) -> None:
    _build(rdma_on)
    (rule,) = mocks.plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    groups = [g["name"] for g in rule.inputs["spec"]["groups"]]
    assert groups == [g["name"] for g in rule_groups(MonitoringConfig().alerts)] + ([rdma.GROUP] if rdma_on else [])
    if rdma_on:
        assert rule.inputs["spec"]["groups"][-1] == rdma.rule_group(LINK_GBPS)
    boards = {json.loads(body)["uid"]: json.loads(body) for cm in mocks.plan.of_type("kubernetes:core/v1:ConfigMap")
              for body in cm.inputs["data"].values()}
    rows = {uid: [p["title"] for p in b["panels"] if p["type"] == "row"] for uid, b in boards.items()}
    assert (rdma.TITLE in rows["gpu-cluster-gpu-fleet"]) is rdma_on
    assert rdma.TITLE not in rows["gpu-cluster-gpu-training"]
    if rdma_on:
        fleet = boards["gpu-cluster-gpu-fleet"]
        ids = [p["id"] for p in fleet["panels"]]
        assert len(ids) == len(set(ids))
        exprs = {t["expr"] for p in fleet["panels"] for t in p.get("targets", [])}
        assert {e for _, e, _ in _panel_exprs()} <= exprs


def test_rule_with_the_rdma_group_is_valid_against_the_crd(upstream_dir: Path) -> None:
    validate_custom_resource(prometheus_rule(MonitoringConfig(), (rdma.rule_group(LINK_GBPS),)), upstream_dir)


def test_fleet_dashboard_with_the_row_keeps_the_node_variable() -> None:
    board = dashboards.to_json(dashboards.fleet_dashboard((rdma.panel_group(),)))
    variables = {v["name"] for v in board["templating"]["list"]}
    for _, expr, _ in _panel_exprs():
        assert set(re.findall(r"\$(\w+)", expr)) <= variables, expr


# ------------------------------------------------------------------------------------------------
# end to end: the exporter, scraped twice by a real Prometheus on loopback

STEP_SECONDS = 0.25
MAX_SECONDS = 90.0  # generous: the test machine may be busy
SAMPLES = 4  # scrapes of each exporter before the queries (rate() needs 2)
# Per second. rate(...[5m]) over the few seconds of data the test gathers is about (seconds of data
# / 300) of the true rate, so these are far above the alerts' thresholds: every expression is true.
LOSS = 10_000
CONGESTION = 1_000_000
GROWTH = {
    ("irdma0", "1", "hw_counters"): {"RxECNMrkd": CONGESTION, "cnpSent": CONGESTION, "cnpHandled": CONGESTION,
                                     "cnpIgnored": 10, "ip4InOctets": 10**9, "ip4OutOctets": 10**9, "ip6InOctets": 0,
                                     "ip6OutOctets": 0, "tcpRetransSegs": LOSS, "iwOutRdmaWrites": 1000},
    ("mlx5_0", "1", "hw_counters"): {"out_of_sequence": LOSS, "packet_seq_err": LOSS, "implied_nak_seq_err": LOSS,
                                     "local_ack_timeout_err": LOSS, "rnr_nak_retry_err": LOSS, "roce_adp_retrans": LOSS,
                                     "roce_adp_retrans_to": LOSS, "np_ecn_marked_roce_packets": CONGESTION,
                                     "np_cnp_sent": CONGESTION, "rp_cnp_handled": CONGESTION,
                                     "rp_cnp_ignored": CONGESTION},
    ("mlx5_0", "1", "counters"): {"port_xmit_data": 10**9, "port_rcv_data": 10**9},
    ("mlx5_0", "2", "counters"): {"port_xmit_data": 0, "port_rcv_data": 0},
}
PORTS = {("gpu-1", "irdma0", "1"), ("gpu-1", "mlx5_0", "1"), ("gpu-1", "mlx5_0", "2")}
# what each alert's expression returns on that data: (node, device, port), or (node,) for the exporter's errors
EXPECTED = {
    "RdmaPortDown": {("gpu-1", "mlx5_0", "2")},
    "RdmaLinkRateDegraded": {("gpu-1", "mlx5_0", "1")},  # 10 Gbit/s against the declared 25
    "RdmaPacketSequenceErrors": {("gpu-1", "mlx5_0", "1")},
    "RdmaRetransmits": {("gpu-1", "irdma0", "1"), ("gpu-1", "mlx5_0", "1")},
    "RdmaCongestionHeavy": {("gpu-1", "irdma0", "1"), ("gpu-1", "mlx5_0", "1")},
    "RdmaExporterReadErrors": {("gpu-1",)},
}


def _fake_node(root: Path) -> FakeSysfs:
    fs = FakeSysfs(root)
    for (device, port, group), counters in GROWTH.items():
        zeros = dict.fromkeys(counters, 0)
        fs.port(device, port, hw=zeros if group == "hw_counters" else None, counters=None if group == "hw_counters" else zeros)
    fs.port("mlx5_0", "1", rate="10 Gb/sec (1X QDR)")
    fs.port("mlx5_0", "2", state="1: DOWN", phys_state="3: Disabled", rate=None)
    fs.set("mlx5_0", "1", "hw_counters", "roce_slow_restart", "garbage")  # an exporter read error each scrape
    return fs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


@contextlib.contextmanager
def _prometheus(tmp: Path, targets: dict[str, tuple[str, dict[str, str]]], rules: Path) -> Iterator[str]:
    """Prometheus on 127.0.0.1 scraping `targets` (job -> (metrics URL, target labels)) every second."""
    assert PROMETHEUS is not None
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [urllib.parse.urlparse(url).netloc], "labels": labels}]}
            for job, (url, labels) in targets.items()
        ],
    }
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):  # up to ~30 s
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            time.sleep(0.25)
        else:
            pytest.fail("prometheus not ready in time: " + (tmp / "prometheus.log").read_text()[-2000:])
        yield base
    finally:
        stop(proc, grace=15)
        log.close()


def _grow(fs: FakeSysfs, base: str) -> None:
    """Advance every counter at its GROWTH rate until Prometheus holds SAMPLES scrapes of each
    exporter (Prometheus' target discovery alone takes ~5 s), at most MAX_SECONDS."""
    values = {(k, name): 0 for k, counters in GROWTH.items() for name in counters}
    for step in range(int(MAX_SECONDS / STEP_SECONDS)):
        for ((device, port, group), name), v in values.items():
            values[((device, port, group), name)] = v + int(GROWTH[(device, port, group)][name] * STEP_SECONDS)
            fs.set(device, port, group, name, values[((device, port, group), name)])
        time.sleep(STEP_SECONDS)
        if step % 4 == 3:
            scrapes = _query(base, f"count_over_time({rdma.EXPORTER_DEVICES}[5m])")
            if len(scrapes) == 2 and all(float(r["value"][1]) >= SAMPLES for r in scrapes):
                return
    pytest.fail(f"Prometheus did not scrape both exporters {SAMPLES} times in {MAX_SECONDS} s")


def _key(labels: dict[str, str], alert: str = "") -> tuple[str, ...]:
    if alert == "RdmaExporterReadErrors":
        return (labels["node"],)
    return (labels["node"], labels["device"], labels["port"])


@needs_prometheus
def test_real_prometheus_scraping_two_exporters(tmp_path: Path) -> None:
    fs = _fake_node(tmp_path / "ib")
    rules = _write_rules(tmp_path / "rules.yaml", LINK_GBPS)
    with running_exporter(fs.root) as node_url, running_exporter(fs.root) as sidecar_url:
        targets = {
            "rdma-exporter": (node_url, {"node": "gpu-1", "namespace": "rdma", "pod": "rdma-exporter-x"}),
            "train": (sidecar_url, {"node": "gpu-1", "namespace": "team", "pod": "train-0"}),
        }
        with _prometheus(tmp_path / "prom", targets, rules) as base:
            _grow(fs, base)
            # both exporters scraped: every port twice in the raw data
            raw = _query(base, f"count by (node, device, port) ({rdma.PORT_STATE})")
            assert {_key(r["metric"]): r["value"][1] for r in raw} == dict.fromkeys(PORTS, "2")

            for title, expr, _ in _panel_exprs():
                result = _query(base, expr.replace("$node", ".*"))
                assert result, f"panel {title!r} returns no series: {expr}"
                keys = [tuple(r["metric"].get(k, "") for k in ("node", "device", "port", "counter", "file"))
                        for r in result]
                assert len(keys) == len(set(keys)), f"{title}: one series per exporter, not per port: {result}"
            # the throughput is one exporter's, not the two added
            tx = {_key(r["metric"]): float(r["value"][1]) for r in _query(base, rdma.per_port_rate(rdma.TRANSMIT_BYTES))}
            assert set(tx) == PORTS
            one = {_key(r["metric"]): float(r["value"][1]) for r in _query(
                base, f'max by (node, device, port) (rate({rdma.TRANSMIT_BYTES}{{job="rdma-exporter"}}[5m]))')}
            assert one[("gpu-1", "mlx5_0", "1")] > 0
            assert 0.5 < tx[("gpu-1", "mlx5_0", "1")] / one[("gpu-1", "mlx5_0", "1")] < 1.5
            assert tx[("gpu-1", "mlx5_0", "2")] == 0

            for alert, rule in _rules(LINK_GBPS).items():
                got = {_key(r["metric"], alert) for r in _query(base, rule["expr"])}
                assert got == EXPECTED[alert], (alert, rule["expr"])

            # Prometheus itself evaluates the group: every rule healthy, every alert pending
            pending: set[str] = set()
            for _ in range(120):  # up to ~30 s
                groups = _get(f"{base}/api/v1/rules")["data"]["groups"]
                evaluated = [r for g in groups for r in g["rules"] if r.get("lastEvaluation", "").startswith("20")]
                pending = {a["labels"]["alertname"] for a in _get(f"{base}/api/v1/alerts")["data"]["alerts"]}
                if len(evaluated) == len(CASES) and pending == set(CASES):
                    break
                time.sleep(0.25)
            rules_state = [r for g in groups for r in g["rules"]]
            assert {r["name"] for r in rules_state} == set(CASES)
            assert all(r["health"] == "ok" and not r.get("lastError") for r in rules_state), rules_state
            assert pending == set(CASES)
