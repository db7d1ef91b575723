"""`python -m render <stack>`: it runs for every committed stack, writes everything its docstring
promises, leaks no secret and gives byte-identical output from one run to the next."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import versions
from render import program
from render.__main__ import write
from tests.conftest import PROJECT_DIR

STACKS = ("lab", "dev")
CANARY = "CANARY-SECRET-91b2"

NODE_STEPS = ("kernel", "kube-packages", "containerd")
GPU_STEPS = ("nvidia-driver", "driver-ready", "nvidia-toolkit")


def _render(stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "render", stack, "--out", str(out)],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module", params=STACKS)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    stack = request.param
    out = tmp_path_factory.mktemp(f"render-{stack}") / "out"
    result = _render(stack, out)
    assert result.returncode == 0, f"render {stack} failed:\n{result.stdout}\n{result.stderr}"
    assert f"-> {out}/" in result.stdout
    return stack, out


@pytest.fixture(scope="module")
def lab_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render-lab-hosts") / "out"
    result = _render("lab", out)
    assert result.returncode == 0, result.stderr
    return out


def _lab_hosts() -> list[dict[str, Any]]:
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())
    hosts = stack["config"]["gpu-cluster:hosts"]
    assert hosts, "Pulumi.lab.yaml lists no hosts"
    return hosts


def _plan_json(out: Path) -> dict[str, Any]:
    return json.loads((out / "plan.json").read_text())


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """relative path -> (content, mode) of every file under root."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------------------------
# every stack


def test_plan_json_entries(rendered: tuple[str, Path]) -> None:
    stack, out = rendered
    plan = _plan_json(out)
    assert plan["stack"] == stack
    assert plan["resources"], "empty plan"
    for entry in plan["resources"]:
        for key in ("type", "name", "parent", "dependencies", "inputs"):
            assert key in entry, f"{entry.get('name')}: no {key!r}"
        assert isinstance(entry["dependencies"], list)
        assert isinstance(entry["inputs"], dict)
    urns = [e["urn"] for e in plan["resources"]]
    assert len(urns) == len(set(urns)), "duplicate URNs"
    known = set(urns)
    for entry in plan["resources"]:
        for dep in entry["dependencies"]:
            assert dep in known, f"{entry['name']} depends on unknown {dep}"
        assert entry["parent"] in known or entry["parent"].endswith(f"pulumi:pulumi:Stack::gpu-cluster-{stack}")


def test_kubernetes_yaml_written(rendered: tuple[str, Path]) -> None:
    _, out = rendered
    files = sorted((out / "kubernetes").glob("*.yaml"))
    assert files, "no kubernetes/*.yaml"
    for f in files:
        obj = yaml.safe_load(f.read_text())
        assert {"apiVersion", "kind", "metadata"} <= set(obj), f.name
        assert obj["metadata"].get("name"), f.name


def test_device_plugin_daemonset_written(rendered: tuple[str, Path]) -> None:
    _, out = rendered
    f = out / "kubernetes" / "daemonset-gpu-system-gpu-device-plugin.yaml"
    assert f.is_file(), sorted(p.name for p in (out / "kubernetes").iterdir())
    obj = yaml.safe_load(f.read_text())
    assert obj["kind"] == "DaemonSet"
    assert obj["metadata"]["namespace"] == "gpu-system"
    images = [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]
    assert images == [versions.NVIDIA_DEVICE_PLUGIN_IMAGE]


def test_gpu_ready_gate_job_written(rendered: tuple[str, Path]) -> None:
    _, out = rendered
    f = out / "kubernetes" / "job-gpu-cluster-system-gpu-ready.yaml"
    assert f.is_file(), sorted(p.name for p in (out / "kubernetes").iterdir())
    obj = yaml.safe_load(f.read_text())
    assert obj["kind"] == "Job"
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == [versions.CUDA_VECTORADD_IMAGE]
    for ns in ("gpu-system", "gpu-cluster-system"):
        assert (out / "kubernetes" / f"namespace-cluster-{ns}.yaml").is_file(), ns


_NODE = re.compile(r'^  "(?P<id>[^"]+)" \[label="(?P<label>[^"]*)"\];$')
_EDGE = re.compile(r'^  "(?P<src>[^"]+)" -> "(?P<dst>[^"]+)"( \[[^\]]*\])?;$')


def test_graph_dot(rendered: tuple[str, Path]) -> None:
    _, out = rendered
    lines = (out / "graph.dot").read_text().splitlines()
    assert re.fullmatch(r"digraph \w+ \{", lines[0]), lines[0]
    assert lines[-1] == "}"
    nodes: list[str] = []
    edges: list[tuple[str, str]] = []
    for line in lines[1:-1]:
        if m := _NODE.match(line):
            nodes.append(m["id"])
        elif m := _EDGE.match(line):
            edges.append((m["src"], m["dst"]))
        else:
            assert re.fullmatch(r"  (rankdir|node) ?.*;", line), f"unexpected dot line: {line!r}"
    urns = [e["urn"] for e in _plan_json(out)["resources"]]
    assert sorted(nodes) == sorted(urns), "one node line per resource"
    for src, dst in edges:
        assert src in nodes and dst in nodes, f"edge to an undeclared node: {src} -> {dst}"
    assert edges, "no edges"


def test_summary(rendered: tuple[str, Path]) -> None:
    stack, out = rendered
    summary = (out / "summary.md").read_text()
    assert summary.startswith(f"# Plan of stack `{stack}`")
    n = len(_plan_json(out)["resources"])
    assert f"{n} resources." in summary


# ------------------------------------------------------------------------------------------------
# lab: hosts and helm


def test_lab_host_steps(lab_out: Path) -> None:
    hosts = _lab_hosts()
    written = {p.name for p in (lab_out / "hosts").iterdir()}
    assert written == {h["name"] for h in hosts}
    for h in hosts:
        d = lab_out / "hosts" / h["name"]
        gpu = int(h.get("gpus", 0)) > 0
        for step in NODE_STEPS + (GPU_STEPS if gpu else ()):
            script = d / f"{step}.sh"
            assert script.is_file(), f"{h['name']}: no {step}.sh"
            assert script.stat().st_mode & 0o111, f"{script} not executable"
            assert "#!/usr/bin/env bash" in script.read_text()
        if not gpu:
            for step in GPU_STEPS:
                assert not (d / f"{step}.sh").exists(), f"CPU host {h['name']} gets {step}"


def test_lab_one_init_and_one_join_per_worker(lab_out: Path) -> None:
    hosts = _lab_hosts()
    control_planes = [h["name"] for h in hosts if h["role"] == "control-plane"]
    workers = {h["name"] for h in hosts if h["role"] == "worker"}
    inits = sorted(lab_out.glob("hosts/*/*init.sh"))
    assert [p.relative_to(lab_out).as_posix() for p in inits] == [f"hosts/{control_planes[0]}/control-plane-init.sh"]
    assert "kubeadm init" in inits[0].read_text()
    joins = sorted(lab_out.glob("hosts/*/*join.sh"))
    assert {p.parent.name for p in joins} == workers
    assert len(joins) == len(workers)
    for p in joins:
        assert p.name == "join.sh"
        assert "kubeadm join" in p.read_text()
    # the join stdin carries a token: secret, so never written
    assert not list(lab_out.glob("hosts/*/join.stdin"))


def test_lab_calico_helm_file(lab_out: Path) -> None:
    f = lab_out / "helm" / "calico.yaml"
    assert f.is_file(), sorted(p.name for p in (lab_out / "helm").iterdir())
    release = yaml.safe_load(f.read_text())
    assert release["chart"] == versions.CALICO_CHART
    assert release["version"] == versions.CALICO_CHART_VERSION
    assert release["repositoryOpts"]["repo"] == versions.CALICO_CHART_REPO
    assert release["values"]["installation"]["calicoNetwork"]["ipPools"][0]["cidr"] == "10.244.0.0/16"


def test_hosts_only_on_lab_and_helm_per_stack(rendered: tuple[str, Path]) -> None:
    """lab provisions hosts and installs its CNI with Helm; dev touches no host. Both install the
    GPU stack's charts (GPU Feature Discovery from the device plugin chart, the DCGM exporter)."""
    stack, out = rendered
    assert (out / "hosts").is_dir() == (stack == "lab")
    gpu_charts = {f"{versions.NVIDIA_DEVICE_PLUGIN_CHART}.yaml", f"{versions.DCGM_EXPORTER_CHART}.yaml"}
    expected = gpu_charts | ({"calico.yaml", "calico-crds.yaml"} if stack == "lab" else set())
    expected |= {"monitoring.yaml"}  # kube-prometheus-stack, release "monitoring" (monitoring.enabled)
    # lab's shared storage (storage.provision in Pulumi.lab.yaml) comes through the NFS CSI driver.
    expected |= {f"{versions.CSI_DRIVER_NFS_CHART}.yaml"} if stack == "lab" else set()
    assert {p.name for p in (out / "helm").iterdir()} == expected


def test_bad_stack_exits_2(tmp_path: Path) -> None:
    result = _render("no-such-stack", tmp_path / "out")
    assert result.returncode == 2
    assert "no stack file" in result.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# secrets


@pytest.fixture(scope="module")
def canary_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the canary really is the value the program receives for the secret key
    values, secret_keys = program.stack_config("lab", secret_value=CANARY)
    assert "gpu-cluster:sshPrivateKey" in secret_keys
    assert values["gpu-cluster:sshPrivateKey"] == CANARY
    out = tmp_path_factory.mktemp("render-canary") / "out"
    write(program.run("lab", secret_value=CANARY), out)
    return out


def test_no_secret_in_any_written_file(canary_out: Path) -> None:
    files = [p for p in canary_out.rglob("*") if p.is_file()]
    assert len(files) > 10
    leaks = [str(p.relative_to(canary_out)) for p in files if CANARY.encode() in p.read_bytes()]
    assert not leaks, f"secret written to {leaks}"


def test_secret_inputs_are_masked(canary_out: Path) -> None:
    plan = _plan_json(canary_out)
    commands = [e for e in plan["resources"] if e["type"] == "command:remote:Command"]
    assert commands
    for e in commands:
        assert e["inputs"]["connection"]["privateKey"] == program.SECRET_MARKER, e["name"]
        # the rest of the connection stays readable: where a command runs is part of the plan
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", e["inputs"]["connection"]["host"]), e["name"]
    joins = [e for e in commands if e["name"].endswith("-join")]
    assert joins and all(e["inputs"]["stdin"] == program.SECRET_MARKER for e in joins)
    providers = [e for e in plan["resources"] if e["type"] == "pulumi:providers:kubernetes"]
    assert [p["inputs"]["kubeconfig"] for p in providers] == [program.SECRET_MARKER]
    assert plan["outputs"]["kubeconfig"] == program.SECRET_MARKER
    assert '- `kubeconfig`: "[secret]"' in (canary_out / "summary.md").read_text()


def test_runs_in_one_process_are_independent() -> None:
    """A second program.run in the same process starts from a fresh root stack: its resources
    are parented to its own stack and it exports only its own outputs."""
    lab = program.run("lab")
    dev = program.run("dev")
    assert set(dev.outputs) == {"kubeContext", "gpuNodes", "gpuStack", "gpuReadyGate", "sharedClaim", "training",
                                "grafanaAdminPassword", "grafanaPortForward", "gpuHealth"}
    roots = {r.parent for r in dev.resources if "::pulumi:pulumi:Stack::" in r.parent}
    assert roots == {"urn:pulumi:dev::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-dev"}
    again = program.run("lab")
    assert again.outputs == lab.outputs
    assert again.resources == lab.resources


# ------------------------------------------------------------------------------------------------
# determinism


@pytest.mark.parametrize("stack", STACKS)
def test_render_is_deterministic(tmp_path: Path, stack: str) -> None:
    """Two separate processes (hash seeds and map orders differ) give byte-identical output."""
    trees = []
    for run in ("a", "b"):
        result = _render(stack, tmp_path / run)
        assert result.returncode == 0, result.stderr
        trees.append(_tree(tmp_path / run))
    first, second = trees
    assert sorted(first) == sorted(second), "different file sets"
    differing = [name for name in first if first[name] != second[name]]
    assert not differing, f"differs between runs: {differing}"
