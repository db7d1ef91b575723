"""The trainer's collectives ride the secondary interface `net1` (launch.secondary_network_env): two
"nodes" as two network namespaces, the real `python -m trainer.train` under torchrun in each, started
with the pod command and env of components/training/launch.py (as tests/workloads/test_training_e2e.py
builds them) plus `extra_env=secondary_network_env("net1", "irdma0", 1)`.

Each namespace has a primary `eth0` (veth, 10.0.0.0/24: the pod network) and `net1` (veth, 192.168.100.0/24:
the RoCE interface Multus adds). Each "pod" also gets its own UTS namespace with hostname train-<i>
and an /etc/hosts (`ip netns exec` bind-mounts /etc/netns/<ns>/hosts) resolving train-<i> and
train-<i>.train-hosts to its pod IP, as Kubernetes writes a pod's /etc/hosts; MASTER_ADDR is the
rendered `train-0.train-hosts`.

(a) The primary network carries only TCP to node 0's pod IP (nft in both namespaces; node 0 may only
    answer): the c10d rendezvous on MASTER_PORT, and the workers' TCPStore, which torchrun opens on
    node 0 at a free port it picks at run time (launch.py sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1),
    so a policy allowing MASTER_PORT alone would hang the workers (an nft counter shows that
    connection). Training completes; net1's byte counters grow by at least the gradient volume,
    the primary's by less than 5 % of net1's.
(b) The primary network drops all IPv4, MASTER_ADDR is node 0's net1 address and the hostnames
    resolve to net1 addresses: rendezvous, store and collectives all run over net1.
(c) Negative control: net1 down in both namespaces, the primary fully open: the job fails within a
    bounded time, so the env really pins Gloo to net1 (without it Gloo would use the primary).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")

from components.storage_contract import TRAINING_NAMESPACE  # noqa: E402
from components.training import launch  # noqa: E402
from tests.workloads.test_training_e2e import WORKLOADS, Pod, PodSpec, localize, pod_env  # noqa: E402

if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from trainer.train import build_model  # noqa: E402

PRIMARY = "eth0"
SECONDARY = "net1"
PRIMARY_NET = "10.0.0"
SECONDARY_NET = "192.168.100"
PORT = launch.RDZV_PORT  # each namespace has its own port space

# 2048 synthetic samples / 2 ranks / batch 16 = 64 steps per epoch, 128 in all; no checkpoints mid-run.
TRAIN_OVERRIDES = {"epochs": "2", "batch-size": "16", "model": "mlp", "synthetic-samples": "2048",
                   "checkpoint-every-steps": "0", "num-workers": "0"}
TOTAL_STEPS = 128
# The mlp's gradients (float32), all-reduced once per step: every rank sends at least this per step.
GRADIENT_BYTES = 4 * sum(p.numel() for p in build_model("mlp", (32,), 10).parameters())


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=10)


def _nft(namespace: str, ruleset: str) -> None:
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=ruleset, check=True,
                   capture_output=True, text=True, timeout=10)


def _ruleset(accept_in: list[str], accept_out: list[str]) -> str:
    """The primary interface drops every IPv4 packet but the accepted ones (ARP and IPv6 pass)."""
    chains = []
    for chain, accepted, drop in (("input", accept_in, f'iifname "{PRIMARY}" meta nfproto ipv4 drop'),
                                  ("output", accept_out, f'oifname "{PRIMARY}" meta nfproto ipv4 drop')):
        rules = "\n".join(f"    {rule}" for rule in [*accepted, drop])
        chains.append(f"  chain {chain} {{\n    type filter hook {chain} priority 0; policy accept;\n{rules}\n  }}")
    return "table inet pod {\n  counter other_tcp { }\n" + "\n".join(chains) + "\n}\n"


def _counters(namespace: str) -> dict[str, int]:
    """tx/rx bytes of eth0 and net1, read from /sys inside the namespace."""
    files = [f"/sys/class/net/{i}/statistics/{d}_bytes" for i in (PRIMARY, SECONDARY) for d in ("tx", "rx")]
    out = subprocess.run(["ip", "netns", "exec", namespace, "cat", *files], check=True, capture_output=True,
                         text=True, timeout=10).stdout.split()
    keys = [f"{i}_{d}" for i in (PRIMARY, SECONDARY) for d in ("tx", "rx")]
    return dict(zip(keys, map(int, out), strict=True))


class Nodes:
    """Two namespaces wired as above; hosts files, firewall and links are set per scenario."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def hosts(self, net: str) -> None:
        for name in self.names:
            lines = ["127.0.0.1 localhost"] + [f"{net}.{i + 1} train-{i}.train-hosts train-{i}" for i in range(2)]
            Path(f"/etc/netns/{name}/hosts").write_text("\n".join(lines) + "\n")

    def reset(self) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "exec", name, "nft", "flush", "ruleset"], capture_output=True, timeout=10)
            for ifname in (PRIMARY, SECONDARY):
                _ip("-n", name, "link", "set", ifname, "up")
        self.hosts(PRIMARY_NET)


@pytest.fixture(scope="module")
def nodes():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces, veth pairs and nft")
    missing = [tool for tool in ("ip", "nft", "unshare", "hostname") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (iproute2, nftables, util-linux, hostname)")
    tag = uuid.uuid4().hex[:6]
    names = [f"node{tag}-0", f"node{tag}-1"]
    created: list[str] = []
    try:
        for name in names:
            result = _ip("netns", "add", name, check=False)
            if result.returncode != 0:
                pytest.skip(f"`ip netns add` failed: {result.stderr.strip()}")
            created.append(name)
            Path(f"/etc/netns/{name}").mkdir(parents=True, exist_ok=True)
        for ifname in (PRIMARY, SECONDARY):
            _ip("link", "add", "name", ifname, "netns", names[0], "type", "veth", "peer", "name", ifname, "netns", names[1])
        for i, name in enumerate(names):
            _ip("-n", name, "addr", "add", f"{PRIMARY_NET}.{i + 1}/24", "dev", PRIMARY)
            _ip("-n", name, "addr", "add", f"{SECONDARY_NET}.{i + 1}/24", "dev", SECONDARY)
            _ip("-n", name, "link", "set", "lo", "up")
        probe = subprocess.run(["ip", "netns", "exec", names[0], "nft", "list", "ruleset"], capture_output=True, text=True, timeout=10)
        if probe.returncode != 0:
            pytest.skip(f"nft does not work in a network namespace here: {probe.stderr.strip()}")
        yield Nodes(names)
    finally:
        for name in created:
            _ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def _pod_spec(master_addr: str | None) -> PodSpec:
    spec = launch.LaunchSpec(job="train", service="train-hosts", namespace=TRAINING_NAMESPACE, nodes=2, gpus_per_node=1,
                             extra_env=launch.secondary_network_env(SECONDARY, "irdma0", 1))
    env = {e["name"]: e["value"] for e in launch.pod_env(spec)}
    assert env["MASTER_ADDR"] == "train-0.train-hosts" and env["GLOO_SOCKET_IFNAME"] == SECONDARY
    if master_addr is not None:
        env["MASTER_ADDR"] = master_addr
    return PodSpec(launch.torchrun_command(spec), env, 2, "JOB_COMPLETION_INDEX", "components/training/launch.py")


def _run_job(nodes: Nodes, tmp: Path, master_addr: str | None, timeout: float, grace: float | None = None) -> dict:
    """Both pods, each in its namespace with its own hostname, for `timeout` seconds at most (and at
    most `grace` seconds after the first pod exits, when given); counters before and after."""
    spec = _pod_spec(master_addr)
    command = localize(spec, launch.TRAINER_MODULE, TRAIN_OVERRIDES, tmp / "shared")
    before = {name: _counters(name) for name in nodes.names}
    pods = []
    started = time.monotonic()
    for index, name in enumerate(nodes.names):
        env = {**pod_env(spec, index, PORT, tmp), "MASTER_ADDR": spec.env["MASTER_ADDR"]}
        wrapped = ["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                   f"train-{index}", *command]
        pods.append(Pod(index, wrapped, env, tmp / f"pod-{index}.log"))
    exited: list[float | None] = [None, None]
    deadline = started + timeout
    try:
        while time.monotonic() < deadline and None in exited:
            for i, pod in enumerate(pods):
                if exited[i] is None and pod.proc.poll() is not None:
                    exited[i] = time.monotonic() - started
                    if grace is not None:
                        deadline = min(deadline, time.monotonic() + grace)
            time.sleep(0.05)
    finally:
        for pod in pods:
            pod.kill()
    codes = [pod.proc.returncode if t is not None else None for pod, t in zip(pods, exited, strict=True)]
    elapsed = time.monotonic() - started
    after = {name: _counters(name) for name in nodes.names}
    delta = {name: {k: after[name][k] - before[name][k] for k in after[name]} for name in nodes.names}
    logs = "\n".join(f"--- pod {p.index} exit {c} ---\n{p.log.read_text(errors='replace')[-3000:]}" for p, c in zip(pods, codes, strict=True))
    return {"codes": codes, "exited_s": exited, "pods": pods, "delta": delta, "elapsed": elapsed, "logs": logs}


def _done_steps(run: dict) -> list[str]:
    return [e["step"] for pod in run["pods"] for e in pod.events("done")]


def _joined_backends(run: dict) -> list[str]:
    return [e["backend"] for pod in run["pods"] for e in pod.events("joined")]


def _report(name: str, run: dict) -> None:
    print(f"{name}: {run['elapsed']:.1f} s, exit {run['codes']} after {run['exited_s']} s, gradient volume {GRADIENT_BYTES * TOTAL_STEPS} B, "
          f"byte counters {run['delta']}")


def test_a_collectives_on_net1_while_the_primary_carries_only_tcp_to_node_0(nodes, tmp_path):
    nodes.reset()
    master = f"{PRIMARY_NET}.1"
    # node 1 may open TCP connections to node 0's pod IP (rendezvous, workers' store); node 0 only answers
    _nft(nodes.names[0], _ruleset(
        [f'iifname "{PRIMARY}" ip daddr {master} meta l4proto tcp accept'],
        [f'oifname "{PRIMARY}" ip saddr {master} meta l4proto tcp ct state established accept']))
    _nft(nodes.names[1], _ruleset(
        [f'iifname "{PRIMARY}" ip saddr {master} meta l4proto tcp ct state established accept'],
        [f'oifname "{PRIMARY}" ip daddr {master} tcp dport {PORT} accept',
         # anything else to node 0: the workers' store (counted, to show a MASTER_PORT-only policy is not enough)
         f'oifname "{PRIMARY}" ip daddr {master} meta l4proto tcp counter name "other_tcp" accept']))
    run = _run_job(nodes, tmp_path, None, timeout=60)
    _report("(a) primary: TCP to node 0 only", run)
    assert run["codes"] == [0, 0], run["logs"]
    # set(): what this test proves is the path of the traffic; a worker aborted at teardown after a
    # completed run (trainer/train.py's exit says why that is now avoided) would be restarted by
    # torchrun, resume from the final checkpoint and report done again, at the same step.
    assert set(_done_steps(run)) == {str(TOTAL_STEPS)} and set(_joined_backends(run)) == {"gloo"}, run["logs"]
    volume = GRADIENT_BYTES * TOTAL_STEPS
    for name in nodes.names:
        d = run["delta"][name]
        # every rank sends (and receives) at least its gradients once per step over net1
        assert d["net1_tx"] >= volume and d["net1_rx"] >= volume, run["delta"]
        assert d["eth0_tx"] + d["eth0_rx"] < 0.05 * (d["net1_tx"] + d["net1_rx"]), run["delta"]
        assert d["eth0_tx"] > 0  # the rendezvous did use the primary network
    other = subprocess.run(["ip", "netns", "exec", nodes.names[1], "nft", "list", "counter", "inet", "pod", "other_tcp"],
                           capture_output=True, text=True, timeout=10, check=True).stdout
    packets = int(re.search(r"packets (\d+)", other)[1])
    print(f"(a) node 1 -> node 0 TCP packets on ports other than MASTER_PORT {PORT}: {packets}")
    assert packets > 0, other


def test_b_the_whole_job_runs_over_net1(nodes, tmp_path):
    nodes.reset()
    nodes.hosts(SECONDARY_NET)
    for name in nodes.names:
        _nft(name, _ruleset([], []))
    run = _run_job(nodes, tmp_path, f"{SECONDARY_NET}.1", timeout=60)
    _report("(b) primary: all IPv4 dropped", run)
    assert run["codes"] == [0, 0], run["logs"]
    assert set(_done_steps(run)) == {str(TOTAL_STEPS)}, run["logs"]
    for name in nodes.names:
        d = run["delta"][name]
        assert d["net1_tx"] >= GRADIENT_BYTES * TOTAL_STEPS, run["delta"]
        assert d["eth0_tx"] < 1000, run["delta"]  # nothing (an IPv6 router solicitation at most)


def test_c_negative_control_net1_down_fails_within_a_bound(nodes, tmp_path):
    """Node 1's Gloo connects to node 0's net1 address and fails at once (no route), through torchrun's
    restarts; node 0's worker, waiting for that connection, would wait for the process group's
    timeout (Gloo's default, 30 min: the trainer sets none), so it is given 3 s after node 1 exits."""
    nodes.reset()
    for name in nodes.names:
        _ip("-n", name, "link", "set", SECONDARY, "down")
    try:
        run = _run_job(nodes, tmp_path, None, timeout=50, grace=3)
    finally:
        nodes.reset()
    _report("(c) net1 down, primary open", run)
    assert run["codes"][1] not in (None, 0), f"node 1 did not fail within 50 s:\n{run['logs']}"
    assert run["codes"][0] != 0 and _done_steps(run) == [], run["logs"]
    node1 = run["pods"][1].log.read_text(errors="replace")
    assert "gloo" in node1 and "connect: Network is unreachable" in node1, run["logs"]
    assert all(run["delta"][name]["net1_tx"] == 0 for name in nodes.names), run["delta"]


def test_spec_without_the_secondary_env_would_use_the_primary():
    """What (c) rules out: without extra_env the pods carry no Gloo/NCCL interface pin at all."""
    spec = _pod_spec(None)
    plain = launch.LaunchSpec(job="train", service="train-hosts", namespace=TRAINING_NAMESPACE, nodes=2, gpus_per_node=1)
    plain_env = {e["name"] for e in launch.pod_env(plain)}
    assert "GLOO_SOCKET_IFNAME" not in plain_env and "NCCL_SOCKET_IFNAME" not in plain_env
    assert {k: spec.env[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX")} == {
        "NCCL_SOCKET_IFNAME": "net1", "GLOO_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "irdma0", "NCCL_IB_GID_INDEX": "1"}
