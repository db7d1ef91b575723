"""The NCCL pair check end to end, on 127.0.0.1: the lab plan's pair CronJob, its two pods run as
processes, their verdicts written onto the nodes, and the GPU health service acting on them.

Real: the pod command and env of the rendered lab plan's `nccl-pair-<hex>` CronJob (jobTemplate,
container 0; not rebuilt by hand), with `$(VAR)` references expanded as the kubelet does (JOB_NAME
from the Job's name label); the launch script's preflight, torchrun
(c10d rendezvous) and trainer.allreduce_bench's sweep and verdict, whose exit codes become the
pods' container states; the GPU health service's reconcile (gpuhealth.service) finding those pods
by the rendered labels and annotations, writing the verdicts onto the nodes (a JSON merge PATCH
over HTTP), then acting on them.

Stood in: the Kubernetes API server (tests/fake_k8s_api.py on loopback, bearer token from a file);
the Job controller and kubelet (one process tree per completion index, JOB_COMPLETION_INDEX set,
MASTER_ADDR mapped to 127.0.0.1 and a free port; the finished pod objects built from the rendered
template and the real exit codes); GPUs and NCCL (gloo on CPU, one worker per pod).
Only sizes are shrunk (the sweep's sizes and iterations), --backend=gloo is added and --link-gbps is
set per case, by rewriting the module's own arguments (tests/workloads/test_training_e2e.py's helpers).

- pass: --link-gbps tiny: both pods exit 0 and each node gets `gpu-cluster.io/<cronjob>` with
  result pass, the other node as peer, code 0 and an expiry valid-hours after its time;
- fail: --link-gbps 3200: both pods exit 10 (trainer.nccl EXIT_LOW_BUSBW), both nodes get result
  fail, code 10;
- the service, fed those real annotation values: with the two lab nodes a failure names no node
  (an Event, no cordon); in a ring of three where gpu-1 fails with both peers and gpu-2 passes with
  gpu-3, gpu-1 alone is tainted out of service, and nothing is evicted.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")

from components.gpu_health_pairs import check_name  # noqa: E402
from components.storage_contract import MOUNT_ROOT  # noqa: E402
from components.training import launch  # noqa: E402
from config.health import NcclPairCheck  # noqa: E402
from tests import kubelet  # noqa: E402
from tests.conftest import PROJECT_DIR  # noqa: E402
from tests.fake_k8s_api import TOKEN, FakeKubeApi  # noqa: E402
from tests.workloads.test_training_e2e import (  # noqa: E402
    BENCH_SIZES,
    Pod,
    PodSpec,
    _descendants,
    free_port,
    localize,
    pod_env,
    wait_all,
)

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import service as svc  # noqa: E402
from gpuhealth.kube import KubeClient  # noqa: E402
from trainer import nccl  # noqa: E402

WAIT_SECONDS = 90
JOB_SUFFIX = "-29000000"  # the CronJob controller names its Jobs <cronjob>-<scheduled minutes>
JOB_NAME_FIELD = "metadata.labels['batch.kubernetes.io/job-name']"
PREFIX = "gpu-cluster.io/"


# --- the rendered CronJob -------------------------------------------------------------------------


def rendered_pair_cronjob() -> dict[str, Any]:
    """The lab plan's (only) pair CronJob: name, pair, pods, container."""
    from render import program

    plan = program.run("lab")
    found = [r for r in plan.resources
             if r.type == "kubernetes:batch/v1:CronJob" and r.inputs["metadata"]["name"].startswith("nccl-pair-")]
    assert len(found) == 1, [r.name for r in found]  # the committed lab stack: gpu-1 and gpu-2, one pair
    inputs = found[0].inputs
    job_spec = inputs["spec"]["jobTemplate"]["spec"]
    assert job_spec["completionMode"] == "Indexed"
    return {
        "name": inputs["metadata"]["name"],
        "namespace": inputs["metadata"]["namespace"],
        "pair": inputs["metadata"]["annotations"]["gpu-cluster.io/nodes"].split(","),
        "pods": int(job_spec["completions"]),
        "container": job_spec["template"]["spec"]["containers"][0],
        "pod_metadata": job_spec["template"]["metadata"],
    }


def committed_valid_hours() -> int:
    from render import program

    values, _ = program.stack_config("lab")
    health = json.loads(values.get("gpu-cluster:gpuHealth") or "{}")
    return NcclPairCheck.model_validate(health.get("ncclCheck") or {}).valid_hours


@pytest.fixture(scope="module")
def cronjob() -> dict[str, Any]:
    return rendered_pair_cronjob()


# --- one run of the pair check ----------------------------------------------------------------------


def run_pair_check(cron: dict[str, Any], link_gbps: str, tmp: Path) -> dict[str, Any]:
    """The CronJob's two pods against a fresh API stand-in holding the pair's nodes."""
    job = cron["name"] + JOB_SUFFIX
    container, pair = cron["container"], cron["pair"]
    specs = []
    for _index in range(cron["pods"]):
        env = kubelet.container_env(container, {JOB_NAME_FIELD: job})
        env = {k: v.replace(MOUNT_ROOT, str(tmp / "shared")) for k, v in env.items()}
        command = [kubelet.expand(c, env) for c in [*container.get("command", []), *container.get("args", [])]]
        specs.append(PodSpec(command, env, cron["pods"], "JOB_COMPLETION_INDEX", f"rendered CronJob {cron['name']}"))
    # rank 0's address is the Job's own: <job>-0.<service> (mapped to 127.0.0.1 below, as pod_env does)
    assert specs[0].env["MASTER_ADDR"] == f"{job}-0.{cron['name']}-hosts", specs[0].env
    overrides = {**BENCH_SIZES, "link-gbps": link_gbps, "backend": "gloo"}
    command = localize(specs[0], launch.BENCH_MODULE, overrides, tmp / "shared")
    assert all(localize(s, launch.BENCH_MODULE, overrides, tmp / "shared") == command for s in specs)

    port = free_port()
    pods: list[Pod] = []
    try:
        for index, spec in enumerate(specs):
            pods.append(Pod(index, command, pod_env(spec, index, port, tmp), tmp / f"pod-{index}.log"))
        codes = wait_all(pods, time.monotonic() + WAIT_SECONDS)
    finally:
        for pod in pods:
            pod.kill()
    finished = dt.datetime.now(dt.UTC).replace(microsecond=0)
    logs = "\n".join(f"--- pod {p.index} ({pair[p.index]}) ---\n{p.log.read_text(errors='replace')}" for p in pods)

    # What the Job controller and kubelet would leave in the API: each pod with the rendered
    # template's labels and annotations, on its node, its container terminated with its exit code.
    # (The scheduler puts index i on either node; the pair's order here is one of the two.)
    api = FakeKubeApi()
    for node in pair:
        api.add_node(node, gpus=1)
    for index, code in enumerate(codes):
        meta = cron["pod_metadata"]
        api.put_pod({
            "metadata": {"name": f"{job}-{index}-x", "namespace": cron["namespace"],
                         "labels": {**meta["labels"], "batch.kubernetes.io/job-name": job},
                         "annotations": dict(meta.get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u",
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": pair[index], "containers": [{"name": cron["container"]["name"]}]},
            "status": {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [{
                "name": cron["container"]["name"],
                "state": {"terminated": {"exitCode": code, "finishedAt": svc.fmt_time(finished)}}}]},
        })
    with api.serve() as url:
        _service(api, url, tmp).reconcile()  # the GPU health service records the verdicts
    return {"codes": codes, "nodes": {n: api.node(n) for n in pair}, "patches": api.calls_of("PATCH", "/nodes/"),
            "logs": logs, "pair": pair, "check": cron["name"], "script": command[2],
            "pod_metadata": cron["pod_metadata"]}


@pytest.fixture(scope="module")
def passing(cronjob, tmp_path_factory) -> dict[str, Any]:
    return run_pair_check(cronjob, "0.000001", tmp_path_factory.mktemp("pair-pass"))


@pytest.fixture(scope="module")
def failing(cronjob, tmp_path_factory) -> dict[str, Any]:
    return run_pair_check(cronjob, "3200", tmp_path_factory.mktemp("pair-fail"))


def verdicts(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    key = PREFIX + run["check"]
    out = {}
    for node, obj in run["nodes"].items():
        text = obj["metadata"]["annotations"].get(key)
        assert text is not None, f"{node} has no {key}:\n{run['logs']}"
        out[node] = json.loads(text)
    return out


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_verdicts(run: dict[str, Any], result: str, code: int) -> None:
    hours = committed_valid_hours()
    assert run["pod_metadata"]["annotations"]["gpu-cluster.io/valid-hours"] == str(hours)  # config -> pods
    found = verdicts(run)
    a, b = run["pair"]
    assert {n: v["peer"] for n, v in found.items()} == {a: b, b: a}
    for node, v in found.items():
        assert (v["result"], v["code"]) == (result, code), (node, v, run["logs"])
        assert _time(v["expires"]) - _time(v["time"]) == dt.timedelta(hours=hours)
        assert abs(dt.datetime.now(dt.UTC) - _time(v["time"])) < dt.timedelta(minutes=10)
    # one merge PATCH per pod, each onto its own node, annotations only (the service's records)
    assert sorted(c.path for c in run["patches"]) == sorted(f"/api/v1/nodes/{n}" for n in run["pair"])
    assert all(set(c.body) == {"metadata"} and set(c.body["metadata"]) == {"annotations"} and c.status == 200
               for c in run["patches"]), run["patches"]


# --- the two cases ----------------------------------------------------------------------------------


def test_rendered_pair_cronjob_runs_its_pods_on_the_pair(cronjob):
    assert cronjob["pods"] == 2 and len(cronjob["pair"]) == 2
    assert cronjob["namespace"] == "training"
    assert cronjob["name"] == check_name(tuple(cronjob["pair"]))
    script = cronjob["container"]["command"][2]
    assert f"-m {launch.BENCH_MODULE} " in script


def test_a_pair_above_the_link_rate_passes_and_both_nodes_record_it(passing):
    assert passing["codes"] == [0, 0], passing["logs"]
    assert "acceptance: verdict=PASS exit=0" in passing["logs"]
    assert_verdicts(passing, "pass", 0)


def test_a_pair_below_the_link_rate_fails_with_its_code_and_both_nodes_record_it(failing):
    assert failing["codes"] == [nccl.EXIT_LOW_BUSBW] * 2, failing["logs"]
    assert "verdict=FAIL exit=10" in failing["logs"]
    assert_verdicts(failing, "fail", nccl.EXIT_LOW_BUSBW)


# --- the service, on those annotation values --------------------------------------------------------


def _service(api: FakeKubeApi, url: str, tmp: Path) -> svc.GpuHealth:
    token = tmp / "svc-token"
    token.write_text(TOKEN)
    kube = KubeClient(url, token, None, insecure_loopback=True)
    return svc.GpuHealth(kube, svc.Settings(max_nodes_out=1, max_percent_out=100))


def _with_peer(value: dict[str, Any], peer: str) -> str:
    return json.dumps({**value, "peer": peer}, sort_keys=True)


def test_the_service_takes_out_only_a_node_failing_with_two_peers_that_pass_elsewhere(passing, failing, tmp_path):
    real_fail, real_pass = verdicts(failing), verdicts(passing)
    a, b = failing["pair"]

    # the lab's one pair, failing: it cannot name a node; reported, nothing changed
    two = FakeKubeApi()
    for node in (a, b):
        two.add_node(node, annotations=failing["nodes"][node]["metadata"]["annotations"])
    with two.serve() as url:
        _service(two, url, tmp_path).reconcile()
    assert not any(two.node(n)["spec"].get("unschedulable") for n in (a, b))
    assert all(two.event_reasons(n) == ["GpuHealthNcclPairFailed"] for n in (a, b)), two.events

    # a ring of three: a fails with b and with c, b passes with c
    c = "gpu-3"
    ab, bc, ca = check_name((a, b)), check_name((b, c)), check_name((c, a))
    fail, ok = real_fail[a], real_pass[a]
    ring = FakeKubeApi()
    ring.add_node(a, annotations={PREFIX + ab: _with_peer(fail, b), PREFIX + ca: _with_peer(fail, c)})
    ring.add_node(b, annotations={PREFIX + ab: _with_peer(fail, a), PREFIX + bc: _with_peer(ok, c)})
    ring.add_node(c, annotations={PREFIX + bc: _with_peer(ok, b), PREFIX + ca: _with_peer(fail, a)})
    ring.add_pod("training", "job-a-0", a)
    with ring.serve() as url:
        _service(ring, url, tmp_path).reconcile()
    node = ring.node(a)
    # taken out for NCCL: tainted with that reason (the pair check tolerates it), not cordoned
    assert node["spec"].get("taints") == [{"key": svc.TAINT_KEY, "value": svc.NCCL_FAIL_REASON,
                                           "effect": "NoSchedule"}], ring.calls
    assert not node["spec"].get("unschedulable")
    reason = node["metadata"]["annotations"][svc.ANN_REASON]
    assert reason.startswith(svc.NCCL_FAIL_REASON), reason
    assert b in reason and c in reason
    for other in (b, c):
        assert not ring.node(other)["spec"].get("unschedulable") and not ring.node(other)["spec"].get("taints")
    # a cordon, not a drain: the GPU pod stays, no eviction was asked for
    assert not ring.calls_of("POST", "/eviction") and ("training", "job-a-0") in ring.pods


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def test_a_pod_stopped_while_waiting_for_its_peer_exits_143_and_gives_no_verdict(cronjob, tmp_path):
    """Preempted, evicted or deleted while waiting at the rendezvous (its peer's node still busy):
    torchrun alone would exit 1 (an `error`); the launch script says 143, which records nothing.
    The wait itself is the Job's whole deadline (join_timeout/read_timeout), not torch's 60 s."""
    job = cronjob["name"] + JOB_SUFFIX
    env = kubelet.container_env(cronjob["container"], {JOB_NAME_FIELD: job})
    command = [kubelet.expand(c, env) for c in cronjob["container"]["command"]]
    assert "join_timeout=1800,read_timeout=1800" in command[2]
    spec = PodSpec(command, env, cronjob["pods"], "JOB_COMPLETION_INDEX", "rendered CronJob")
    local = localize(spec, launch.BENCH_MODULE, {**BENCH_SIZES, "backend": "gloo"}, tmp_path / "shared")
    # rank 1 alone, its rank 0 nowhere: it waits (port with nothing listening)
    pod = Pod(1, local, pod_env(spec, 1, free_port(), tmp_path), tmp_path / "pod-1.log")
    try:
        # well into the wait: preflight done, torchrun up (the script's trap is set) and retrying
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline and not any("torchrun" in _cmdline(pid) for pid in _descendants(pod.proc.pid)):
            assert pod.proc.poll() is None, pod.log.read_text()
            time.sleep(0.2)
        time.sleep(3)
        assert pod.proc.poll() is None, pod.log.read_text()
        pod.proc.send_signal(signal.SIGTERM)  # the kubelet signals the container's PID 1: the shell
        code = pod.proc.wait(timeout=60)
    finally:
        pod.kill()
    assert code == 143, pod.log.read_text()[-3000:]
    assert svc.ncclpair.result_for(code) is None
