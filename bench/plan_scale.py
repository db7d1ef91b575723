"""How `./plan` and evaluating the real program scale with the number of GPU workers, against the SDK floor.

    .venv/bin/python bench/plan_scale.py                     # ./plan N = 2, 32, 128, 256; lab N = 2..256,
                                                             # gke N = 1, 4, 16; 3 repeats
    .venv/bin/python bench/plan_scale.py --plan-points 128 --points none --gke-points none   # ./plan at 128
    .venv/bin/python bench/plan_scale.py --smallest          # CI (make bench-smoke): every table at its smallest
    make bench                                               # this and critical_path.py

First table, ./plan: for each N, `python -m render lab --out DIR` (what ./plan runs) in a fresh
process, from a temporary project dir (symlinks to this one) whose Pulumi.lab.yaml is the lab with
N GPU workers and Pulumi.lab.yaml's layers (bench/_configs.lab_config(N, **lab_layers())): the
whole process timed, interpreter start, imports, evaluation, the whole-cluster check and every file
written. Its floor is the SDK floor below for the same counts (taken from the plan.json it wrote).
Columns: files written; ./plan s min / median (wall) with the whole-cluster check's disk memo warm
(render/cluster/memo.py, as on every ./plan after the first); ./plan CPU s min (user + system:
steadier than wall on a shared machine); floor s min / median; ratio of the medians and of the mins;
cold ./plan s median (the memo empty, as on a first ./plan) and its ratio. Each repeat uses a memo
folder of its own, emptied before its cold run.

The other tables, program.run:
For each N the generated stack from bench/_configs.py is evaluated (lab: N GPU workers plus one
control plane; gke: a cluster with N GPU node pools, bench/_configs.gke_config) by render.program.run: the real __main__.py under the Pulumi SDK's mocks and render's recording
monitor, nothing written to disk. Each run is a fresh Python subprocess, so peak RSS belongs to that
run alone and the SDK's global mock state starts clean.

Columns:
  N            lab: GPU workers; gke: GPU node pools
  resources    registrations recorded (components, providers and custom resources)
  program s    wall seconds of program.run (min and median over the repeats). Timed: config
               parsing, the project's modules' first import, every registration, output collection.
               Not timed: interpreter start and importing pulumi, pulumi_command, pulumi_kubernetes,
               pulumi_random (gke: also pulumi_gcp's modules the program uses) and render (done
               before the clock starts, identically for the floor of the same point).
  floor s      the same for the SDK floor (bench/floor/__main__.py) under the same mocks: as many
               ComponentResources as the plan has components and as many remote.Commands as it has
               custom resources, whose recorded inputs have the plan's average size
  ratio        median program s / median floor s: how much the project's own logic adds
  ms/res       median program s per resource (flat = linear scaling)
  RSS MiB      peak resident set of the run's process (max over repeats), program / floor
  input B/res  average json size of a custom resource's recorded inputs, program / floor (shows
               the floor's inputs are comparable)

Exits 0 after printing the table (this is a measurement, not a test: nothing is asserted about
the times); exits 1 only when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs  # noqa: E402

DEFAULT_POINTS = (2, 8, 32, 128, 256)
DEFAULT_GKE_POINTS = (1, 4, 16)
DEFAULT_PLAN_POINTS = (2, 32, 128, 256)
# What a project dir needs for `python -m render` (symlinked into a temporary one per run).
_PROJECT_PARTS = ("__main__.py", "Pulumi.yaml", "components", "config", "render", "stacks", "workloads")
FLOOR_DIR = _configs.PROJECT_ROOT / "bench" / "floor"
REPLAY_FLOOR_DIR = _configs.PROJECT_ROOT / "bench" / "floor_replay"


# --- one run, in a child process -------------------------------------------------------------------

def _warm_imports(platform: str) -> None:
    """Import the SDKs before the clock starts, for the program and its floor alike."""
    import pulumi  # noqa: F401
    import pulumi_command.remote  # noqa: F401
    import pulumi_kubernetes  # noqa: F401
    import pulumi_kubernetes.apps.v1  # noqa: F401
    import pulumi_kubernetes.batch.v1  # noqa: F401
    import pulumi_kubernetes.core.v1  # noqa: F401
    import pulumi_kubernetes.helm.v3  # noqa: F401
    import pulumi_kubernetes.meta.v1  # noqa: F401
    import pulumi_random  # noqa: F401

    if platform == "gke":  # pulumi_gcp loads a module on first attribute access: the gke stack's
        import pulumi_gcp as gcp

        for cls in (gcp.container.Cluster, gcp.container.NodePool, gcp.filestore.Instance,
                    gcp.projects.IAMMember, gcp.serviceaccount.Account):
            assert cls

    from render import program  # noqa: F401


def _summary(plan, wall: float, cpu: float = 0.0) -> dict:
    custom = [r for r in plan.resources if r.custom]
    sizes = [len(json.dumps(r.inputs)) for r in custom]
    return {
        "resources": len(plan.resources),
        "components": len(plan.resources) - len(custom),
        "custom": len(custom),
        "input_bytes": round(statistics.mean(sizes)) if sizes else 0,
        "wall": wall,
        "cpu": cpu,  # user + system seconds of the run: steadier than wall on a shared machine
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
    }


def child(args: argparse.Namespace) -> None:
    _warm_imports(args.platform)
    from render import program

    if args.child == "program":
        config = _configs.config_for(args.platform, args.workers)
        start, cpu_start = time.perf_counter(), time.process_time()
        plan = program.run(args.platform, config=config)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    elif args.child == "replay":
        values = {_configs.PREFIX + "floorPlan": args.floor_plan, _configs.SECRET_KEY: "x"}
        start, cpu_start = time.perf_counter(), time.process_time()
        plan = program.run("floor", project_dir=REPLAY_FLOOR_DIR, config=(values, [_configs.SECRET_KEY]))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    else:
        values = {
            _configs.PREFIX + "floorComponents": str(args.floor_components),
            _configs.PREFIX + "floorCommands": str(args.floor_commands),
            _configs.PREFIX + "floorInputBytes": str(args.floor_input_bytes),
            _configs.SECRET_KEY: "x",
        }
        start, cpu_start = time.perf_counter(), time.process_time()
        plan = program.run("floor", project_dir=FLOOR_DIR, config=(values, [_configs.SECRET_KEY]))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(json.dumps(_summary(plan, wall, cpu)))


# --- ./plan: the whole render, in a child process ----------------------------------------------------

def _stack_file(config: _configs.Config) -> str:
    """Pulumi.lab.yaml holding a generated config (secrets as `secure:` values, never read)."""
    values, secrets = config
    out: dict[str, object] = {}
    for key, value in values.items():
        if key in secrets:
            out[key] = {"secure": "v1:bench-not-a-real-ciphertext"}
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return yaml.safe_dump({"config": out}, sort_keys=False)


def measure_plan_once(n: int, memo_dir: str, keep_plan: Path | None = None) -> dict:
    """`python -m render lab --out DIR` (what ./plan runs) for the lab with n GPU workers and
    Pulumi.lab.yaml's layers, from a project dir whose Pulumi.lab.yaml is the generated config:
    the whole process timed (interpreter start, imports, evaluation, the whole-cluster check,
    every file written). Returns its wall and CPU seconds and the plan's counts for the floor;
    with `keep_plan`, its plan.json is copied there (the replay floor reads it)."""
    from render import cluster
    from render.cluster import memo

    env = dict(os.environ, GPU_CLUSTER_UPSTREAM=str(cluster.upstream_dir()), **{memo.CACHE_ENV: memo_dir})
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        for part in _PROJECT_PARTS:
            (project / part).symlink_to(_configs.PROJECT_ROOT / part)
        (project / "Pulumi.lab.yaml").write_text(_stack_file(_configs.lab_config(n, **_configs.lab_layers())))
        out = Path(tmp) / "out"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "render", "lab", "--out", str(out)], cwd=project, env=env,
                              capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"plan_scale: render of the lab with {n} GPU workers exited {proc.returncode}")
        plan_text = (out / "plan.json").read_text()
        if keep_plan is not None:
            keep_plan.write_text(plan_text)
        resources = json.loads(plan_text)["resources"]
        files = sum(1 for p in out.rglob("*") if p.is_file())
    custom = [r for r in resources if r["custom"]]
    return {
        "wall": wall,
        "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "rss_mib": after.ru_maxrss / 1024,
        "resources": len(resources),
        "components": len(resources) - len(custom),
        "custom": len(custom),
        "input_bytes": round(statistics.mean(len(json.dumps(r["inputs"])) for r in custom)) if custom else 0,
        "files": files,
    }


def measure_plan(n: int, repeats: int) -> dict:
    plans: list[dict] = []
    floors: list[dict] = []
    colds: list[dict] = []
    replays: list[dict] = []
    for _ in range(repeats):
        # Cold: the whole-cluster check's memo (render/cluster/memo.py) empty, as on a first ./plan;
        # warm: the same memo again, as on every ./plan after it (the timed ./plan of the table).
        with tempfile.TemporaryDirectory(prefix="plan-scale-memo-") as memo_dir, \
                tempfile.TemporaryDirectory(prefix="plan-scale-replay-") as replay_dir:
            colds.append(measure_plan_once(n, memo_dir))
            plan_json = Path(replay_dir) / "plan.json"
            plan = measure_plan_once(n, memo_dir, keep_plan=plan_json)
            replays.append(_spawn("--child", "replay", "--floor-plan", str(plan_json)))
        plans.append(plan)
        floors.append(_spawn("--child", "floor", "--platform", "lab",
                             "--floor-components", str(plan["components"]),
                             "--floor-commands", str(plan["custom"]),
                             "--floor-input-bytes", str(plan["input_bytes"])))
    pw, fw = [r["wall"] for r in plans], [r["wall"] for r in floors]
    row = {
        "n": n, "resources": plans[0]["resources"], "files": plans[0]["files"],
        "pmin": min(pw), "pmed": statistics.median(pw), "fmin": min(fw), "fmed": statistics.median(fw),
        "pcpu": min(r["cpu"] for r in plans),
        "cmed": statistics.median(r["wall"] for r in colds),
        "rmed": statistics.median(r["wall"] for r in replays),
        "fcpu": min(r["cpu"] for r in floors), "rcpu": min(r["cpu"] for r in replays),
    }
    row["ratio_replay"] = row["pmed"] / row["rmed"]
    row["ratio_cold"] = row["cmed"] / row["fmed"]
    row["ratio"] = row["pmed"] / row["fmed"]
    row["ratio_min"] = row["pmin"] / row["fmin"]
    print(f"  ./plan N={n}: {row['resources']} resources, {row['files']} files, median {_fmt(row['pmed'])} s, "
          f"cold median {_fmt(row['cmed'])} s, floor median {_fmt(row['fmed'])} s, "
          f"replay floor median {_fmt(row['rmed'])} s", file=sys.stderr, flush=True)
    return row


def print_plan_table(rows: list[dict], repeats: int) -> None:
    print("./plan: `python -m render lab --out DIR` for 1 control plane + N GPU workers (8 GPUs each) with "
          f"Pulumi.lab.yaml's layers, the whole process timed (start, imports, evaluation, whole-cluster check, "
          f"files) with the check's memo warm (a second ./plan); cold: the first ./plan, memo empty; floor as "
          f"above for the same counts; replay floor: the SDK registering this very plan.json again "
          f"(bench/floor_replay: its nested inputs as plain values, no project logic); {repeats} repeats, "
          f"interleaved.")
    print("| GPU workers | resources | files | ./plan s min | ./plan s median | ./plan CPU s min | floor s min "
          "| floor s median | ratio (medians) | ratio (mins) | cold ./plan s median | cold ratio (medians) "
          "| replay floor s median | ratio to replay (medians) | floor CPU s min | replay CPU s min "
          "| CPU ratio to floor (mins) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['n']} | {r['resources']} | {r['files']} | {_fmt(r['pmin'])} | {_fmt(r['pmed'])} "
              f"| {_fmt(r['pcpu'])} | {_fmt(r['fmin'])} | {_fmt(r['fmed'])} | {_fmt(r['ratio'], 2)} "
              f"| {_fmt(r['ratio_min'], 2)} | {_fmt(r['cmed'])} | {_fmt(r['ratio_cold'], 2)} "
              f"| {_fmt(r['rmed'])} | {_fmt(r['ratio_replay'], 2)} | {_fmt(r['fcpu'])} | {_fmt(r['rcpu'])} "
              f"| {_fmt(r['pcpu'] / r['fcpu'], 2)} |")
    print(flush=True)


# --- the driver ------------------------------------------------------------------------------------

def _spawn(*argv: str) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv],
        cwd=_configs.PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"plan_scale: run {' '.join(argv)} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def header() -> list[str]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"CPU: {_cpu_model()} ({cpus} usable cores; load average at start {load})",
        f"Python {platform.python_version()}; pulumi {_version('pulumi')}, pulumi-command "
        f"{_version('pulumi-command')}, pulumi-kubernetes {_version('pulumi-kubernetes')}, "
        f"grpcio {_version('grpcio')}, protobuf {_version('protobuf')}",
    ]


def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


STACKS = {
    "lab": ("GPU workers", "lab, 1 control plane + N GPU workers (8 GPUs each)"),
    "gke": ("GPU pools", "gke, a zonal GKE cluster (system pool, Filestore) + N GPU node pools alternating "
                         "g2-standard-8 / 1 L4 (spot) and a2-highgpu-1g / 1 A100, one zone each (bench/_configs.py)"),
}


def measure(platform: str, n: int, repeats: int) -> dict:
    prog_runs: list[dict] = []
    floor_runs: list[dict] = []
    for _ in range(repeats):
        prog = _spawn("--child", "program", "--platform", platform, "--workers", str(n))
        prog_runs.append(prog)
        floor_runs.append(
            _spawn(
                "--child", "floor", "--platform", platform,
                "--floor-components", str(prog["components"]),
                "--floor-commands", str(prog["custom"]),
                "--floor-input-bytes", str(prog["input_bytes"]),
            )
        )
    pw = [r["wall"] for r in prog_runs]
    fw = [r["wall"] for r in floor_runs]
    resources = {r["resources"] for r in prog_runs}
    if len(resources) != 1 or floor_runs[0]["resources"] != prog_runs[0]["resources"]:
        raise SystemExit(f"plan_scale: {platform} N={n}: resource counts differ between runs: "
                         f"program {sorted(resources)}, floor {floor_runs[0]['resources']}")
    row = {
        "n": n,
        "resources": prog_runs[0]["resources"],
        "pmin": min(pw), "pmed": statistics.median(pw),
        "fmin": min(fw), "fmed": statistics.median(fw),
        "prss": max(r["rss_mib"] for r in prog_runs),
        "frss": max(r["rss_mib"] for r in floor_runs),
        "pbytes": prog_runs[0]["input_bytes"], "fbytes": floor_runs[0]["input_bytes"],
    }
    row["ratio"] = row["pmed"] / row["fmed"]
    print(f"  {platform} N={n}: {row['resources']} resources, program median {_fmt(row['pmed'])} s, "
          f"floor median {_fmt(row['fmed'])} s", file=sys.stderr, flush=True)
    return row


def print_table(platform: str, rows: list[dict], repeats: int) -> None:
    label, what = STACKS[platform]
    print(f"Stack: {what}; {repeats} repeats per point, each run in a fresh subprocess; "
          "program and floor runs interleaved.")
    print(f"| {label} | resources | program s min | program s median | floor s min | floor s median "
          "| ratio | ms/res | peak RSS MiB program / floor | input B/res program / floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['n']} | {r['resources']} | {_fmt(r['pmin'])} | {_fmt(r['pmed'])} | {_fmt(r['fmin'])} "
              f"| {_fmt(r['fmed'])} | {_fmt(r['ratio'], 1)} | {_fmt(1000 * r['pmed'] / r['resources'], 1)} "
              f"| {r['prss']:.0f} / {r['frss']:.0f} | {r['pbytes']} / {r['fbytes']} |")
    print(flush=True)


def drive(points: list[int], gke_points: list[int], plan_points: list[int], repeats: int) -> int:
    for line in header():
        print(line)
    print(flush=True)
    started = time.perf_counter()
    if plan_points:
        print_plan_table([measure_plan(n, repeats) for n in plan_points], repeats)
    for stack, pts in (("lab", points), ("gke", gke_points)):
        if pts:
            print_table(stack, [measure(stack, n, repeats) for n in pts], repeats)
    print(f"Total benchmark time: {time.perf_counter() - started:.0f} s.")
    return 0


def _points_or_none(text: str) -> list[int]:
    return [] if text.strip().lower() == "none" else _configs.parse_points(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--plan-points", type=_points_or_none, default=list(DEFAULT_PLAN_POINTS),
                        help="GPU worker counts for the ./plan table (the whole render), or 'none' "
                             "(default: %(default)s)")
    parser.add_argument("--points", type=_points_or_none, default=list(DEFAULT_POINTS),
                        help="comma-separated GPU worker counts for program.run, or 'none' (default: %(default)s)")
    parser.add_argument("--gke-points", type=_points_or_none, default=list(DEFAULT_GKE_POINTS),
                        help="comma-separated GPU pool counts for the gke stack, or 'none' (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point and mode (default: 3)")
    parser.add_argument("--smallest", action="store_true",
                        help="the smallest run (CI's smoke run): --plan-points 2 --points 2 --gke-points 1 --repeats 1")
    # Internal: one measured run (the driver spawns these).
    parser.add_argument("--child", choices=("program", "floor", "replay"), help=argparse.SUPPRESS)
    parser.add_argument("--floor-plan", help=argparse.SUPPRESS)
    parser.add_argument("--platform", choices=tuple(STACKS), default="lab", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-components", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-commands", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-input-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.smallest:
        args.plan_points, args.points, args.gke_points, args.repeats = [2], [2], [1], 1
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return drive(args.points, args.gke_points, args.plan_points, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
