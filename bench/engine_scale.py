"""The real Pulumi engine on this program: `pulumi preview` of the lab stack against the same engine
registering the same resources with no program logic, and `pulumi up` of the dev stack end to end.

    .venv/bin/python bench/engine_scale.py                  # previews at 2, 32, 128 workers, 3 runs; dev up
    .venv/bin/python bench/engine_scale.py --points 2,32 --repeats 1 --no-up
    .venv/bin/python bench/engine_scale.py --smallest       # CI (make bench-smoke): 2 workers, 1 run; dev up

Needs the toolchain (`make toolchain`: the pulumi CLI, its language host, pulumi-kubernetes, and for
the up the control plane's binaries) and the upstream charts ($GPU_CLUSTER_UPSTREAM).

Previews. For each N, the lab with N GPU workers and Pulumi.lab.yaml's layers (bench/_configs.py,
as plan_scale.py's ./plan table) is a stack of its own (e2e/pulumi_stack.Workspace: local file
backend, passphrase secrets, a throwaway SSH key; preview opens no connection). Its floor is a second
stack in a project whose `main` is bench/floor_replay, its config `floorPlan` the plan.json that
`python -m render` wrote for that very config: the engine, the language host and the same providers
(pulumi-kubernetes, the random and command stand-ins) handling the same resources, each of the same
type, name, parent, provider and inputs, with no program logic. Each preview is the whole `pulumi
preview --json` process (CLI start, plugins, the program, every step) in a process group of its
own, killed at PREVIEW_TIMEOUT; program and floor runs interleave. A run fails the benchmark (exit 1)
if it errs or if its custom resources (type::name) differ from the other's.

Up. A control plane on loopback made from the lab stack (e2e/control_plane.py, as the e2e session
fixture starts it), then `pulumi up` of the dev stack's "device-plugin" variant (e2e/dev_stack.py:
every object created and awaited as pulumi-kubernetes awaits it) and `pulumi destroy`; every process
is stopped at the end, and one left behind fails the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs, plan_scale  # noqa: E402
from components.toolchain_versions import (  # noqa: E402
    ETCD,
    KUBERNETES,
    KWOK,
    PULUMI,
    PULUMI_KUBERNETES,
    PULUMI_LANGUAGE_PYTHON,
    binary_path,
)
from e2e.pulumi_stack import PROJECT, Workspace, resource_key  # noqa: E402

DEFAULT_POINTS = (2, 32, 128)
PREVIEW_TIMEOUT = 900  # one preview of the largest lab; the engine at 128 workers takes minutes on 2 cores
KEY_TIMEOUT = 30
UP_TIMEOUT = 900  # one up or destroy of the dev stack, every await included (e2e/pulumi_stack.py)
UP_VARIANT = "device-plugin"
FLOOR_MAIN = _configs.PROJECT_ROOT / "bench" / "floor_replay"


class BenchFailed(RuntimeError):
    pass


def pulumi(workspace: Workspace, *args: str, timeout: float) -> tuple[int, float, str, str]:
    """`pulumi ARGS --stack S` in the workspace, in a process group of its own (the language host and
    the providers with it), the whole group killed at `timeout`: exit code, seconds, stdout, stderr."""
    argv = [str(binary_path(PULUMI, "pulumi")), *args, "--non-interactive", "--stack", workspace.stack]
    began = time.monotonic()
    proc = subprocess.Popen(argv, cwd=workspace.folder, env=workspace.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return 124, time.monotonic() - began, out, f"{err}\ntimed out after {timeout} s"
    finally:
        try:  # a plugin that outlived the CLI
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, time.monotonic() - began, out, err


def preview(workspace: Workspace) -> tuple[float, set[str], int]:
    """One `pulumi preview`: seconds, the custom resources it would create (type::name), its steps."""
    code, seconds, out, err = pulumi(workspace, "preview", "--json", timeout=PREVIEW_TIMEOUT)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        doc = {}
    errors = [d["message"].strip() for d in doc.get("diagnostics", []) if d.get("severity") == "error"]
    if code != 0 or errors or not doc:
        tail = "\n".join((out + err).strip().splitlines()[-30:])
        raise BenchFailed(f"preview of {workspace.folder.name} exited {code}: {errors or tail}")
    steps = doc.get("steps", [])
    custom = {resource_key(s["urn"]) for s in steps if (s.get("newState") or {}).get("custom")}
    return seconds, custom, len(steps)


def lab_stack_config(n: int) -> dict[str, Any]:
    """The generated lab config as a stack file holds it (objects as objects), secrets left out."""
    values, secret_keys = _configs.lab_config(n, **_configs.lab_layers())
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in secret_keys:
            continue
        try:
            out[key.removeprefix(_configs.PREFIX)] = json.loads(value)
        except ValueError:
            out[key.removeprefix(_configs.PREFIX)] = value
    return out


def stacks(n: int, folder: Path) -> tuple[Workspace, Workspace]:
    """The program's stack and the replay floor's, for the lab with n GPU workers."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "key")], check=True,
                   timeout=KEY_TIMEOUT)
    program = Workspace(folder / "program", "bench", lab_stack_config(n))
    program.init({"sshPrivateKey": (folder / "key").read_text()})
    plan_json = folder / "plan.json"
    with tempfile.TemporaryDirectory(prefix="engine-scale-memo-") as memo_dir:
        plan_scale.measure_plan_once(n, memo_dir, keep_plan=plan_json)  # ./plan's plan.json for this config
    floor = Workspace(folder / "floor", "bench", {"floorPlan": str(plan_json)})
    # The same project name (the config namespace), the replay as its program, no config schema.
    project = {"name": PROJECT, "runtime": "python", "main": str(FLOOR_MAIN)}
    (floor.folder / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    floor.init({})
    return program, floor


def measure_preview(n: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"engine-scale-{n}-") as tmp:
        program, floor = stacks(n, Path(tmp))
        runs: dict[str, list[float]] = {"program": [], "floor": []}
        for _ in range(repeats):
            p_seconds, p_custom, p_steps = preview(program)
            f_seconds, f_custom, f_steps = preview(floor)
            if p_custom != f_custom:
                raise BenchFailed(f"N={n}: the floor does not register the program's custom resources: only in the "
                                  f"program {sorted(p_custom - f_custom)[:10]}, only in the floor "
                                  f"{sorted(f_custom - p_custom)[:10]}")
            runs["program"].append(p_seconds)
            runs["floor"].append(f_seconds)
    row = {"n": n, "steps": p_steps, "floor_steps": f_steps, "custom": len(p_custom),
           "pmin": min(runs["program"]), "pmed": statistics.median(runs["program"]),
           "fmin": min(runs["floor"]), "fmed": statistics.median(runs["floor"])}
    row["ratio"] = row["pmed"] / row["fmed"]
    print(f"  preview N={n}: {p_steps} resources, program median {row['pmed']:.1f} s, floor median "
          f"{row['fmed']:.1f} s", file=sys.stderr, flush=True)
    return row


def print_preview_table(rows: list[dict[str, Any]], repeats: int) -> None:
    print("`pulumi preview` of the lab (1 control plane + N GPU workers, 8 GPUs each, Pulumi.lab.yaml's layers) "
          "with the real engine and providers, the whole CLI process timed; floor: the same engine registering "
          f"./plan's plan.json for that config with no program logic (bench/floor_replay); {repeats} runs each, "
          "interleaved.")
    print("| GPU workers | resources (steps) | custom | program s min | program s median | floor s min "
          "| floor s median | ratio (medians) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['n']} | {r['steps']} | {r['custom']} | {r['pmin']:.1f} | {r['pmed']:.1f} | {r['fmin']:.1f} "
              f"| {r['fmed']:.1f} | {r['ratio']:.2f} |")
    print(flush=True)


def measure_up(upstream: Path) -> dict[str, Any]:
    """A control plane on loopback, `pulumi up` and `pulumi destroy` of the dev stack on it; every
    process stopped at the end (a group left behind fails the benchmark)."""
    from e2e import dev_stack, lab_stack
    from e2e.control_plane import ControlPlane
    from e2e.published_charts import published_charts

    row: dict[str, Any] = {"variant": UP_VARIANT}
    with tempfile.TemporaryDirectory(prefix="engine-scale-up-") as tmp:
        folder = Path(tmp)
        plane = ControlPlane(lab_stack.from_stack("lab", upstream), folder / "control-plane")
        plane.start()
        groups = [c.proc.pid for c in plane.components]
        row["control_plane_s"] = plane.total_seconds
        workspace = None
        try:
            charts = published_charts(upstream / "charts", folder / "charts")
            workspace = Workspace(folder / "dev", "bench-dev", dev_stack.config(plane, charts, UP_VARIANT))
            workspace.init({"kubeconfig": dev_stack.admin_kubeconfig(plane),
                            "wandbApiKey": secrets.token_hex(20)})  # a throwaway: the agent runs nothing here
            row["up_s"] = _must(workspace, "up", "--yes", "--skip-preview")
            row["resources"] = len(workspace.resources())
            row["destroy_s"] = _must(workspace, "destroy", "--yes", "--skip-preview")
            row["left"] = len(workspace.resources())
        finally:
            if workspace is not None and row.get("left") is None and workspace.resources():
                pulumi(workspace, "destroy", "--yes", "--skip-preview", timeout=UP_TIMEOUT)  # what a failure left
            plane.stop()
        left = plane.left_behind(groups)
    if left:
        raise BenchFailed(f"processes left behind after the control plane stopped: groups {left}")
    if row["left"]:
        raise BenchFailed(f"pulumi destroy left {row['left']} resources in the state")
    print(f"  dev up: {row['resources']} resources, up {row['up_s']:.1f} s, destroy {row['destroy_s']:.1f} s",
          file=sys.stderr, flush=True)
    return row


def _must(workspace: Workspace, *args: str) -> float:
    code, seconds, out, err = pulumi(workspace, *args, timeout=UP_TIMEOUT)
    if code != 0:
        tail = "\n".join((out + err).strip().splitlines()[-40:])
        raise BenchFailed(f"`pulumi {args[0]}` of the dev stack exited {code} after {seconds:.0f} s:\n{tail}")
    return seconds


def print_up_table(row: dict[str, Any]) -> None:
    print(f"`pulumi up` of the dev stack ({row['variant']} variant, e2e/dev_stack.py) with the real engine and "
          "pulumi-kubernetes against a control plane on loopback (etcd, kube-apiserver, controller-manager, "
          "scheduler, KWOK nodes), every object created and awaited; then `pulumi destroy`.")
    print("| resources | control plane start s | up s | destroy s |")
    print("|---:|---:|---:|---:|")
    print(f"| {row['resources']} | {row['control_plane_s']:.1f} | {row['up_s']:.1f} | {row['destroy_s']:.1f} |")
    print(flush=True)


def header() -> list[str]:
    return [*plan_scale.header(),
            f"pulumi {PULUMI.version}, pulumi-language-python {PULUMI_LANGUAGE_PYTHON.version}, "
            f"pulumi-kubernetes {PULUMI_KUBERNETES.version} (the toolchain's, docs/toolchain.md); "
            "pulumi-random and pulumi-command: the stand-ins of e2e/providers"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--points", type=_configs.parse_points, default=list(DEFAULT_POINTS),
                        help="GPU worker counts for the previews (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="previews per point and side (default: 3)")
    parser.add_argument("--no-up", action="store_true", help="leave out the dev stack's up and destroy")
    parser.add_argument("--smallest", action="store_true",
                        help="CI's smoke run: --points 2 --repeats 1, and the dev up")
    args = parser.parse_args(argv)
    if args.smallest:
        args.points, args.repeats = [2], 1
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    needed = [(PULUMI, "pulumi"), (PULUMI_LANGUAGE_PYTHON, "pulumi-language-python"),
              (PULUMI_KUBERNETES, "pulumi-resource-kubernetes")]
    if not args.no_up:
        needed += [(KUBERNETES, "kube-apiserver"), (KUBERNETES, "kube-controller-manager"),
                   (KUBERNETES, "kube-scheduler"), (ETCD, "etcd"), (KWOK, "kwok")]
    missing = [str(binary_path(c, b)) for c, b in needed if not os.access(binary_path(c, b), os.X_OK)]
    if missing:
        print(f"engine_scale: not built: {', '.join(missing)}; run `make toolchain` (docs/toolchain.md)",
              file=sys.stderr)
        return 1
    from render import cluster

    upstream = cluster.upstream_dir()
    os.environ.setdefault("GPU_CLUSTER_UPSTREAM", str(upstream))  # the ./plan that writes the floor's plan.json
    for line in header():
        print(line)
    print(flush=True)
    started = time.perf_counter()
    try:
        print_preview_table([measure_preview(n, args.repeats) for n in args.points], args.repeats)
        if not args.no_up:
            print_up_table(measure_up(upstream))
    except BenchFailed as failed:
        print(f"engine_scale: {failed}", file=sys.stderr)
        return 1
    print(f"Total benchmark time: {time.perf_counter() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
