"""The GPU health service's HTTP side (workloads/gpuhealth/web.py) and CLI, on 127.0.0.1 against the
Kubernetes API stand-in (tests/fake_k8s_api.py):

* the webhook acts only with the bearer token of --webhook-token-file: without it, or with another,
  401 and nothing changes (no alert counted, no node touched); the file is re-read when it changes;
* each alert of a batch is judged alone: malformed ones (a label that is a list, ...) are answered
  in the body with their index and reason, logged and counted, and the valid XID 79 beside them is
  acted on;
* every request gets an HTTP answer, raw over a socket: 400 with the reason (not JSON, too deeply
  nested, wrong shape, bad Content-Length, a body that stops short), 411, 413, 404, 405;
* /healthz fails when reconcile passes keep failing or one is stuck, not only when the thread died,
  and recovers; the last successful pass is a metric;
* the CLI refuses to start without a token file.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import PROJECT_DIR
from tests.fake_k8s_api import TOKEN, FakeKubeApi
from tests.workloads.test_gpu_health import Clock, alert, metric, service, webhook

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import service as svc  # noqa: E402
from gpuhealth.kube import KubeClient  # noqa: E402
from gpuhealth.web import Server, WebhookToken  # noqa: E402

WEBHOOK_TOKEN = "s3cr3t-webhook-token-for-tests"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, KubeClient]]:
    fake = FakeKubeApi()
    for i in range(1, 5):
        fake.add_node(f"gpu-{i}")
    fake.add_pod("team", "train-0", "gpu-1")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with fake.serve() as url:
        yield fake, KubeClient(url, token, None, insecure_loopback=True)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "webhook-token"
    path.write_text(WEBHOOK_TOKEN + "\n")
    return path


@contextlib.contextmanager
def running(health: svc.GpuHealth, token_file: Path, **kw: Any) -> Iterator[Server]:
    server = Server(health, "127.0.0.1", 0, WebhookToken(token_file), **kw)
    server.start()
    try:
        yield server
    finally:
        server.shutdown()


def _post(server: Server, body: bytes, token: str | None = WEBHOOK_TOKEN, path: str = "/webhook") -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _get(server: Server, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait(check: Any, seconds: float) -> bool:
    for _ in range(int(seconds / 0.05) + 1):
        if check():
            return True
        time.sleep(0.05)
    return False


# --- the token -------------------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [
    None, "Bearer wrong-token", f"Basic {WEBHOOK_TOKEN}", f"Bearer {WEBHOOK_TOKEN}x", f"Bearer {WEBHOOK_TOKEN[:-1]}", "Bearer",
])
def test_webhook_without_the_token_gets_401_and_changes_nothing(api: tuple[FakeKubeApi, KubeClient], token_file: Path,
                                                                authorization: str | None) -> None:
    fake, kube = api
    health = service(kube, Clock(), reconcile_seconds=0.1)
    body = json.dumps(webhook(alert("gpu-1", 79))).encode()
    with running(health, token_file) as server:
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/webhook", data=body, method="POST")
        if authorization is not None:
            req.add_header("Authorization", authorization)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
        # several passes of the loop later: nothing queued, nothing changed
        passes = _wait(lambda: len(fake.calls_of("GET", "/api/v1/nodes")) >= 3, 10)
        assert passes
    assert not fake.calls_of("PATCH") and not fake.calls_of("POST", "/eviction") and not fake.events
    assert metric(health, "gpu_health_alerts_received_total", alertname="GpuFatalXidError", status="firing") == 0
    assert metric(health, "gpu_health_http_requests_total", handler="webhook", code="401") == 1


def test_webhook_with_the_token_acts(api: tuple[FakeKubeApi, KubeClient], token_file: Path) -> None:
    fake, kube = api
    health = service(kube, Clock())
    with running(health, token_file) as server:
        status, body = _post(server, json.dumps(webhook(alert("gpu-1", 79))).encode())
        assert (status, json.loads(body)) == (200, {"accepted": 1, "rejected": []})
        assert _wait(lambda: bool(fake.calls_of("PATCH")), 10), "the webhook wakes the loop"
        assert fake.node("gpu-1")["spec"]["unschedulable"] is True
        assert _wait(lambda: metric(health, "gpu_health_nodes_out_of_service") == 1, 10), "the pass ends"
        text = _get(server, "/metrics")[1].decode()
    assert 'gpu_health_actions_total{action="reboot",reason="GpuFatalXidError",result="done"} 1.0' in text
    assert "gpu_health_nodes_out_of_service 1.0" in text


def test_the_token_file_is_reread_when_it_changes(token_file: Path) -> None:
    token = WebhookToken(token_file)
    assert token.admits(f"Bearer {WEBHOOK_TOKEN}") and token.admits(f"bearer {WEBHOOK_TOKEN}")
    replacement = token_file.with_name("new-token")
    replacement.write_text("rotated-token\n")
    os.replace(replacement, token_file)  # as a Secret volume swaps its files
    assert token.admits("Bearer rotated-token") and not token.admits(f"Bearer {WEBHOOK_TOKEN}")
    token_file.write_text("")  # an empty new version keeps the last good token
    assert token.admits("Bearer rotated-token")


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="webhook-token-file"):
        WebhookToken(tmp_path / "empty")
    with pytest.raises(ValueError, match="webhook-token-file"):
        WebhookToken(tmp_path / "absent")


# --- each alert judged alone -----------------------------------------------------------------------


def test_a_malformed_alert_does_not_drop_the_valid_ones(api: tuple[FakeKubeApi, KubeClient], token_file: Path) -> None:
    fake, kube = api
    health = service(kube, Clock())
    list_label = alert("gpu-2", 79)
    list_label["labels"]["node"] = ["gpu-2", "gpu-3"]  # a label that is a list
    list_name = alert("gpu-3", 48)
    list_name["labels"]["alertname"] = ["GpuFatalXidError"]
    bad_status = {**alert("gpu-4", 48), "status": ["firing"]}
    batch = webhook(list_label, cast(Any, "not an alert"), alert("gpu-1", 79), {"labels": ["node=gpu-4"]}, list_name,
                    bad_status, {**alert("gpu-4", 48), "startsAt": 12})
    with running(health, token_file) as server:
        status, body = _post(server, json.dumps(batch).encode())
        assert status == 200
        answer = json.loads(body)
        assert answer["accepted"] == 1
        assert [r["alert"] for r in answer["rejected"]] == [0, 1, 3, 4, 5, 6]
        reasons = [r["reason"] for r in answer["rejected"]]
        assert reasons[0].startswith("labels.node: not a string (list)")
        assert reasons[1].startswith("not an object (str)")
        assert reasons[2].startswith("labels: not a map of strings (list)")
        assert reasons[3].startswith("labels.alertname: not a string")
        assert reasons[4].startswith("status: not one of firing, resolved")
        assert reasons[5].startswith("startsAt: not a string (int)")
        assert _wait(lambda: bool(fake.calls_of("PATCH", "gpu-1")), 10), "the XID 79 beside them is acted on"
    assert fake.node("gpu-1")["metadata"]["annotations"][svc.ANN_ACTION] == "reboot"
    assert not fake.calls_of("PATCH", "gpu-2") and not fake.calls_of("PATCH", "gpu-3")
    assert metric(health, "gpu_health_alerts_rejected_total", field="labels") == 3
    assert metric(health, "gpu_health_alerts_rejected_total", field="alert") == 1
    assert metric(health, "gpu_health_alerts_received_total", alertname="GpuFatalXidError", status="firing") == 1


def test_an_xid_of_thousands_of_digits_is_an_unknown_xid_not_an_error(api: tuple[FakeKubeApi, KubeClient]) -> None:
    _, kube = api
    health = service(kube, Clock())
    long_xid = alert("gpu-1", None)
    long_xid["labels"]["xid"] = "9" * 5000
    judged = health.handle_webhook(webhook(long_xid, alert("gpu-2", 79)))
    assert [j.problem for j in judged] == ["", ""]
    assert judged[0].request is not None and judged[0].request.xid is None  # the unknown-XID rule: cordon
    assert judged[1].request is not None and judged[1].request.xid == 79


# --- every request gets an answer ------------------------------------------------------------------


def _raw(port: int, request: bytes, wait: float = 15.0) -> str:
    """Send `request` as it is; the status line of the answer ("" when none comes before the
    connection closes or `wait` seconds pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(request)
        data = b""
        with contextlib.suppress(OSError):
            for _ in range(1000):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def _request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
             length: str | None = "auto", token: bool = True) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if token:
        lines.append(f"Authorization: Bearer {WEBHOOK_TOKEN}")
    if length == "auto":
        lines.append(f"Content-Length: {len(body)}")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


LIST_LABEL = json.dumps(webhook({**alert("gpu-2", 79), "labels": {"alertname": "GpuFatalXidError",
                                                                   "node": ["gpu-2"]}})).encode()
LIST_NAME = json.dumps(webhook({**alert("gpu-2", 79), "labels": {"alertname": ["GpuFatalXidError"],
                                                                  "node": "gpu-2"}})).encode()
# request -> the status code it must get; today's code answered none of "nested too deep", "an
# alertname that is a list", "Content-Length with underscores" and "body shorter than its length".
ANSWERS = {
    "not JSON": (_request("POST", "/webhook", b"not json"), "400"),
    "not UTF-8": (_request("POST", "/webhook", b'{"alerts": ["\xff\xfe"]}'), "400"),
    "nested too deep": (_request("POST", "/webhook", b"[" * 200_000), "400"),
    "a JSON array": (_request("POST", "/webhook", b"[]"), "400"),
    "no alerts list": (_request("POST", "/webhook", b'{"alerts": {}}'), "400"),
    "bad group status": (_request("POST", "/webhook", b'{"status": 1, "alerts": []}'), "400"),
    "a label that is a list": (_request("POST", "/webhook", LIST_LABEL), "200"),
    "an alertname that is a list": (_request("POST", "/webhook", LIST_NAME), "200"),
    "Content-Length not a number": (_request("POST", "/webhook", b"{}", length="abc"), "400"),
    "Content-Length negative": (_request("POST", "/webhook", b"{}", length="-1"), "400"),
    "Content-Length with underscores": (_request("POST", "/webhook", b"{}", length="1_0"), "400"),
    "two Content-Lengths": (_request("POST", "/webhook", b"{}", headers={"Content-Length": "3"}), "400"),
    "no Content-Length": (_request("POST", "/webhook", b"{}", length=None), "411"),
    "empty body": (_request("POST", "/webhook", b""), "400"),
    "over the size limit": (_request("POST", "/webhook", b"{}", length=str(64 * 1024 * 1024)), "413"),
    "body shorter than its length": (_request("POST", "/webhook", b'{"alerts": [', length="100"), "400"),
    "no token, bad body": (_request("POST", "/webhook", b"[" * 1000, token=False), "401"),
    "GET on the webhook": (_request("GET", "/webhook", length=None), "405"),
    "PUT on the webhook": (_request("PUT", "/webhook", b"{}"), "405"),
    "POST on /metrics": (_request("POST", "/metrics", b"{}"), "405"),
    "DELETE on /healthz": (_request("DELETE", "/healthz", length=None), "405"),
    "unknown path": (_request("GET", "/nope", length=None), "404"),
    "unknown path, POST": (_request("POST", "/nope", b"{}"), "404"),
}


@pytest.mark.parametrize("case", list(ANSWERS))
def test_every_request_gets_an_answer(api: tuple[FakeKubeApi, KubeClient], token_file: Path, case: str) -> None:
    _, kube = api
    request, code = ANSWERS[case]
    health = service(kube, Clock())
    started = time.monotonic()
    with running(health, token_file, read_timeout=1.0) as server:
        status_line = _raw(server.port, request)
    assert status_line.split(" ")[1:2] == [code], f"{case}: {status_line!r}"
    assert time.monotonic() - started < 10
    assert metric(health, "gpu_health_http_requests_total", handler=server_handler(request), code=code) == 1


def server_handler(request: bytes) -> str:
    path = request.split(b" ", 2)[1].decode()
    return {"/metrics": "metrics", "/healthz": "healthz", "/webhook": "webhook"}.get(path, "other")


def test_a_large_body_without_the_token_still_reads_its_401(api: tuple[FakeKubeApi, KubeClient],
                                                             token_file: Path) -> None:
    """The body is never read without the token, yet the client gets the answer, not a reset."""
    _, kube = api
    with running(service(kube, Clock()), token_file) as server:
        status, _ = _post(server, b" " * (512 * 1024), token=None)
    assert status == 401


# --- /healthz --------------------------------------------------------------------------------------


def test_healthz_fails_while_every_pass_fails_and_recovers(api: tuple[FakeKubeApi, KubeClient], token_file: Path,
                                                           tmp_path: Path) -> None:
    fake, kube = api
    with socket.socket() as s:  # a port nothing listens on: every API call fails
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    broken = KubeClient(f"http://127.0.0.1:{dead}", kube.token_file, None, insecure_loopback=True)
    health = service(broken, Clock(), reconcile_seconds=0.2, stale_reconciles=2)
    with running(health, token_file) as server:
        assert _wait(lambda: _get(server, "/healthz")[0] == 503, 10)
        status, body = _get(server, "/healthz")
        assert b"no successful reconcile pass" in body and server.loop.is_alive()
        assert metric(health, "gpu_health_reconcile_failures_total") >= 2
        assert metric(health, "gpu_health_last_successful_reconcile_timestamp_seconds") == 0
        health.kube = kube  # the API is back
        assert _wait(lambda: _get(server, "/healthz")[0] == 200, 10)
    assert metric(health, "gpu_health_last_successful_reconcile_timestamp_seconds") == Clock().now.timestamp()


class _StuckApi:
    """A Kubernetes API client whose node listing hangs until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def list_nodes(self) -> list[dict[str, Any]]:
        self.release.wait(30)
        return []

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return []


def test_healthz_fails_while_a_pass_is_stuck(token_file: Path) -> None:
    stuck = _StuckApi()
    health = service(cast(KubeClient, stuck), Clock(), reconcile_seconds=0.2, stale_reconciles=2)
    try:
        with running(health, token_file) as server:
            assert _wait(lambda: _get(server, "/healthz")[0] == 503, 10)
            assert server.loop.is_alive(), "the thread lives: only the stale pass shows the fault"
            stuck.release.set()
            assert _wait(lambda: _get(server, "/healthz")[0] == 200, 10)
    finally:
        stuck.release.set()


# --- the CLI ---------------------------------------------------------------------------------------


def test_cli(tmp_path: Path, token_file: Path) -> None:
    env = {"PYTHONPATH": str(WORKLOADS), "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "gpuhealth"]
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert out.returncode == 0
    for flag in ("--dry-run", "--max-nodes-out", "--max-percent-out", "--reconcile-seconds", "--gpu-resource", "--port",
                 "--webhook-token-file", "--stale-reconciles"):
        assert flag in out.stdout
    no_token = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert no_token.returncode == 2 and "--webhook-token-file" in no_token.stderr
    env = {**env, "GPU_HEALTH_WEBHOOK_TOKEN_FILE": str(token_file)}
    empty = tmp_path / "empty"
    empty.write_text("")
    no_value = subprocess.run([*run, "--webhook-token-file", str(empty), "--api-server", "http://127.0.0.1:1",
                               "--insecure-loopback"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert no_value.returncode == 2 and "empty or unreadable" in no_value.stderr
    bad = subprocess.run([*run, "--api-server", "http://10.0.0.1:6443", "--insecure-loopback"], capture_output=True,
                         text=True, timeout=60, env=env, check=False)
    assert bad.returncode == 2 and "loopback" in bad.stderr
    no_cluster = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert no_cluster.returncode == 2 and "KUBERNETES_SERVICE_HOST" in no_cluster.stderr
    bad_env = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False,
                             env={**env, "GPU_HEALTH_MAX_PERCENT_OUT": "200", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert bad_env.returncode == 2 and "max-percent-out" in bad_env.stderr
