"""Local end-to-end runs of the training workload: the pods' own command and env, as processes.

The command and env come from the training Job that `python -m render lab` emits (the rendered
Indexed Job, or a PyTorchJob's replicas), falling back to components/training/launch.py when the
plan has none. Each completion index runs as its own process tree, as a pod would: `/bin/sh -c`
with the container env, the Job controller's JOB_COMPLETION_INDEX (or the training operator's
RANK), MASTER_ADDR mapped to 127.0.0.1 and a free port, /mnt/shared mapped to a temp dir, torch
CPU with gloo. Only sizes are shrunk (epochs, batch, model, sweep sizes), by rewriting the
module's own `--flag=value` arguments, so the script, torchrun flags and rendezvous are the
rendered ones.

- kill-and-resume: index 1 is killed (its whole process tree, like a pod deletion) after a
  checkpoint exists; the surviving torchrun restarts its worker and waits in the c10d rendezvous;
  index 1 is started again (as the Job controller would) and rejoins; the run resumes from the
  newest checkpoint, so at most one checkpoint interval is lost, and finishes with loss falling.
- kill the store host: index 0 (whose torchrun hosts the c10d store) is killed; the survivor's
  torchrun exits with a failure instead of hanging; every failed index gets a new pod (as the Job
  controller would, within backoffLimitPerIndex) and the run resumes from the newest checkpoint.
- the NCCL acceptance sweep through the same launcher, with a fake NCCL log: the table, and the
  verdict's exit code reaching the "pod" through torchrun (socket fallback with RDMA declared).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")

from components.storage_contract import MOUNT_ROOT, TRAINING_NAMESPACE  # noqa: E402
from components.training import launch  # noqa: E402
from tests import kubelet  # noqa: E402
from tests.conftest import PROJECT_DIR  # noqa: E402

PROJECT = PROJECT_DIR
WORKLOADS = PROJECT / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from trainer import nccl  # noqa: E402
from trainer.train import parse_event  # noqa: E402

SEED_002 = PROJECT.parent / "shared" / "seeds" / "002_8bd1413468bb1312.txt"

# Shrunk trainer: 1024 samples / 2 ranks / batch 16 = 32 steps per epoch, 96 in all; a checkpoint
# every 8 steps; 40 ms sleep per step so the kill lands mid-run on a fast machine too.
TRAIN_OVERRIDES = {
    "epochs": "3", "batch-size": "16", "model": "mlp", "synthetic-samples": "1024",
    "checkpoint-every-steps": "8", "throttle-ms": "40", "num-workers": "0",
}
CHECKPOINT_EVERY = 8
TOTAL_STEPS = 96


@dataclass
class PodSpec:
    """What every pod of a job runs, and how many pods there are."""

    command: list[str]
    env: dict[str, str]
    pods: int
    rank_var: str  # JOB_COMPLETION_INDEX (Indexed Job) or RANK (PyTorchJob, set by the operator)
    source: str


def _container_spec(container: dict, pods: int, rank_var: str, source: str) -> PodSpec:
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    command = [*container.get("command", []), *container.get("args", [])]
    return PodSpec(command=[kubelet.expand(c, env) for c in command], env=env, pods=pods,
                   rank_var=rank_var, source=source)


def rendered_pod_spec(module: str) -> PodSpec | None:
    """The pods of the lab plan's job that runs `module`, if the plan has one."""
    from render import program

    plan = program.run("lab")
    for r in plan.resources:
        spec = r.inputs.get("spec") or {}
        if r.type == "kubernetes:batch/v1:Job":
            container = spec["template"]["spec"]["containers"][0]
            if f"-m {module} " in " ".join(container.get("command", []) + container.get("args", [])):
                assert spec.get("completionMode") == "Indexed"
                return _container_spec(container, int(spec["completions"]), "JOB_COMPLETION_INDEX", f"rendered Job {r.name}")
        if r.type == "kubernetes:kubeflow.org/v1:PyTorchJob":
            replicas = spec["pytorchReplicaSpecs"]
            container = replicas["Master"]["template"]["spec"]["containers"][0]
            if f"-m {module} " in " ".join(container.get("command", []) + container.get("args", [])):
                pods = sum(int(r_["replicas"]) for r_ in replicas.values())
                return _container_spec(container, pods, "RANK", f"rendered PyTorchJob {r.name}")
    return None


def launch_pod_spec(module: str, module_args: tuple[str, ...] = ()) -> PodSpec:
    spec = launch.LaunchSpec(job="train", service="train-hosts", namespace=TRAINING_NAMESPACE, nodes=2,
                             gpus_per_node=1, module=module, module_args=module_args)
    env = {e["name"]: e["value"] for e in launch.pod_env(spec)}
    return PodSpec(launch.torchrun_command(spec), env, 2, "JOB_COMPLETION_INDEX", "components/training/launch.py")


def pod_spec(module: str, fallback_args: tuple[str, ...] = ()) -> PodSpec:
    found = rendered_pod_spec(module)
    spec = found if found is not None else launch_pod_spec(module, fallback_args)
    print(f"pod command and env from: {spec.source}")
    return spec


def override_module_args(script: str, module: str, overrides: dict[str, str]) -> str:
    """Set `--flag=value` for the module in both its preflight and its torchrun invocation."""
    for flag, value in overrides.items():
        pattern = re.compile(rf"--{re.escape(flag)}(?:=|\s+)(?!--)\S+")
        if pattern.search(script):
            script = pattern.sub(lambda _m, f=flag, v=value: f"--{f}={v}", script)
        else:
            script = script.replace(f"-m {module} ", f"-m {module} --{flag}={value} ")
    return script


def localize(spec: PodSpec, module: str, overrides: dict[str, str], shared: Path) -> list[str]:
    assert spec.command[:2] == ["/bin/sh", "-c"], spec.command
    script = override_module_args(spec.command[2], module, overrides)
    script = re.sub(r"--nproc_per_node=\d+", "--nproc_per_node=1", script)  # 2 cores: one worker per pod
    return ["/bin/sh", "-c", script.replace(MOUNT_ROOT, str(shared))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod_env(spec: PodSpec, index: int, port: int, tmp: Path) -> dict[str, str]:
    pod_tmp = tmp / f"pod-{index}"
    pod_tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(pod_tmp), "TMPDIR": str(pod_tmp), "PYTHONPATH": str(WORKLOADS),
        "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
        **spec.env,
        spec.rank_var: str(index),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    }
    if spec.rank_var == "RANK":  # what the training operator injects besides RANK
        env["WORLD_SIZE"] = str(spec.pods)
    return env


class Pod:
    def __init__(self, index: int, command: list[str], env: dict[str, str], log: Path) -> None:
        self.index, self.log = index, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole tree (torchrun starts its workers in sessions of their own)."""
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def events(self, name: str | None = None) -> list[dict[str, str]]:
        found = [e for e in map(parse_event, self.log.read_text(errors="replace").splitlines()) if e]
        return [e for e in found if name is None or e.get("event") == name]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def wait_all(pods: list[Pod], deadline: float) -> list[int]:
    codes = []
    for pod in pods:
        try:
            codes.append(pod.proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pytest.fail(f"pod {pod.index} still running at the deadline; log:\n{pod.log.read_text()[-3000:]}")
    return codes


def _logs(pods: list[Pod]) -> str:
    return "\n".join(f"--- pod {p.index} ---\n{p.log.read_text(errors='replace')[-4000:]}" for p in pods)


def wait_for_second_checkpoint(ckpt_dir: Path, running: list[Pod], logged: list[Pod]) -> None:
    """Block (45 s at most) until a checkpoint past the first interval exists; fail if a pod exits."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        steps = checkpoint_steps(ckpt_dir) if ckpt_dir.is_dir() else []
        if steps and steps[-1] >= 2 * CHECKPOINT_EVERY:
            return
        if any(p.proc.poll() is not None for p in running):
            pytest.fail(f"a pod exited before the kill:\n{_logs(logged)}")
        time.sleep(0.05)
    pytest.fail(f"no checkpoint within the deadline:\n{_logs(logged)}")


def checkpoint_steps(directory: Path) -> list[int]:
    return sorted(int(m[1]) for p in directory.glob("step-*.pt") if (m := re.fullmatch(r"step-(\d+)\.pt", p.name)))


# --- the trainer: kill one rank mid-run, restart it, resume --------------------------------------


@pytest.fixture(scope="module")
def kill_and_resume(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    shared = tmp / "shared"
    spec = pod_spec(launch.TRAINER_MODULE)
    command = localize(spec, launch.TRAINER_MODULE, TRAIN_OVERRIDES, shared)
    ckpt_dir = Path(re.search(r"--checkpoint-dir=(\S+)", command[2])[1].strip("'\""))
    port = free_port()
    pods = [Pod(i, command, pod_env(spec, i, port, tmp), tmp / f"pod-{i}.log") for i in range(spec.pods)]
    restarted: list[Pod] = []
    try:
        # wait for a checkpoint past the first interval, then kill index 1 mid-run
        wait_for_second_checkpoint(ckpt_dir, pods, pods)
        victim = pods[-1]
        victim.kill()
        time.sleep(1.0)  # a step the survivors were finishing may still land a checkpoint
        at_kill = checkpoint_steps(ckpt_dir)
        assert at_kill[-1] < TOTAL_STEPS, "the run finished before the kill: raise throttle-ms"
        # the Job controller replaces the pod: same index, same command
        replacement = Pod(victim.index, command, pod_env(spec, victim.index, port, tmp), tmp / f"pod-{victim.index}-2.log")
        restarted = [*pods[:-1], replacement]
        codes = wait_all(restarted, time.monotonic() + 60)
        yield {"pods": pods, "final": restarted, "codes": codes, "at_kill": at_kill, "ckpt_dir": ckpt_dir,
               "spec": spec, "logs": _logs([*pods, replacement])}
    finally:
        for pod in [*pods, *restarted]:
            pod.kill()


def _all_events(result, name: str) -> list[dict[str, str]]:
    return [e for pod in [*result["pods"], result["final"][-1]] for e in pod.events(name)]


def test_run_completes_after_the_killed_pod_rejoins(kill_and_resume):
    assert kill_and_resume["codes"] == [0] * len(kill_and_resume["codes"]), kill_and_resume["logs"]
    done = _all_events(kill_and_resume, "done")
    assert [e["step"] for e in done] == [str(TOTAL_STEPS)], kill_and_resume["logs"]


def test_all_ranks_join(kill_and_resume):
    world = kill_and_resume["spec"].pods
    joined = _all_events(kill_and_resume, "joined")
    assert all(e["world_size"] == str(world) and e["backend"] == "gloo" for e in joined)
    # before the kill, and again after it (the survivor's worker restarted in place by torchrun)
    first = {e["rank"] for e in joined if e["restart"] == "0"}
    assert first == {str(r) for r in range(world)}, kill_and_resume["logs"]
    assert any(e["restart"] != "0" for e in joined), "the surviving pod's worker was never restarted"


def test_resumes_from_the_newest_checkpoint_losing_at_most_one_interval(kill_and_resume):
    resumes = _all_events(kill_and_resume, "resume")
    assert len(resumes) == 1, kill_and_resume["logs"]
    newest_at_kill = kill_and_resume["at_kill"][-1]
    # the checkpoint after it did not exist, so the progress lost is < CHECKPOINT_EVERY steps
    assert int(resumes[0]["step"]) == newest_at_kill >= 2 * CHECKPOINT_EVERY
    assert resumes[0]["checkpoint"].endswith(f"step-{newest_at_kill:09d}.pt")


def test_loss_falls_and_checkpoints_appear(kill_and_resume):
    epochs = {int(e["epoch"]): float(e["loss"]) for e in _all_events(kill_and_resume, "epoch")}
    assert sorted(epochs) == [1, 2, 3], kill_and_resume["logs"]
    assert epochs[3] < epochs[1] * 0.8, epochs
    assert all(float(e["samples_per_s"]) > 0 for e in _all_events(kill_and_resume, "epoch"))
    ckpt_dir = kill_and_resume["ckpt_dir"]
    assert checkpoint_steps(ckpt_dir)[-1] == TOTAL_STEPS
    assert len(checkpoint_steps(ckpt_dir)) <= 3  # --keep-checkpoints default
    assert not [p for p in ckpt_dir.iterdir() if p.name.startswith(".tmp-")]


# --- kill index 0, which hosts the c10d store: every pod's torchrun exits, each is replaced --------


# The Job controller's retries per index (training.backoffLimitPerIndex's default).
BACKOFF_LIMIT_PER_INDEX = 2


@pytest.fixture(scope="module")
def kill_store_host(tmp_path_factory):
    """Index 0 is killed; the survivors lose the rendezvous store, so their torchrun exits (it cannot
    rendezvous again without it). Like the Job controller, every index whose pod failed gets a new
    pod (at most BACKOFF_LIMIT_PER_INDEX per index; the killed one is a disruption and not counted)
    until every index has completed."""
    tmp = tmp_path_factory.mktemp("train-kill0")
    shared = tmp / "shared"
    spec = pod_spec(launch.TRAINER_MODULE)
    command = localize(spec, launch.TRAINER_MODULE, TRAIN_OVERRIDES, shared)
    ckpt_dir = Path(re.search(r"--checkpoint-dir=(\S+)", command[2])[1].strip("'\""))
    port = free_port()

    def start(index: int, attempt: int) -> Pod:
        return Pod(index, command, pod_env(spec, index, port, tmp), tmp / f"pod-{index}-{attempt}.log")

    current = [start(i, 0) for i in range(spec.pods)]
    every = list(current)
    try:
        wait_for_second_checkpoint(ckpt_dir, current, every)
        current[0].kill()  # global rank 0 writes the checkpoints: none can land after this
        at_kill = checkpoint_steps(ckpt_dir)
        assert at_kill[-1] < TOTAL_STEPS, "the run finished before the kill: raise throttle-ms"
        current[0] = start(0, 1)
        every.append(current[0])
        retries = [0] * spec.pods
        completed: set[int] = set()
        deadline = time.monotonic() + 90
        while len(completed) < spec.pods:
            if time.monotonic() > deadline:
                pytest.fail(f"indexes {sorted(set(range(spec.pods)) - completed)} still running:\n{_logs(every)}")
            for index, pod in enumerate(current):
                code = pod.proc.poll()
                if code is None or index in completed:
                    continue
                if code == 0:
                    completed.add(index)
                    continue
                retries[index] += 1
                if retries[index] > BACKOFF_LIMIT_PER_INDEX:
                    pytest.fail(f"index {index} out of retries (exit {code}):\n{_logs(every)}")
                current[index] = start(index, retries[index] + (index == 0))
                every.append(current[index])
            time.sleep(0.1)
        yield {"pods": every, "at_kill": at_kill, "retries": retries, "ckpt_dir": ckpt_dir, "logs": _logs(every)}
    finally:
        for pod in every:
            pod.kill()


def test_store_host_killed_survivors_exit_and_replaced_pods_finish(kill_store_host):
    # the survivor's torchrun did exit (failed) rather than hang on the lost store
    assert kill_store_host["retries"][1:] and all(r >= 1 for r in kill_store_host["retries"][1:]), kill_store_host["logs"]
    done = [e for pod in kill_store_host["pods"] for e in pod.events("done")]
    assert [e["step"] for e in done] == [str(TOTAL_STEPS)], kill_store_host["logs"]
    assert checkpoint_steps(kill_store_host["ckpt_dir"])[-1] == TOTAL_STEPS


def test_store_host_killed_resumes_from_the_newest_checkpoint(kill_store_host):
    resumes = [e for pod in kill_store_host["pods"] for e in pod.events("resume")]
    newest_at_kill = kill_store_host["at_kill"][-1]
    assert resumes, kill_store_host["logs"]
    # every restart resumes from the newest checkpoint at the kill (less than one interval lost)
    assert {int(e["step"]) for e in resumes} == {newest_at_kill}, kill_store_host["logs"]
    assert newest_at_kill >= 2 * CHECKPOINT_EVERY


# --- the NCCL acceptance sweep through the same launcher ----------------------------------------


def _fake_nccl_log(path: Path, transport: str) -> Path:
    """NCCL INFO lines of seed 002 (RoCE via the IBext plugin), or the same run on sockets."""
    lines = [
        "gpu-pod0:52047:52056 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>",
        "gpu-pod0:52047:52056 [0] NCCL INFO Using network IBext",
        "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IBext/0",
        "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IBext/0",
    ]
    if transport == "socket":
        lines = [
            "gpu-pod0:52047:52056 [0] NCCL INFO NET/Socket : Using [0]net1:10.100.100.1<0>",
            "gpu-pod0:52047:52056 [0] NCCL INFO Using network Socket",
            "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
            "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


BENCH_SIZES = {"min-bytes": "4096", "max-bytes": "65536", "factor": "4", "iters": "3", "warmup": "1"}


def test_acceptance_sweep_socket_fallback_fails_the_pod_with_its_code(tmp_path):
    fake = _fake_nccl_log(tmp_path / "nccl.log", "socket")
    spec = pod_spec(launch.BENCH_MODULE, ("--link-gbps", "25", "--expect-transport", "RDMA"))
    overrides = {**BENCH_SIZES, "link-gbps": "0.000001", "expect-transport": "RDMA", "nccl-log": str(fake)}
    command = localize(spec, launch.BENCH_MODULE, overrides, tmp_path / "shared")
    port = free_port()
    pods = [Pod(i, command, pod_env(spec, i, port, tmp_path), tmp_path / f"bench-{i}.log") for i in range(spec.pods)]
    try:
        codes = wait_all(pods, time.monotonic() + 60)
    finally:
        for pod in pods:
            pod.kill()
    logs = _logs(pods)
    # the verdict's own code reaches the pod through torchrun (the exit-code file of launch.py)
    assert codes == [nccl.EXIT_SOCKET_FALLBACK] * spec.pods, logs
    text = "".join(p.log.read_text() for p in pods)
    rows = nccl.parse_sweep(text.splitlines())
    assert [r.size for r in rows] == [4096, 16384, 65536], logs
    for r in rows:
        assert r.wrong == 0 and r.algbw > 0
        assert r.busbw == pytest.approx(nccl.bus_bandwidth(r.algbw, 2), rel=0.01, abs=1e-4)  # as printed
    verdict = [line for line in text.splitlines() if line.startswith("acceptance: ")]
    assert len(verdict) == 1 and "verdict=FAIL exit=11" in verdict[0] and "NET/Socket" in verdict[0], logs


def _direct_bench(tmp_path: Path, args: list[str], world: int = 2) -> tuple[list[int], str]:
    """The bench without torchrun (env:// init), so each process's own exit code is visible."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(WORKLOADS), "GLOO_SOCKET_IFNAME": "lo",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
               "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "HOME": str(tmp_path)}
        procs.append(subprocess.Popen([sys.executable, "-m", "trainer.allreduce_bench", *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = []
    try:
        for p in procs:
            out.append(p.communicate(timeout=60)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    return [p.returncode for p in procs], "\n".join(out)


def test_acceptance_sweep_passes_on_rdma_and_fails_on_a_slow_link(tmp_path):
    fake = _fake_nccl_log(tmp_path / "nccl.log", "ib")
    base = ["--min-bytes=4096", "--max-bytes=16384", "--factor=4", "--iters=2", "--warmup=1", "--rdma",
            f"--nccl-log={fake}", "--backend=gloo"]
    codes, out = _direct_bench(tmp_path, [*base, "--link-gbps=0.000001"])
    assert codes == [0, 0], out
    assert "acceptance: verdict=PASS exit=0 transport=NET/IB" in out
    codes, out = _direct_bench(tmp_path, [*base, "--link-gbps=3200"])
    assert codes == [nccl.EXIT_LOW_BUSBW] * 2, out
    assert "verdict=FAIL exit=10" in out and "< 0.9 x 3200" in out


def test_bench_preflight_rejects_bad_sizes_with_the_config_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainer.allreduce_bench", "--preflight", "--max-bytes=1", "--min-bytes=8"],
                          env={**os.environ, "PYTHONPATH": str(WORKLOADS)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == launch.EXIT_CONFIG_ERROR, proc.stderr
    assert "--min-bytes" in proc.stderr


def test_trainer_preflight_rejects_an_unwritable_checkpoint_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "trainer.train", "--preflight", f"--checkpoint-dir={blocker}/ckpt",
                           f"--exit-code-file={tmp_path / 'code'}"],
                          env={**os.environ, "PYTHONPATH": str(WORKLOADS)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == launch.EXIT_CONFIG_ERROR, proc.stderr
    assert "event=fatal exit=3" in proc.stderr and "--checkpoint-dir" in proc.stderr
    assert (tmp_path / "code").read_text().strip() == "3"


# --- a real dataset format through the same pods: tiny CIFAR-10, evaluated every epoch ------------


def test_cifar10_pods_evaluate_every_epoch_and_rank_0_writes_the_result(tmp_path):
    """The launch command with the issue-15 flags as module_args (LaunchSpec's config-driven fields
    are added elsewhere), 2 pods x 1 process, on a CIFAR-10 "python version" set of 200 training
    and 101 test images (101: the test shards are uneven, so padding would show in the count)."""
    from trainer.dataset_files import write_cifar10

    flags = ("--dataset=cifar10", "--warmup-epochs=0.5", "--weight-decay=5e-4", "--momentum=0.9", "--augment=auto",
             "--lr=0.1")
    spec = launch_pod_spec(launch.TRAINER_MODULE, flags)
    overrides = {"epochs": "3", "batch-size": "16", "model": "mlp", "num-workers": "0", "checkpoint-every-steps": "0"}
    command = localize(spec, launch.TRAINER_MODULE, overrides, tmp_path / "shared")
    assert all(f in command[2] for f in flags)
    data_dir = Path(re.search(r"--data-dir=(\S+)", command[2])[1].strip("'\""))
    ckpt_dir = Path(re.search(r"--checkpoint-dir=(\S+)", command[2])[1].strip("'\""))
    write_cifar10(data_dir, per_batch=40, test=101)
    port = free_port()
    pods = [Pod(i, command, pod_env(spec, i, port, tmp_path), tmp_path / f"cifar-{i}.log") for i in range(spec.pods)]
    try:
        codes = wait_all(pods, time.monotonic() + 120)
    finally:
        for pod in pods:
            pod.kill()
    logs = _logs(pods)
    assert codes == [0, 0], logs
    # global rank 0 is whichever pod the c10d rendezvous made it, not necessarily index 0
    reporting = [p for p in pods if p.events("start")]
    assert len(reporting) == 1, logs
    rank0, other = reporting[0], next(p for p in pods if p is not reporting[0])
    start = rank0.events("start")[0]
    assert (start["samples"], start["test_samples"], start["steps_per_epoch"], start["augment"]) == ("200", "101", "6", "1")
    assert start["warmup_steps"] == "3" and start["world_size"] == "2"
    evals = rank0.events("eval")
    # every test image counted once across the two ranks' shards, after every epoch
    assert [(e["epoch"], e["total"]) for e in evals] == [("1", "101"), ("2", "101"), ("3", "101")], logs
    assert not other.events("eval") and not other.events("done")  # rank 0 reports
    from trainer.train import parse_result

    results = [r for r in map(parse_result, rank0.log.read_text().splitlines()) if r]
    print("result:", results)
    saved = json.loads((ckpt_dir / "result.json").read_text())
    assert results == [saved], logs
    assert (saved["dataset"], saved["epochs"], saved["world_size"], saved["steps"]) == ("cifar10", 3, 2, 18)
    assert saved["final_test_accuracy"] == pytest.approx(float(evals[-1]["accuracy"]), rel=1e-5)
    assert saved["best_test_accuracy"] == pytest.approx(max(float(e["accuracy"]) for e in evals), rel=1e-5)
    assert saved["final_test_accuracy"] > 0.3, logs  # colour-coded classes: far above chance (0.1)
    assert saved["samples_per_s"] > 0 and saved["seconds_per_epoch"] > 0
    lrs = [float(e["lr"]) for e in rank0.events("epoch")]
    assert lrs[0] > lrs[1] > lrs[2] >= 0  # past the warmup (3 steps), decaying
