"""`python -m render <stack> [--out DIR] [--against OLD]`: the offline plan of a stack, with no
Pulumi CLI, no cloud and no cluster.

Writes:
  DIR/plan.json               one entry per resource: type, name, urn, parent, dependencies, inputs
                              (every secret replaced by "[secret]"), custom, provider,
                              propertyDependencies (input -> the resources its value came from) and
                              options (protect, deleteBeforeReplace, ignoreChanges, replaceOnChanges,
                              retainOnDelete, ...; updateCommand for commands)
  DIR/kubernetes/*.yaml       every Kubernetes object as it would be applied
  DIR/helm/<release>.yaml     every Helm release: chart, version, repository, values
  DIR/prometheus/rules.yaml   the alert rules of every PrometheusRule, as a plain rule file
  DIR/wandb/queue-config.yaml with wandb.enabled: the W&B queue's config (the stack output
                              wandbQueueConfig), to paste into the queue; .json alike
  DIR/hosts/<host>/<step>.sh  the exact command each host receives (and <step>.delete.sh,
                              <step>.stdin when stdin is not secret); on each control plane with
                              etcdBackup also etcd-restore.sh (docs/operations/etcd-backup.md)
  DIR/graph.dot               parent (dashed) and dependency (solid) edges
  DIR/summary.md              the answer first: "Would it come up", the whole-cluster check
                              (render/cluster/) of every object the cluster would receive, Helm
                              charts rendered, against Kubernetes' schemas, CRDs, Pod Security and
                              the scheduler, on the nodes the stack will have, with every problem;
                              then what was planned; the counts by type last (render/summary.py)
  DIR/cluster.dot, .svg       with the check: the picture of the planned cluster, each node and
                              what the check placed on it (render/cluster_picture.py; the .svg
                              needs graphviz's `dot`, summary.md says so when it is missing)
  DIR/.gpu-cluster-render     the marker: the files this render wrote. DIR (default out/<stack>)
                              must be missing, empty or an earlier render's: the next render
                              deletes only the files its marker lists; a directory holding
                              anything else, or a file, is refused (render/out_dir.py)
--against OLD (an older Pulumi.<stack>.yaml, rendered with today's program, or an older
plan.json) prints what `pulumi up` from OLD would create, update, replace and delete
(render/update.py), with a line starting `!!` for every step whose delete drains, resets or
deletes a node, every update whose script drains a node (an upgrade script only when the config
changes a version it compares the host with, the membership drain only for hosts that leave:
otherwise "drains if ...", render/drain_guards.py), every protected resource it would replace or
delete, and a change of CNI, GPU stack or shared storage backend (render/update_risks.py); a
`REFUSED` line names each key `pulumi up` would refuse (a downgrade, a skipped minor, a CIDR,
endpoint or first control plane change without allowRebuild: LabStack.change_problems, the rule
`up` runs). summary.md gets it under "Update from".
--job FILE... (Job or PyTorchJob manifests a team would submit) answers for each, with the check's
models, whether it would be refused, admitted now, wait or never be admitted (render/job_question.py):
a `job ...` line each, a section in summary.md; exit 3 when one is refused or never admitted, 2 for a
file that is not one (read before anything is planned).
Warnings (`warning:` on stderr, "Warnings" in summary.md) change no exit status: a stack whose pod
network does not enforce the NetworkPolicies the program writes (config/network_policy_enforcement.py);
a gke pool consuming a reservation whose size no offline check can know (config/gke_provisioning.py);
gke jobs that require one topology domain on Google's labels, whose values no offline check knows
(config/queue_flavors.py); a network.roce.interface that may be a node's own network interface, where
the config does not say which that is (config/roce_interface.py).
Every run first deletes the previous render's summary.md (render/out_dir.py): an interrupted or
failed run never leaves the last run's verdict to be read as its own. A run that plans nothing
(exit 2 for a config, exit 1) prints the error; in a DIR an earlier render wrote it also removes that
render's files and leaves summary.md saying "No: bad config" (or why else) with the message; a
missing or empty DIR stays as it is.
Exit status: 0 the plan would come up; 2 a bad stack config (the config error, of either side;
nothing is planned), an `--out` render may not clear (nothing is changed), or with --against an
update `pulumi up` would refuse (REFUSED lines; the files are written); 3 something would not come
up (each workload, node and reason on stderr and in summary.md); 1 the check could not run
(upstream charts missing: --no-check skips it); 4 with --against, the plan comes up but the update
has `!!` lines (a node drained, reset or deleted, a protected resource replaced or deleted, the
pod network, GPU stack or shared storage swapped, a Secrets encryption key or a team's namespace
lost: render/update_encryption.py, render/update_teams.py), so a CI job can refuse it. 2, 1 and 3 come
before 4.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import render.job_question as job_question
from components.lab import etcd_backup
from config import ConfigError, LabStack
from config.etcd_backup_s3 import single_copy_warning
from config.queue_flavors import topology_warnings
from render import cluster, out_dir, program, summary, update, update_encryption, update_risks, update_teams, yaml_text

if TYPE_CHECKING:
    from render.cluster import Report

# Releases, charts, kustomize directories and manifest files are bundles the provider expands,
# not objects themselves.
NOT_OBJECTS = ("kubernetes:helm.sh/", "pulumi:providers:", "kubernetes:kustomize/", "kubernetes:yaml/")


def _etcd_copy_warning(cfg: object) -> str | None:
    """A lab with one control plane and no etcdBackup.s3 (config/etcd_backup_s3.py)."""
    if not isinstance(cfg, LabStack):
        return None
    backup = cfg.etcd_backup
    return single_copy_warning(backup.enabled, backup.s3, [h.name for h in cfg.control_planes],
                               shared_copy=backup.copy_to_shared and cfg.storage.provision)


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else ""


def kubernetes_objects(plan: program.Plan) -> list[dict[str, Any]]:
    objects = []
    for r in plan.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith(NOT_OBJECTS):
            continue
        obj = {k: v for k, v in r.inputs.items() if k not in ("name",)}
        obj.setdefault("metadata", {}).setdefault("name", r.name)
        objects.append(obj)
    return objects


def host_steps(plan: program.Plan) -> dict[str, dict[str, dict[str, Any]]]:
    """host name -> step name -> command inputs, for every remote command."""
    by_address: dict[str, str] = {}
    hosts_cfg = json.loads(program.stack_config(plan.stack)[0].get("gpu-cluster:hosts", "[]")) if plan.stack else []
    for h in hosts_cfg:
        by_address[str(h.get("address"))] = h.get("name")
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in plan.of_type("command:remote:Command"):
        address = (r.inputs.get("connection") or {}).get("host", "unknown")
        host = by_address.get(address, address)
        step = r.name[len(host) + 1:] if r.name.startswith(f"{host}-") else r.name
        out[host][step] = r.inputs
    return out


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def _safe(part: str) -> str:
    """One path component from a name that came from config or the plan: never '..' or a '/'."""
    cleaned = _SAFE_NAME.sub("_", part).lstrip(".") or "_"
    return cleaned


class _Writer:
    """Writes files under one root and refuses any path that resolves outside it."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self.written: list[Path] = []  # what the marker lists (render/out_dir.py)
        self._folders: dict[Path, Path] = {}  # a folder as given -> resolved (thousands of files share a few)

    def __call__(self, path: Path, text: str, mode: int = 0o644) -> None:
        if path.is_symlink():
            target = path.resolve()
        else:
            folder = self._folders.get(path.parent)
            if folder is None:
                folder = self._folders[path.parent] = path.parent.resolve()
            target = folder / path.name
        if target != self.root and self.root not in target.parents:
            raise out_dir.OutDirError(f"refusing to write {path}: it resolves outside {self.root} (a symlink?)")
        _write(target, text, mode)
        self.written.append(target)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _dot(plan: program.Plan) -> str:
    lines = ["digraph plan {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for r in plan.resources:
        lines.append(f'  "{r.urn}" [label="{r.name}\\n{r.type}"];')
        if r.parent and not r.parent.endswith("pulumi:pulumi:Stack::" + _urn_name(r.parent)):
            lines.append(f'  "{r.parent}" -> "{r.urn}" [style=dashed, arrowhead=none];')
        for dep in r.dependencies:
            lines.append(f'  "{dep}" -> "{r.urn}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(plan: program.Plan, out: Path, report: Report | None = None, update_section: str = "",
          warnings: list[str] | None = None, update_refused: bool = False) -> None:
    """Write the plan's files under `out`. Only render's own earlier output there is deleted
    (render/out_dir.py); raises out_dir.OutDirError for a directory that holds anything else."""
    out_dir.clear(out)
    out_dir.mark(out, [])  # render's from now on, even if this run stops half-way
    put = _Writer(out)  # every file below is checked to land inside `out`
    entries = [r.entry() for r in plan.resources]
    put(out / "plan.json", json.dumps({"stack": plan.stack, "resources": entries,
                                         "outputs": plan.outputs}, indent=2, sort_keys=True))
    objects = kubernetes_objects(plan)
    for obj in objects:
        md = obj["metadata"]
        fname = _safe(f"{obj.get('kind', 'Object').lower()}-{md.get('namespace', 'cluster')}-{md['name']}.yaml")
        put(out / "kubernetes" / fname, yaml_text.dump(obj))
    releases = plan.of_type("kubernetes:helm.sh/v3:Release") + plan.of_type("kubernetes:helm.sh/v4:Chart")
    for r in releases:
        put(out / "helm" / _safe(f"{r.inputs.get('name', r.name)}.yaml"), yaml_text.dump(r.inputs))
    # Every PrometheusRule's groups as one plain Prometheus rule file (for `promtool check/test rules`).
    rule_groups = [g for o in objects if o.get("kind") == "PrometheusRule" for g in o.get("spec", {}).get("groups", [])]
    if rule_groups:
        put(out / "prometheus" / "rules.yaml", yaml_text.dump({"groups": rule_groups}))
    queue_config = plan.outputs.get("wandbQueueConfig")
    if isinstance(queue_config, dict):  # never a secret: the program builds it from plain config
        put(out / "wandb" / "queue-config.yaml", yaml_text.dump(queue_config))
        put(out / "wandb" / "queue-config.json", json.dumps(queue_config, indent=2) + "\n")
    steps = host_steps(plan)
    for host, host_steps_ in steps.items():
        for step, inputs in host_steps_.items():
            base = out / "hosts" / _safe(host)
            put(base / f"{_safe(step)}.sh", inputs.get("create", ""), 0o755)
            if inputs.get("delete"):
                put(base / f"{_safe(step)}.delete.sh", inputs["delete"], 0o755)
            if inputs.get("stdin") and inputs["stdin"] != program.SECRET_MARKER:
                put(base / f"{_safe(step)}.stdin", inputs["stdin"])
                if step == etcd_backup.INSTALL_STEP:  # its stdin is the control plane's restore script
                    put(base / "etcd-restore.sh", inputs["stdin"], 0o755)
    put(out / "graph.dot", _dot(plan))
    summary.write(plan, out, put, report, update_section, steps, objects, releases, warnings or [], update_refused)
    out_dir.mark(out, put.written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m render", description=__doc__.split("\n")[0])
    parser.add_argument("stack", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path,
                        help="output directory (default: out/<stack>): missing, empty or an earlier render's")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the whole-cluster check (it needs the upstream charts and requirements-plan.txt)")
    parser.add_argument("--against", type=Path, metavar="OLD",
                        help="an older Pulumi.<stack>.yaml or plan.json: print what an update from it would do")
    parser.add_argument("--job", type=Path, nargs="+", metavar="FILE",
                        help="Job or PyTorchJob manifests a team would submit: would each be admitted "
                             "(render/job_question.py)")
    args = parser.parse_args(argv)
    out = args.out or Path("out") / args.stack
    try:
        out_dir.check(out)  # before the work: a directory render may not clear is refused at once
    except out_dir.OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out_dir.drop_verdict(out)  # the last run's answer is never read as this one's
    try:
        jobs = job_question.read(args.job or [])  # a bad --job is refused before the work
    except job_question.JobFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if jobs and args.no_check:
        print("error: --job needs the whole-cluster check: drop --no-check", file=sys.stderr)
        return 2

    def failed(status: int, verdict_line: str, message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        out_dir.leave_failure(out, summary.failure(args.stack, f"{verdict_line} (exit {status})", message))
        return status

    try:
        plan = program.run(args.stack)
    except (ConfigError, FileNotFoundError) as err:
        return failed(2, "**No: bad config**: nothing was planned", str(err))
    changes = None
    if args.against is not None:
        try:
            # After the new plan: rendering the older config replaces the program's root stack.
            older = update_risks.older_side(args.against, args.stack)
        except ConfigError as err:
            return failed(2, "**No: bad older config**: nothing was planned", f"the older config {args.against}: {err}")
        except (OSError, ValueError) as err:
            return failed(2, "**No: bad --against**: nothing was planned", f"--against {args.against}: {err}")
        if isinstance(older.outputs.get("deployed"), dict):
            # As `pulumi up` runs it: reading the older side's outputs (stacks/lab.py deployed_before),
            # which carry the cluster's identity forward (the host kubeadm init ran on). An update
            # `up` would refuse keeps the plan above; its REFUSED lines say why (exit 2).
            try:
                plan = program.run(args.stack, previous_outputs={"deployed": older.outputs["deployed"]})
            except ConfigError:
                pass
        newer = update_risks.plan_side(plan)
        changes = update.compare(older.resources, newer.resources, args.stack, str(args.against))
        changes.refused = update_risks.refusals(older, plan.config)
        changes.risks = update_risks.whole_cluster_changes(older, newer)
        changes.risks += update_teams.losses(changes.steps, plan.config)
        loud, notes = update_encryption.changes(older, newer, changes.steps, len(update_risks.control_planes(newer)))
        changes.risks += loud
        changes.notes = notes + changes.notes
    report = None
    if not args.no_check:
        try:
            report = cluster.check(plan, plan.config, cluster.upstream_dir())
        except cluster.CheckSetupError as err:
            return failed(1, "**Not known: the whole-cluster check could not run** (--no-check plans without it)",
                          f"the whole-cluster check cannot run: {err}")
    try:
        answers = [job_question.answer(report, source, job) for source, job in jobs] if report else []
    except job_question.JobFileError as err:
        return failed(2, "**No: bad --job**", str(err))
    # Warnings do not change the exit status: the stack comes up, only not as the program means it.
    warnings = [w for w in [plan.config.unenforced_warning(), *plan.config.reservation_warnings(),
                            *topology_warnings(plan.config), plan.config.roce_interface_warning(),
                            _etcd_copy_warning(plan.config), *plan.config.egress_warnings()] if w]
    try:
        write(plan, out, report, changes.markdown() if changes else "", warnings,
              update_refused=bool(changes is not None and changes.refused))
    except out_dir.OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if answers:
        with (out / "summary.md").open("a") as summary_md:
            summary_md.write(job_question.section(answers))
    print(f"{len(plan.resources)} resources -> {out}/ (summary.md, plan.json, graph.dot)")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for a in answers:
        print(f"job {a.line()}")
    if changes is not None:
        print(changes.text(), end="")
    if changes is not None and changes.refused:
        # pulumi up stops before registering anything (stacks/lab.py): the check's verdict is moot.
        print("error: pulumi up would refuse this update:\n  " + "\n  ".join(changes.refused), file=sys.stderr)
        return 2
    if report is not None and not report.ok:
        print(f"would not come up ({len(report.problems)} problems; summary.md, 'Would it come up'):", file=sys.stderr)
        for problem in report.problems:
            print(f"  {problem}", file=sys.stderr)
        return 3
    if report is not None:
        print(f"would come up: {report.objects} objects, {len(report.lines)} workloads placed")
    if any(a.blocks for a in answers):
        print("a --job would never be admitted as written (refused or never): exit 3", file=sys.stderr)
        return 3
    if changes is not None and changes.destructive:
        print(f"the update has {len(changes.loud)} '!!' lines (nodes drained, reset or deleted; protected "
              "resources; the pod network, GPU stack or shared storage swapped; Secrets' keys or team namespaces "
              "lost): exit 4", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
