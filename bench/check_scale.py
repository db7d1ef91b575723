"""What the whole-cluster check (render/cluster/) costs beside evaluating the plan, lab N = 2..256.

    .venv/bin/python bench/check_scale.py                          # N = 2, 8, 32, 128, 256; 3 repeats
    .venv/bin/python bench/check_scale.py --points 2,256 --repeats 1
    .venv/bin/python bench/check_scale.py --smallest               # N = 2, 1 run (CI: make bench-smoke)

For each N, a fresh Python subprocess evaluates the lab stack with N GPU workers and Pulumi.lab.yaml's
in-cluster layers (bench/_configs.lab_config(N, **lab_layers())) with render.program.run, then runs
render.cluster.check on that plan: every Helm release rendered with its pinned upstream chart (once
per release, whatever N is), every object validated, N + 1 nodes modelled and every pod placed.
The check runs cold (a fresh process: nothing cached), as `python -m render lab` runs it.

Columns:
  N          GPU workers (plus one control plane)
  resources  plan registrations
  objects    Kubernetes objects the check looked at (the plan's and the charts')
  plan s     wall seconds of program.run (median; min in brackets)
  check s    wall seconds of cluster.check (median; min in brackets)
  check/plan median check s / median plan s
  verdict    whether the plan would come up (it must, for the committed layers)

Prints the table and exits 0; exits 1 if a run fails or a plan would not come up. A measurement,
not a test.
Needs the upstream charts: $GPU_CLUSTER_UPSTREAM or ../shared/upstream.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs  # noqa: E402

DEFAULT_POINTS = (2, 8, 32, 128, 256)


def child(workers: int) -> None:
    import pulumi  # noqa: F401  (imports before the clock, as plan_scale.py does)
    import pulumi_command.remote  # noqa: F401
    import pulumi_kubernetes  # noqa: F401

    from render import cluster, program

    upstream = cluster.upstream_dir()
    config = _configs.lab_config(workers, **_configs.lab_layers())
    start = time.perf_counter()
    plan = program.run("lab", config=config)
    plan_s = time.perf_counter() - start
    start = time.perf_counter()
    report = cluster.check(plan, plan.config, upstream)
    check_s = time.perf_counter() - start
    print(json.dumps({"resources": len(plan.resources), "objects": report.objects, "plan": plan_s,
                      "check": check_s, "ok": report.ok, "problems": report.problems[:3]}))


def _run(workers: int) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(workers)],
                          cwd=_configs.PROJECT_ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"check_scale: N={workers} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=_configs.parse_points, default=list(DEFAULT_POINTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smallest", action="store_true", help="the smallest run (CI's smoke run): --points 2 --repeats 1")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smallest:
        args.points, args.repeats = [2], 1
    if args.child is not None:
        child(args.child)
        return 0
    print(f"CPU: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; Python {sys.version.split()[0]}\n")
    print("| N | resources | objects | plan s | check s | check/plan | verdict |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for n in args.points:
        runs = [_run(n) for _ in range(args.repeats)]
        plan = [r["plan"] for r in runs]
        check = [r["check"] for r in runs]
        verdict = "comes up" if all(r["ok"] for r in runs) else f"NOT: {runs[0]['problems']}"
        failed += verdict != "comes up"
        print(f"| {n} | {runs[0]['resources']} | {runs[0]['objects']} | {statistics.median(plan):.2f} "
              f"({min(plan):.2f}) | {statistics.median(check):.2f} ({min(check):.2f}) | "
              f"{statistics.median(check) / statistics.median(plan):.2f} | {verdict} |", flush=True)
    if failed:
        print(f"check_scale: {failed} of {len(args.points)} plans would not come up", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
