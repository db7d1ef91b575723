"""Critical path of `pulumi up` for the lab stack: how long the longest chain of dependent steps takes,
and how long until every worker is Ready once the control plane's sshd and a shared package mirror
are in the picture.

    .venv/bin/python bench/critical_path.py                      # N = 2, 8, 32, 128 GPU workers
    .venv/bin/python bench/critical_path.py --compare HEAD~1     # also the program at a git ref: before/after
    .venv/bin/python bench/critical_path.py --points 2,64 --cost nvidia-driver=300 --trials 50
    .venv/bin/python bench/critical_path.py --launcher pytorchjob   # the training operator path
    .venv/bin/python bench/critical_path.py --smallest            # N = 2, 3 and 1 trial (CI: make bench-smoke)
    make bench                                                   # this and plan_scale.py

The stack is the generated lab config (bench/_configs.py) with the in-cluster layers of
Pulumi.lab.yaml: monitoring (always on), NFS shared storage on the control plane, the NCCL
acceptance Job and the training job (2 nodes; --launcher picks indexed-job or pytorchjob).
For each N the real program is evaluated under the mocks (render.program.run, nothing written) and
its plan turned into a graph in which a step can start once every step it waits for has finished,
which is how the Pulumi engine schedules with its default unbounded `--parallel`. Step r waits for:
  - each resource in r's dependencies (explicit depends_on and the resources whose outputs r's inputs
    use); a dependency on a component means on the component and all of its descendants;
  - r's explicit provider (the engine configures a provider before any resource that uses it; the
    Kubernetes provider reads its kubeconfig from control-plane-kubeconfig, so without this edge the
    CNI would look as if it could start at t=0);
  - everything every ancestor of r (parent, grandparent, ...) depends on, expanded the same way, and
    an ancestor that is itself a custom resource;
  - the waits that happen in the cluster rather than in Pulumi's graph, listed in IMPLICIT_WAITS (step_costs.py)
    (the GPU-ready gate Job completes only once every GPU node is Ready).
Each step costs the typical duration in COSTS (step_costs.py) (components and providers cost 0, except a
component in the table: the kustomize Directory, whose children the provider creates and awaits;
Kubernetes objects Pulumi does not await, including any annotated pulumi.com/skipAwait, cost 1 s). A host step or an awaited Kubernetes kind (Deployment,
DaemonSet, Job, Helm release, ...) the table does not know stops the script (exit 2) rather than
counting as free.

Columns of the structure table:
  resources      registrations in the plan
  costed steps   resources with a nonzero cost (real work on a host or in the cluster)
  depth          the largest number of costed steps on any chain of the graph (zero-cost components
                 and providers are not counted). Independent of N when hosts are set up in parallel.
  critical path  the largest sum of costs along a chain: the estimated time until `pulumi up` is done
                 (every node Ready, CNI and GPU software rolled out, the GPU-ready gate passed), with
                 unbounded parallelism
  sum of steps   every step's cost added up: the time of doing it one step, one server after another
  speedup        sum of steps / critical path

Contention (the second table): the same graph run as a discrete-event simulation with two shared
resources the longest-path model leaves out (SshdModel, MirrorModel in contention.py, every parameter
with its source):
  - the control plane's sshd. Every remote command opens its own SSH connection. sshd_config(5),
    MaxStartups (default 10:30:100): with 10 unauthenticated connections open, sshd refuses a new
    one with probability 30%, rising linearly to 100% at 100. A connection stays unauthenticated
    for its handshake (--ssh-handshake seconds, part of the step's cost). pulumi-command redials a
    refused connection after 0.1 s, x1.5 each time, at most 5 s (pulumi sdk retry.Until defaults)
    and fails the step after more than dialErrorLimit = 10 refused dials (its default). Only the
    steps whose connection is the control plane's contend; each worker's own steps run one at a
    time on its own sshd. Random early drop is random: each point is run --trials times with seeded
    draws; the tables give the median and count the steps that would have failed.
  - a shared package mirror. The apt steps' downloads (DOWNLOADS_MB, sizes with their basis) share
    one bottleneck fairly (processor sharing), each download also capped at the rate one host gets
    alone. The cost table's durations are for one host alone at BASELINE_MBIT; under sharing a step
    takes its cost minus that alone-time of its download, plus its download under sharing.
    Two settings: the hosts reach the mirrors through a 1 Gbit/s uplink; or a LAN apt cache with a
    25 Gbit/s NIC, cold (each package crosses the uplink once and is streamed to every host that
    asked for it, so one download still gets at most the uplink's rate).
"Ready" = every worker's `-ready` step done (what the GPU-ready gate waits for); "up" = the last step.

--compare REF evaluates the program at git ref REF too (extracted with `git archive` into a
temporary directory and run with this script, so the cost table and the models are the same) and
prints both, before (REF) and after (this tree).

Also printed: the chain behind the critical path and the deepest chain, and how old the join token
is when the last join uses it: a per-join `kubeadm token create --ttl 15m` step (the earlier
layout), or the cluster's token Secret, valid JOIN_TOKEN_TTL after the program ran.

Exits 1 (and says which chain) if depth or the critical path grows with N: that means the program
serializes work that could run in parallel, a bug to fix in the program. Exits 2 on a step with no
cost. Not modelled: image pulls from registries (the DCGM exporter's ~1 GB image on every GPU node
is the largest), a bastion (every host's sessions would then go through the bastion's sshd),
retries after failures, and the control plane's CPU and memory. It is an estimate of the
structure and of the shared bottlenecks, not a promise of minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs  # noqa: E402
from bench.contention import (  # noqa: E402
    ARCHIVE_CACHE,
    LAN_CACHE,
    SCENARIOS,
    UPLINK,
    Contention,
    MirrorModel,
    Pool,
    Scenario,
    SshdModel,
    contention,
    simulate,
)
from bench.plan_graph import Node, Result, analyse, build_graph  # noqa: E402
from bench.step_costs import BASELINE_MBIT, COSTS, DOWNLOADS_MB, Cost, UnknownStep, cost_of  # noqa: E402

# The model lives beside this entry point, one job a module: the cost table (step_costs.py), the
# plan's graph and its longest chains (plan_graph.py), the contention simulation (contention.py).
# Their names are reachable from here as before (tests/bench import them from this module).
__all__ = ["ARCHIVE_CACHE", "COSTS", "LAN_CACHE", "SCENARIOS", "UPLINK", "Contention", "Cost", "MirrorModel", "Node",
           "Pool", "Result", "Scenario", "SshdModel", "UnknownStep", "analyse", "build_graph", "contention",
           "cost_of", "main", "simulate"]

DEFAULT_POINTS = (2, 8, 32, 128)
# --smallest (what CI runs, `make bench-smoke`): the two smallest stacks the layers allow (training
# on 2 nodes needs 2 GPU workers), so the depth-grows-with-N check still compares two sizes.
SMALLEST_POINTS = (2, 3)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds:.0f} s ({seconds / 3600:.1f} h)"
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def print_chain(title: str, chain: list[tuple[Node, float, float, str]]) -> None:
    """One row per resource on the chain (components and providers show with cost 0)."""
    print(title)
    print("| step | cost s | start s | finish s | waits for it because |")
    print("|---|---:|---:|---:|---|")
    for node, start, end, why in chain:
        print(f"| {node.name} | {node.cost:.0f} | {start:.0f} | {end:.0f} | {why} |")
    print()


def _overrides(items: list[str]) -> tuple[Cost, ...]:
    table = {c.key: c for c in COSTS}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in table:
            raise SystemExit(f"critical_path: --cost wants KEY=SECONDS with KEY one of {', '.join(table)}; got {item!r}")
        c = table[key]
        table[key] = Cost(c.key, c.type, c.suffixes, float(value), f"{c.why} [overridden: {value} s]",
                          "--cost on the command line")
    return tuple(table.values())


@dataclass
class Point:
    """What one N gives, in a form the --compare child hands back as JSON."""

    workers: int
    resources: int
    costed: int
    depth: int
    critical: float
    total: float
    cp_sessions: int  # remote commands on the control plane's connection
    token_ages: list[tuple[float, float, float, float]]
    scenarios: dict[str, Contention] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: dict) -> Point:
        scenarios = {k: Contention(**v) for k, v in raw.pop("scenarios").items()}
        return cls(**raw, scenarios=scenarios)


def evaluate(points: list[int], launcher: str, costs: tuple[Cost, ...], sshd: SshdModel, trials: int,
             seed: int) -> tuple[list[Result], list[Point]]:
    from render import program

    results, summaries = [], []
    for n in points:
        plan = program.run("lab", config=_configs.lab_config(n, **_configs.lab_layers(launcher)))
        graph = build_graph(plan, costs)
        result = analyse(n, graph)
        cp_host = next((g.ssh_host for g in graph.values() if g.key == "init"), None)
        point = Point(n, result.resources, result.costed, result.depth, result.critical, result.total,
                      cp_sessions=sum(1 for g in graph.values() if g.ssh_host is not None and g.ssh_host == cp_host),
                      token_ages=result.token_ages)
        for scenario in SCENARIOS:
            point.scenarios[scenario.name] = contention(graph, scenario, sshd, trials, seed)
        # The simulation without contention is the longest-path model, step for step.
        assert abs(point.scenarios["none"].done - result.critical) < 1e-6, (point.scenarios["none"].done, result.critical)
        results.append(result)
        summaries.append(point)
    return results, summaries


def evaluate_at(ref: str, args: argparse.Namespace) -> list[Point]:
    """The same evaluation for the program at git `ref`, in a child process (its modules would
    clash with this tree's in one process)."""
    root = Path(os.path.abspath(__file__)).parent.parent
    with tempfile.TemporaryDirectory(prefix="critical-path-") as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        command = [sys.executable, os.path.abspath(__file__), "--project", tmp, "--json",
                   "--points", ",".join(map(str, args.points)), "--launcher", args.launcher,
                   "--trials", str(args.trials), "--seed", str(args.seed), "--ssh-handshake", str(args.ssh_handshake),
                   *(f"--cost={c}" for c in args.cost)]
        child = subprocess.run(command, capture_output=True, text=True, check=False)
        if child.returncode not in (0, 1):
            raise SystemExit(f"critical_path: evaluating {ref} failed:\n{child.stderr}")
        return [Point.from_json(p) for p in json.loads(child.stdout)]


def _pct(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f}%"


def print_contention(title: str, points: list[Point], trials: int) -> None:
    print(title)
    print("| GPU workers | " + " | ".join(s.title for s in SCENARIOS) + " |")
    print("|---:|" + "---:|" * len(SCENARIOS))
    for p in points:
        cells = []
        for s in SCENARIOS:
            c = p.scenarios[s.name]
            spread = f", slowest {c.ready_max:.0f}" if c.ready_max - c.ready >= 0.5 else ""
            cells.append(f"{c.ready:.0f} s ({c.done:.0f} s{spread})")
        print(f"| {p.workers} | " + " | ".join(cells) + " |")
    first, last = points[0], points[-1]
    if last is not first:
        print(f"| {last.workers} vs {first.workers} | " + " | ".join(
            _pct(last.scenarios[s.name].ready, first.scenarios[s.name].ready) for s in SCENARIOS) + " |")
    print()
    print(f"Control-plane sshd (MaxStartups 10:30:100), {trials} trials per point:")
    print("| GPU workers | SSH sessions on the control plane | most unauthenticated at once | refused dials per `up` "
          "| steps over dialErrorLimit per `up` | trials in which `up` fails | downloads at once |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in points:
        c, u = p.scenarios["sshd"], p.scenarios["uplink"]
        print(f"| {p.workers} | {p.cp_sessions} | {c.peak_unauthenticated} | {c.refused_dials:.1f} "
              f"| {c.failed_steps:.2f} | {c.failing_trials}/{trials} | {u.peak_downloads} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--points", type=_configs.parse_points, default=list(DEFAULT_POINTS),
                        help="comma-separated GPU worker counts (default: %(default)s)")
    parser.add_argument("--cost", action="append", default=[], metavar="KEY=SECONDS",
                        help="override one step's cost (keys: " + ", ".join(c.key for c in COSTS) + ")")
    parser.add_argument("--launcher", choices=("indexed-job", "pytorchjob"), default="indexed-job",
                        help="training.launcher of the evaluated stack (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=20,
                        help="seeded runs per point where sshd's random early drop plays (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first trial (default: %(default)s)")
    parser.add_argument("--ssh-handshake", type=float, default=SshdModel.handshake_s,
                        help="seconds a connection stays unauthenticated (default: %(default)s)")
    parser.add_argument("--compare", metavar="REF", help="also evaluate the program at this git ref (before/after)")
    parser.add_argument("--smallest", action="store_true",
                        help=f"the smallest run (CI's smoke run): --points {','.join(map(str, SMALLEST_POINTS))} --trials 1")
    parser.add_argument("--project", help=argparse.SUPPRESS)  # --compare's child: the program to evaluate
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # --compare's child: JSON out
    args = parser.parse_args(argv)
    if args.smallest:
        args.points, args.trials = list(SMALLEST_POINTS), 1
    if args.project:
        sys.path.insert(0, args.project)
    costs = _overrides(args.cost)
    sshd = SshdModel(handshake_s=args.ssh_handshake)

    started = time.perf_counter()
    try:
        results, points = evaluate(args.points, args.launcher, costs, sshd, args.trials, args.seed)
    except UnknownStep as e:
        print(f"critical_path: {e}; add it to COSTS in bench/step_costs.py", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(p) for p in points]))
        return 0
    before = evaluate_at(args.compare, args) if args.compare else None

    print("Cost table (seconds per step; components and providers 0):")
    print("| key | matches | s | rationale | source |")
    print("|---|---|---:|---|---|")
    for c in costs:
        match = f"{c.type} " + " or ".join(f"*{x}" for x in c.suffixes) if c.suffixes else c.type
        print(f"| {c.key} | `{match}` | {c.seconds:.0f} | {c.why} | {c.source} |")
    print()
    print("Downloads of the apt steps (MB; included in the costs above at "
          f"{BASELINE_MBIT / 1000:.0f} Gbit/s for one host alone):")
    print("| key | MB | basis |")
    print("|---|---:|---|")
    for key, (mb, basis) in DOWNLOADS_MB.items():
        print(f"| {key} | {mb:.0f} | {basis} |")
    print()

    print("Lab stack, 1 control plane + N GPU workers (8 GPUs each) with Pulumi.lab.yaml's layers (monitoring, "
          f"NFS storage, NCCL acceptance, training via {args.launcher}), unbounded engine parallelism:")
    print("| GPU workers | resources | costed steps | depth | critical path | sum of steps | speedup |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.workers} | {r.resources} | {r.costed} | {r.depth} | {_duration(r.critical)} "
              f"| {_duration(r.total)} | {r.total / r.critical:.1f}x |")
    print()
    first, last = results[0], results[-1]
    print_chain(f"Critical path at N={first.workers}:", first.critical_chain)
    if last is not first:
        print_chain(f"Critical path at N={last.workers}:", last.critical_chain)
    print_chain(f"Deepest chain (the depth) at N={last.workers}:", last.depth_chain)

    heading = ("Time until every worker is Ready, median of the trials (in brackets: until `up` is done, and the "
               "slowest trial where sshd's random drops make them differ); SSH handshake "
               f"{sshd.handshake_s:g} s; mirrors: {UPLINK.what}; {ARCHIVE_CACHE.what}; {LAN_CACHE.what}")
    if before is not None:
        print_contention(f"Before ({args.compare}): {heading}:", before, args.trials)
        print_contention(f"After (this tree): {heading}:", points, args.trials)
    else:
        print_contention(f"{heading}:", points, args.trials)

    ages = [a for r in results for a in r.token_ages]
    if ages:
        oldest, minted, used, ttl = max(ages)
        worst_slack = min(p.scenarios["uplink"].token_slack for p in points)
        print(f"Join token: the oldest one a join uses was issued at {minted:.0f} s and is used at {used:.0f} s: "
              f"{oldest:.0f} s of its {ttl:.0f} s lifetime (slack {ttl - oldest:.0f} s without contention, "
              f"{worst_slack:.0f} s at the slowest point through the 1 Gbit/s uplink)"
              + (" -- WARNING: that join would fail with an expired token." if min(ttl - oldest, worst_slack) < 0 else "."))
    if len(points) > 1:
        p0, pn = points[0], points[-1]
        for name in ("sshd", "uplink", "archive-cache", "lan-cache"):
            a, b = p0.scenarios[name].ready, pn.scenarios[name].ready
            title = next(s.title for s in SCENARIOS if s.name == name)
            verdict = "within 5%" if b <= a * 1.05 else "NOT within 5%"
            print(f"{pn.workers} workers all Ready at {b:.0f} s against {a:.0f} s for {p0.workers} "
                  f"({_pct(b, a)}), {title}: {verdict}.")
    bad = [r for r in results if r.depth > first.depth or r.critical > first.critical + 1e-6]
    print(f"Evaluated {len(results)} plans in {time.perf_counter() - started:.0f} s.")
    if bad:
        worst = bad[-1]
        print(f"FAIL: depth or critical path grows with N (N={first.workers}: depth {first.depth}, "
              f"{_duration(first.critical)}; N={worst.workers}: depth {worst.depth}, {_duration(worst.critical)}). "
              "The program serializes steps that could run in parallel; the chain responsible:")
        print_chain(f"Deepest chain at N={worst.workers}:", worst.depth_chain)
        return 1
    print(f"OK: depth {first.depth} and critical path {_duration(first.critical)} are the same for every N "
          f"({', '.join(str(r.workers) for r in results)} GPU workers): hosts are set up in parallel.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
