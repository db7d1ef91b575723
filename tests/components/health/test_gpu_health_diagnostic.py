"""The GPU health diagnostic (components/gpu_health.py, components/gpu_health_diag.py): a DCGM
diagnostic CronJob per GPU node taking every GPU, the recorder that writes its verdict to the node's
annotations (against an API server stand-in on loopback), and both containers of its pod run end to
end with stand-ins for NVIDIA's tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from components import gpu_health, gpu_health_diag, versions
from components.gpu_health import DIAG_NAME, NAME, NAMESPACE, TAINT_KEY
from config.scheduling_contract import GPU_TOLERATION
from render import program
from tests.components.health.rendered_health import IMAGE, config_with, find, plan
from tests.conftest import PROJECT_DIR

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import service as svc  # noqa: E402

# --- the diagnostic -------------------------------------------------------------------------------


def test_the_diagnostic_pod_takes_every_gpu_of_its_node() -> None:
    cfg = plan("lab").config
    for host in (h for h in cfg.hosts if h.is_gpu):
        cron = find("lab", "CronJob", f"gpu-diag-{host.name}")
        assert cron["spec"]["schedule"] == cfg.gpu_health.diagnostic.schedule and cron["spec"]["suspend"] is False
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (diag,) = pod["initContainers"]
        assert diag["image"] == versions.DCGM_IMAGE
        assert diag["resources"]["limits"]["nvidia.com/gpu"] == host.gpus
        assert "dcgmi diag -r 1 -j" in diag["command"][-1]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [host.name]}]}]
        assert GPU_TOLERATION in pod["tolerations"]
        # It runs on a node the service took out: cordoned, and tainted with any effect.
        assert {"key": TAINT_KEY, "operator": "Exists"} in pod["tolerations"]
        assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        # ... and the service's drain of that node leaves it be (gpuhealth.service.DIAG_POD_LABEL)
        key, value = svc.DIAG_POD_LABEL
        assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"][key] == value
        assert cron["metadata"]["namespace"] == NAMESPACE
        (record,) = pod["containers"]
        assert record["image"] == IMAGE and "--level" in record["command"]
        on_demand = find("lab", "CronJob", f"gpu-diag-l2-{host.name}")
        assert on_demand["spec"]["suspend"] is True
        l2 = on_demand["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]
        assert "dcgmi diag -r 2 -j" in l2["command"][-1]


def test_the_recorder_script_in_the_configmap_is_the_tested_one() -> None:
    cm = find("lab", "ConfigMap", "gpu-diag-record")
    assert cm["data"]["record.py"] == Path(gpu_health_diag.__file__).read_text()


def test_long_node_names_keep_cronjob_names_short_and_apart() -> None:
    a, b = "x" * 60 + ".example.com", "x" * 60 + ".example.org"
    names = {gpu_health._short("gpu-diag-l2", n) for n in (a, b)}
    assert len(names) == 2 and all(len(n) <= 52 for n in names)


# --- the recorder, against an API server stand-in on loopback -------------------------------------


class _Api(BaseHTTPRequestHandler):
    patches: list[tuple[str, str, str, dict[str, Any]]] = []

    def do_PATCH(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).patches.append((self.path, self.headers["Content-Type"], self.headers["Authorization"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[tuple[str, list[tuple[str, str, str, dict[str, Any]]]]]:
    _Api.patches = []
    server = HTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Api.patches
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _record(tmp_path: Path, api_url: str, rc: str | None, report: Any = None, level: int = 1) -> int:
    results = tmp_path / "results"
    results.mkdir()
    if rc is not None:
        (results / "rc").write_text(rc + "\n")
    if report is not None:
        (results / "diag.json").write_text(json.dumps(report))
    token = tmp_path / "token"
    token.write_text("test-token\n")
    return gpu_health_diag.main(["--results", str(results), "--level", str(level), "--valid-hours", "48",
                                 "--node", "gpu-1", "--api", api_url, "--token-file", str(token)])


FAILING = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
    {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Fail", "info": "Row remap failure"}]}]}]}}
PASSING = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
    {"name": "Denylist", "results": [{"status": "Pass"}]}]}]}}


def test_a_passing_diagnostic_is_written_to_the_node(tmp_path: Path, api: tuple[str, list[Any]]) -> None:
    url, patches = api
    assert _record(tmp_path, url, "0", PASSING) == 0
    ((path, content_type, auth, body),) = patches
    assert (path, content_type, auth) == ("/api/v1/nodes/gpu-1", "application/merge-patch+json", "Bearer test-token")
    marks = body["metadata"]["annotations"]
    assert set(marks) == {"gpu-cluster.io/diag-level1", "gpu-cluster.io/diag-level1-time",
                          "gpu-cluster.io/diag-level1-expires"}
    assert marks["gpu-cluster.io/diag-level1"] == "pass"
    assert marks["gpu-cluster.io/diag-level1-expires"] > marks["gpu-cluster.io/diag-level1-time"]


def test_a_failing_test_is_a_fail_and_level_2_writes_both_levels(tmp_path: Path, api: tuple[str, list[Any]]) -> None:
    url, patches = api
    assert _record(tmp_path, url, "226", FAILING, level=2) == 0
    marks = patches[0][3]["metadata"]["annotations"]
    assert marks["gpu-cluster.io/diag-level1"] == marks["gpu-cluster.io/diag-level2"] == "fail"


@pytest.mark.parametrize(("rc", "report"), [(None, None), ("hostengine", None), ("1", None), ("1", PASSING)],
                         ids=["no-run", "no-hostengine", "no-report", "error-without-failing-test"])
def test_no_verdict_leaves_the_node_alone(tmp_path: Path, api: tuple[str, list[Any]], rc: str | None,
                                          report: Any) -> None:
    url, patches = api
    assert _record(tmp_path, url, rc, report) == 2
    assert patches == []


# --- both containers of the diagnostic pod, with stand-ins for NVIDIA's tools ----------------------


def _stand_ins(bin_dir: Path, hostengine_rc: int, dcgmi_rc: int, report: Any) -> None:
    bin_dir.mkdir()
    (bin_dir / "nv-hostengine").write_text(f"#!/bin/sh\necho \"$@\" >> {bin_dir}/hostengine.calls\nexit {hostengine_rc}\n")
    (bin_dir / "report.json").write_text(json.dumps(report))
    (bin_dir / "dcgmi").write_text(f"#!/bin/sh\necho \"$@\" > {bin_dir}/dcgmi.args\ncat {bin_dir}/report.json\n"
                                   f"exit {dcgmi_rc}\n")
    for tool in ("nv-hostengine", "dcgmi"):
        (bin_dir / tool).chmod(0o755)


@pytest.mark.parametrize(("hostengine_rc", "dcgmi_rc", "report", "written"), [
    (0, 0, PASSING, "pass"),
    (0, 226, FAILING, "fail"),
    (1, 0, PASSING, None),  # no hostengine: no verdict, the node is left alone
], ids=["pass", "fail", "no-hostengine"])
def test_the_diagnostic_pod_end_to_end(tmp_path: Path, api: tuple[str, list[Any]], hostengine_rc: int,
                                       dcgmi_rc: int, report: Any, written: str | None) -> None:
    url, patches = api
    bin_dir, results = tmp_path / "bin", tmp_path / "results"
    results.mkdir()
    _stand_ins(bin_dir, hostengine_rc, dcgmi_rc, report)
    command = gpu_health.diag_command(1, str(results))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr  # the DCGM container always succeeds: the recorder runs
    token = tmp_path / "token"
    token.write_text("t")
    rc = gpu_health_diag.main(["--results", str(results), "--level", "1", "--valid-hours", "48",
                               "--node", "gpu-1", "--api", url, "--token-file", str(token)])
    if written is None:
        assert (rc, patches) == (2, [])
        return
    assert rc == 0
    assert (bin_dir / "dcgmi.args").read_text().split() == ["diag", "-r", "1", "-j"]
    assert patches[0][3]["metadata"]["annotations"]["gpu-cluster.io/diag-level1"] == written
    calls = (bin_dir / "hostengine.calls").read_text().splitlines()
    assert calls[-1].startswith("--term")  # the pod's hostengine is stopped again


def test_no_diagnostic_under_mig_or_when_turned_off() -> None:
    # DCGM's diagnostic does not run on MIG-partitioned GPUs; the service itself still runs.
    for override in ({"gpu": {"stack": "device-plugin", "sharing": {"mode": "mig"}}},
                     {"gpuHealth": {"diagnostic": {"enabled": False}}}):
        p = program.run("dev", config=config_with("dev", **override))
        names = {r.inputs.get("metadata", {}).get("name") for r in p.resources if r.type.startswith("kubernetes:")}
        assert NAME in names and not {n for n in names if n and n.startswith(DIAG_NAME)}, override
        assert p.outputs["gpuHealth"]["diagnostic"].startswith("none")
