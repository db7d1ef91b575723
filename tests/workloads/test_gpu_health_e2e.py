"""End to end, on 127.0.0.1 only: a fake DCGM exporter serves DCGM_FI_DEV_XID_ERRORS; a real
Prometheus scrapes it every second and evaluates the program's own rules
(components.monitoring.alerts.rule_groups, rendered as a plain rule file: GpuFatalXidError has no
`for`, so no threshold needs shortening); a real Alertmanager (group_wait 1s) routes to two
`python -m gpuhealth` processes, one acting and one --dry-run, each with its own Kubernetes API
stand-in (tests/fake_k8s_api.py). Alertmanager is configured with the program's own receiver
(components/monitoring/gpu_health.py): it sends the webhook's bearer token, which it reads from a
credentials_file, as in the cluster. It proves:

* a request without the token, or with another, gets 401 and changes nothing (gpu-3 is never
  touched), while every notification of the real Alertmanager carries the token and is acted on;

* a fatal XID (79) on gpu-1 ends in a cordon, the gpu-unhealthy taint and a policy/v1 eviction of
  the GPU pod; the pod's PodDisruptionBudget answers 429 once, and the eviction is retried and
  succeeds, with no DELETE ever sent;
* a second fatal XID (48 on gpu-2) is refused by the breaker (--max-nodes-out 1): an Event and
  the refused metric, no change to gpu-2;
* the --dry-run service reports the same two decisions as Events and changes nothing;
* after the GPU is reset (XID back to 0) and a passing diagnostic annotation appears, gpu-1 is
  uncordoned and untainted, and then gpu-2 (still firing) is taken out in its place.
Every wait is bounded; the test skips when the Debian binaries `prometheus` (package prometheus)
or `prometheus-alertmanager` (package prometheus-alertmanager) are missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import gpu_health as health_monitoring
from components.monitoring.alerts import rule_groups
from config.monitoring import MonitoringAlerts
from tests.conftest import PROJECT_DIR
from tests.fake_k8s_api import TOKEN, FakeKubeApi
from tests.processes import stop

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import service as svc  # noqa: E402

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"),
    pytest.mark.skipif(ALERTMANAGER is None,
                       reason="alertmanager not installed (apt-get install prometheus-alertmanager)"),
]
STARTUP_SECONDS = 30.0
WEBHOOK_TOKEN = "e2e-webhook-token-9f2c"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], seconds: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / 0.2) + 1):
        if check():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"not within {seconds} s: {what}\n{tails}")


class FakeDcgm:
    """/metrics with DCGM_FI_DEV_XID_ERRORS per node (GPU 0), `node` set as the ServiceMonitors set it."""

    def __init__(self, nodes: list[str]) -> None:
        self.xid = dict.fromkeys(nodes, 0)

    def text(self) -> str:
        lines = ["# TYPE DCGM_FI_DEV_XID_ERRORS gauge"]
        for node, xid in sorted(self.xid.items()):
            lines.append(f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-{node}",node="{node}"}} {xid}')
        return "\n".join(lines) + "\n"

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        dcgm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:
                body = dcgm.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


@contextlib.contextmanager
def process(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if env is not None else out, stderr=out,
                                stdin=subprocess.DEVNULL, text=True, env=env)
        try:
            yield proc
        finally:
            stop(proc, grace=15)


@contextlib.contextmanager
def gpu_health(api_url: str, token: Path, log: Path, webhook_token: Path, *extra: str) -> Iterator[str]:
    cmd = [sys.executable, "-m", "gpuhealth", "--listen-address", "127.0.0.1", "--port", "0", "--api-server", api_url,
           "--token-file", str(token), "--insecure-loopback", "--max-nodes-out", "1", "--max-percent-out", "50",
           "--reconcile-seconds", "1", *extra]
    # the webhook's token through the environment, as the Deployment sets it
    env = {**os.environ, "PYTHONPATH": str(WORKLOADS), "GPU_HEALTH_WEBHOOK_TOKEN_FILE": str(webhook_token)}
    with process(cmd, log, env) as proc:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], STARTUP_SECONDS)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("listening on 127.0.0.1:"), f"gpuhealth did not start: {line!r}\n{log.read_text()}"
        yield f"http://127.0.0.1:{line.strip().rsplit(':', 1)[1]}"


def _ready(url: str) -> bool:
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    return False


@contextlib.contextmanager
def alertmanager(tmp: Path, webhooks: list[str], credentials_file: Path) -> Iterator[str]:
    """A real Alertmanager sending to `webhooks` with the bearer token it reads from
    `credentials_file`, configured as the program configures it (components/monitoring/gpu_health.py)."""
    assert ALERTMANAGER is not None
    receiver = health_monitoring.alertmanager_values(webhooks[0])["receivers"][1]
    (webhook_config,) = receiver["webhook_configs"]
    http_config = webhook_config["http_config"]
    # the program's file path is the Secret's mount in the Alertmanager pod; here the test's file
    http_config["authorization"]["credentials_file"] = str(credentials_file)
    config = {
        "route": {"receiver": "gpu-health", "group_by": ["alertname", "node"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "gpu-health",
                       "webhook_configs": [{**webhook_config, "url": u} for u in webhooks]}],
    }
    (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    cmd = [ALERTMANAGER, f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am-data'}",
           f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]
    with process(cmd, tmp / "alertmanager.log") as proc:
        base = f"http://127.0.0.1:{port}"
        wait_for("alertmanager ready", lambda: proc.poll() is None and _ready(base + "/-/ready"), STARTUP_SECONDS,
                 [tmp / "alertmanager.log"])
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def prometheus(tmp: Path, dcgm: str, am: str) -> Iterator[str]:
    assert PROMETHEUS is not None
    rules = tmp / "rules.yaml"
    # The program's own rules, as the PrometheusRule carries them.
    rules.write_text(yaml.safe_dump({"groups": rule_groups(MonitoringAlerts())}, sort_keys=False))
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]},
        "scrape_configs": [{"job_name": "nvidia-dcgm-exporter", "static_configs": [{"targets": [dcgm]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    cmd = [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'prom-data'}",
           f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", "--rules.alert.resend-delay=1s"]
    with process(cmd, tmp / "prometheus.log") as proc:
        base = f"http://127.0.0.1:{port}"
        wait_for("prometheus ready", lambda: proc.poll() is None and _ready(base + "/-/ready"), STARTUP_SECONDS,
                 [tmp / "prometheus.log"])
        yield base


def _cordoned(api: FakeKubeApi, node: str) -> bool:
    n = api.node(node)
    return n["spec"].get("unschedulable") is True and any(t["key"] == svc.TAINT_KEY for t in n["spec"].get("taints", []))


def _post_alert(url: str, node: str, authorization: str | None) -> int:
    """An XID 79 for `node` straight to the service's webhook; the HTTP status."""
    body = json.dumps({"version": "4", "status": "firing", "alerts": [{
        "status": "firing", "labels": {"alertname": "GpuFatalXidError", "node": node, "gpu": "0", "xid": "79"},
        "annotations": {}, "startsAt": svc.fmt_time(dt.datetime.now(dt.UTC))}]}).encode()
    req = urllib.request.Request(url + "/webhook", data=body, method="POST", headers={"Content-Type": "application/json"})
    if authorization is not None:
        req.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def test_alert_to_cordon_breaker_dry_run_and_return(tmp_path: Path) -> None:
    nodes = [f"gpu-{i}" for i in range(1, 5)]
    real, dry = FakeKubeApi(), FakeKubeApi()
    for api in (real, dry):
        for n in nodes:
            api.add_node(n)
        api.add_pod("team", "train-0", "gpu-1", pdb_blocks=1)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    # the webhook's bearer token: the service reads it from its file, Alertmanager from its own
    # copy (credentials_file), as each mounts the Secret in the cluster
    webhook_token = tmp_path / "webhook-token"
    webhook_token.write_text(WEBHOOK_TOKEN + "\n")
    credentials = tmp_path / "alertmanager-credentials"
    credentials.write_text(WEBHOOK_TOKEN + "\n")
    dcgm = FakeDcgm(nodes)
    dcgm.xid["gpu-1"] = 79
    logs = [tmp_path / n for n in ("gpuhealth.log", "gpuhealth-dry.log", "alertmanager.log", "prometheus.log")]
    started = time.monotonic()

    with contextlib.ExitStack() as stack:
        real_api = stack.enter_context(real.serve())
        dry_api = stack.enter_context(dry.serve())
        dcgm_target = stack.enter_context(dcgm.serve())
        real_url = stack.enter_context(gpu_health(real_api, token, logs[0], webhook_token))
        dry_url = stack.enter_context(gpu_health(dry_api, token, logs[1], webhook_token, "--dry-run"))

        # 0. without the token (or with another): 401, nothing queued, nothing changed
        for authorization in (None, "Bearer not-the-token"):
            assert _post_alert(real_url, "gpu-3", authorization) == 401
        am = stack.enter_context(alertmanager(tmp_path, [real_url + "/webhook", dry_url + "/webhook"], credentials))
        stack.enter_context(prometheus(tmp_path, dcgm_target, am))

        # 1. fatal XID: cordon, taint, eviction (429 from the PDB first, retried, never forced)
        wait_for("gpu-1 cordoned and tainted", lambda: _cordoned(real, "gpu-1"), 30, logs)
        taint = next(t for t in real.node("gpu-1")["spec"]["taints"] if t["key"] == svc.TAINT_KEY)
        assert (taint["value"], taint["effect"]) == ("xid-79", "NoSchedule")
        assert real.node("gpu-1")["metadata"]["annotations"][svc.ANN_ACTION] == "reboot"
        wait_for("train-0 evicted after the PDB let it", lambda: ("team", "train-0") not in real.pods, 15, logs)
        assert [c.status for c in real.calls_of("POST", "train-0/eviction")] == [429, 201]
        assert not real.calls_of("DELETE")
        # it came through Alertmanager's webhook, from the program's own rule
        assert 'gpu_health_alerts_received_total{alertname="GpuFatalXidError",status="firing"}' in _metrics(real_url)
        assert {"GpuHealthOutOfService", "GpuHealthEvictionBlocked", "GpuHealthEvicted"} <= set(
            real.event_reasons("gpu-1"))

        # 2. a second node's fatal XID: refused by the breaker, nothing done to it
        dcgm.xid["gpu-2"] = 48
        wait_for("gpu-2 refused", lambda: "GpuHealthRefused" in real.event_reasons("gpu-2"), 20, logs)
        assert not real.calls_of("PATCH", "gpu-2") and not _cordoned(real, "gpu-2")
        assert ('gpu_health_actions_total{action="reset-gpu",reason="GpuFatalXidError",result="refused"} 1.0'
                in _metrics(real_url))

        # 3. dry run: the same decisions, reported only
        wait_for("dry run reported both", lambda: "GpuHealthDryRun" in dry.event_reasons("gpu-1")
                 and "GpuHealthRefused" in dry.event_reasons("gpu-2"), 10, logs)
        assert not dry.calls_of("PATCH") and not dry.calls_of("POST", "/eviction") and not dry.calls_of("DELETE")
        assert ("team", "train-0") in dry.pods
        assert 'result="dry-run"} 1.0' in _metrics(dry_url)

        # 4. the GPU is reset and its diagnostic passes: back in service; gpu-2 goes out in its place
        dcgm.xid["gpu-1"] = 0
        acted = svc.parse_time(real.node("gpu-1")["metadata"]["annotations"][svc.ANN_TIME])
        assert acted is not None
        passed = max(dt.datetime.now(dt.UTC), acted + dt.timedelta(seconds=1))
        real.annotate("gpu-1", {svc.DIAG: "pass", svc.DIAG_TIME: svc.fmt_time(passed),
                                svc.DIAG_EXPIRES: svc.fmt_time(passed + dt.timedelta(hours=1))})
        # The service patches the node, then posts its event: wait for both (CI saw the assert
        # land between the two).
        wait_for("gpu-1 back in service", lambda: not _cordoned(real, "gpu-1")
                 and "unschedulable" not in real.node("gpu-1")["spec"]
                 and "GpuHealthReturned" in real.event_reasons("gpu-1"), 15, logs)
        wait_for("gpu-2 taken out once room freed", lambda: _cordoned(real, "gpu-2"), 15, logs)
        assert not _cordoned(real, "gpu-1")
        assert 'gpu_health_nodes_out_of_service 1.0' in _metrics(real_url)
        # every notification Alertmanager sent carried the token; only the test's two were refused
        text = _metrics(real_url)
        assert 'gpu_health_http_requests_total{code="401",handler="webhook"} 2.0' in text
        assert 'gpu_health_http_requests_total{code="200",handler="webhook"}' in text
    assert not real.calls_of("PATCH", "gpu-3") and not real.event_reasons("gpu-3")
    assert time.monotonic() - started < 90, "the e2e should stay well under a minute"
