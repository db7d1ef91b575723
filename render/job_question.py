"""`python -m render <stack> --job FILE...`: would the jobs a team submits be admitted?

Each Job (batch/v1) or PyTorchJob (kubeflow.org/v1) of the files is answered offline with the models the
whole-cluster check runs (render/cluster/), on the objects and nodes it checked:

- refused: the API server would refuse to create it: its namespace is not in the plan, its schema
  (Kubernetes' strict one for a Job, the plan's CRD for a PyTorchJob: none, an unknown kind), or a
  ValidatingAdmissionPolicy of the plan bound to its namespace (the team policy,
  components/queues/team_admission.py: its queue, its priority class) denies it, as the API server
  decides it (render/cluster/admission_policy.py: cel-python, the first denying validation's message);
- never: Kueue never admits it (kueue_preemption.Rules.missing_class: a priority class the plan
  lacks; kueue_admission.evaluate alone on the idle cluster: no queue, a resource no queue covers,
  more than the cohort holds, pods its flavor's nodes can never hold), with the shortfall;
- admitted: admitted now, once `pulumi up` has finished: after the program's own queued jobs still
  running then (a Job with pulumi.com/skipAwait, such as the training run; the acceptance Job Pulumi
  awaits has completed), in the order kueue_preemption.admit_in_order takes them, preemption included: the flavor, whether it borrows,
  the nodes its pods land on (scheduling.place, with the flavor's node labels and tolerations as
  Kueue injects them: kueue_objects.admitted_pod_spec) and whom it preempts;
- waits: it fits the cluster but not now: behind the quota the program's jobs use, or nodes they take.

A file that cannot be read, a document that is no Job or PyTorchJob, or a job neither queued (no
kueue.x-k8s.io/queue-name) nor refused is a bad --job (JobFileError: exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

import render.cluster.kueue_admission as ka
import render.cluster.kueue_objects as kueue_objects
import render.cluster.kueue_preemption as kueue_preemption
from render.cluster import admission_policy
from render.cluster.admission import builtin_validator, strict_schema
from render.cluster.objects import Obj
from render.cluster.report import Report
from render.cluster.scheduling import Capacity, expand, place
from render.cluster.workloads import Workload

REFUSED, ADMITTED, WAITS, NEVER = "refused", "admitted", "waits", "never"
# The namespaces every cluster has without the plan creating them.
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SKIP_AWAIT = "pulumi.com/skipAwait"  # a Job Pulumi does not wait for: still running when `up` ends


class JobFileError(Exception):
    """A --job file that cannot be answered (exit 2): the message names the file and document."""


@dataclass
class Answer:
    source: str  # "job.yaml#1"
    ref: str  # "Job team-vision/resnet-sweep"
    state: str  # REFUSED, ADMITTED, WAITS or NEVER
    reasons: list[str] = field(default_factory=list)

    @property
    def blocks(self) -> bool:
        """Exit 3, as the check's: this job never runs as written."""
        return self.state in (REFUSED, NEVER)

    def line(self) -> str:
        return f"{self.ref} ({self.source}): {self.state}" + (f": {'; '.join(self.reasons)}" if self.reasons else "")


def read(paths: list[Path]) -> list[tuple[str, Obj]]:
    """Every job of the files, as (file#document, object); JobFileError for anything else."""
    jobs = []
    for path in paths:
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except OSError as err:
            raise JobFileError(f"--job {path}: cannot read it: {err.strerror or err}") from err
        except yaml.YAMLError as err:
            raise JobFileError(f"--job {path}: not YAML: {err}") from err
        numbered = [(i, d) for i, d in enumerate(docs, 1) if d is not None]
        if not numbered:
            raise JobFileError(f"--job {path}: holds no document")
        for i, doc in numbered:
            where = f"{path}#{i}"
            if not isinstance(doc, dict) or not _answerable(doc):
                got = f"{doc.get('apiVersion')} {doc.get('kind')}" if isinstance(doc, dict) else type(doc).__name__
                raise JobFileError(f"--job {where}: is {got}; only a batch/v1 Job or a kubeflow.org/v1 "
                                   "PyTorchJob can be answered")
            if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
                raise JobFileError(f"--job {where}: has no metadata.name")
            jobs.append((where, Obj(doc, source="", origin=f"--job {where}")))
    return jobs


def _answerable(doc: dict[str, Any]) -> bool:
    return ((doc.get("kind") == "Job" and doc.get("apiVersion") == "batch/v1")
            or (doc.get("kind") == "PyTorchJob" and str(doc.get("apiVersion", "")).startswith("kubeflow.org/")))


def _served_version(objects: list[Obj], job: Obj) -> dict[str, Any] | None:
    """The plan's CRD version serving a PyTorchJob's apiVersion (the training operator's), if any."""
    group, version = job.api_version.split("/", 1)
    for o in objects:
        spec = o.body.get("spec") or {}
        if o.kind == "CustomResourceDefinition" and spec.get("group") == group and (spec.get("names") or {}).get("kind") == job.kind:
            for v in spec.get("versions") or []:
                if v.get("name") == version and v.get("served"):
                    return dict(v)
    return None


def schema_refusals(objects: list[Obj], job: Obj, minor: str) -> list[str]:
    """What the API server's schema validation refuses: a Job against Kubernetes' strict schema of
    the stack's minor, a PyTorchJob against the plan's CRD (none serving it: the kind is unknown)."""
    if job.kind == "Job":
        validator = builtin_validator(job.api_version, job.kind, minor)
    else:
        served = _served_version(objects, job)
        if served is None:
            return [f"the plan installs no CRD serving {job.kind} {job.api_version} (training.launcher: pytorchjob "
                    f"installs the training operator's): the API server answers 'no matches for kind "
                    f"\"{job.kind}\" in version \"{job.api_version}\"'"]
        schema = (served.get("schema") or {}).get("openAPIV3Schema") or {}
        validator = jsonschema.Draft7Validator(strict_schema(schema))
    if validator is None:
        return [f"Kubernetes {minor} serves no {job.kind} {job.api_version}"]
    errors = sorted(validator.iter_errors(job.body), key=lambda e: [str(p) for p in e.path])[:3]
    return [f"schema: {'.'.join(str(p) for p in e.path) or '(root)'}: {str(e.message)[:200]}" for e in errors]


def policy_refusals(objects: list[Obj], world: kueue_objects.KueueWorld, job: Obj) -> list[str]:
    """Why the plan's ValidatingAdmissionPolicies bound to the job's namespace deny creating it."""
    return admission_policy.refusals(objects, world.labels_of(job.namespace or "default"), job)


def still_running(wl: kueue_objects.QueuedWorkload) -> bool:
    """Whether the program's queued job still holds its quota once `pulumi up` has finished: a Job
    Pulumi awaits (the acceptance Job) has completed by then, one with pulumi.com/skipAwait (a long
    training run) has not; a CronJob's Jobs run on its schedule, not counted."""
    annotations = (wl.obj.body.get("metadata") or {}).get("annotations") or {}
    return wl.obj.kind != "CronJob" and str(annotations.get(SKIP_AWAIT)) == "true"


def _fmt(resource: str, v: float) -> str:
    return f"{v / 1024**3:g}Gi" if resource == "memory" else f"{v:g}"


def _admitted_workloads(verdict: ka.Verdict, world: kueue_objects.KueueWorld) -> list[Workload]:
    """The verdict's pod sets as their pods run: the flavors' node labels and tolerations added."""
    wl = verdict.workload
    out = []
    for ps in wl.pod_sets:
        flavors = [world.flavors[f] for f in verdict.flavors.get(ps.name, "").split(", ") if f in world.flavors]
        out.append(Workload(wl.obj.kind, wl.namespace, f"{wl.obj.name}/{ps.name}", wl.obj,
                            kueue_objects.admitted_pod_spec(ps.spec, flavors), ps.metadata, ps.count, job=True))
    return out


def _quota_holders(verdicts: list[ka.Verdict], ours: ka.Verdict, world: kueue_objects.KueueWorld) -> list[str]:
    """The admitted jobs holding quota of the flavors and resources `ours` needs, in its ClusterQueue or cohort."""
    cq = world.cluster_queues.get(ours.cluster_queue)
    out = []
    for v in verdicts:
        other = world.cluster_queues.get(v.cluster_queue)
        if v.state != ka.ADMITTED or other is None or cq is None:
            continue
        if other.name != cq.name and (not cq.cohort or other.cohort != cq.cohort):
            continue
        shared = sorted(fr for fr in v.usage if fr in ours.usage)
        if shared:
            held = ", ".join(f"{_fmt(r, v.usage[(f, r)])} {r} of {f}" for f, r in shared)
            out.append(f"{v.workload.ref} (ClusterQueue {other.name}) holds {held}")
    return out


def _place_now(mine: ka.Verdict, before: list[ka.Verdict], world: kueue_objects.KueueWorld,
               capacity: list[Capacity]) -> tuple[dict[str, list[str]], list[str]]:
    """Where the admitted job's pods land once the jobs admitted before it hold their nodes:
    (pod set -> nodes, why not where they do not fit)."""
    free = ka._scratch(capacity)
    for v in before:
        if v.state == ka.ADMITTED:
            for w in _admitted_workloads(v, world):
                place(w, free, keep=True)
    nodes: dict[str, list[str]] = {}
    short = []
    for w in _admitted_workloads(mine, world):
        pod_set = w.name.rsplit("/", 1)[1]
        if any(world.flavors[f].topology for f in mine.flavors.get(pod_set, "").split(", ") if f in world.flavors):
            nodes[pod_set] = sorted(set(mine.nodes.get(pod_set, [])))  # where TAS put it (kueue_admission)
            continue
        p = place(w, free, keep=True)
        nodes[pod_set] = sorted(set(p.nodes))
        if not p.ok:
            why = " | ".join(f"{n}: {'; '.join(r)}" for n, r in sorted(p.reasons.items()))
            short.append(f"pod set {w.name.rsplit('/', 1)[1]}: {p.placed} of {w.pods} pods fit now ({why})")
    return nodes, short


def answer(report: Report, source: str, job: Obj) -> Answer:
    """One job against the check's report (its checked objects, nodes, placements and Kubernetes minor)."""
    objects = report.checked
    ref = f"{job.kind} {job.namespace or 'default'}/{job.name}"
    world = kueue_objects.read(objects)  # the job is read once the API server would take it
    namespace = job.namespace or "default"
    if namespace not in world.namespace_labels and namespace not in BUILTIN_NAMESPACES:
        return Answer(source, ref, REFUSED, [f"namespace {namespace} is not in the plan: the API server answers "
                                             f"'namespaces \"{namespace}\" not found'"])
    refusals = schema_refusals(objects, job, report.minor) + policy_refusals(objects, world, job)
    if refusals:
        return Answer(source, ref, REFUSED, refusals)
    mine = next(iter(kueue_objects.read([job]).workloads), None)
    if mine is None:
        raise JobFileError(f"--job {source}: {ref} has no label {kueue_objects.QUEUE_LABEL}: Kueue would not queue "
                           "it (it would start at once, outside every quota), so there is no admission to answer")
    rules = kueue_preemption.read(objects)
    missing = rules.missing_class(mine)
    if missing is not None:
        return Answer(source, ref, NEVER, [missing])
    capacity = ka.capacity_after(expand(report.modelled), report.placements)
    alone = ka.evaluate(world, ka.QuotaBook(world), mine, ka._scratch(capacity))
    if alone.state == ka.NEVER:
        return Answer(source, ref, NEVER, alone.reasons)
    others = [wl for wl in world.workloads if still_running(wl)]
    verdicts = kueue_preemption.admit_in_order(world, rules, [*others, mine], capacity)
    *before, now = verdicts
    if now.state != ka.ADMITTED:
        holders = _quota_holders(before, alone, world)
        return Answer(source, ref, WAITS, now.reasons + ([f"behind: {'; '.join(holders)}"] if holders else []))
    nodes, short = _place_now(now, before, world, capacity)
    if short:
        return Answer(source, ref, WAITS, [f"admitted by quota, but its pods wait for nodes the jobs before it "
                                           f"take: {'; '.join(short)}"])
    flavors = ", ".join(f"pod set {ps} on flavor {f}" for ps, f in now.flavors.items())
    where = "; ".join(f"{ps} → {', '.join(n) or 'no node'}" for ps, n in nodes.items())
    borrowed = ", ".join(f"{_fmt(r, v)} {r} of {f}" for (f, r), v in sorted(now.borrowed.items()))
    reasons = [f"ClusterQueue {now.cluster_queue}, {flavors}", f"nodes: {where}",
               f"borrows {borrowed} from cohort" if borrowed else "within its nominal quota (borrows nothing)"]
    preempted = [v.workload.ref for v in before if v.state == kueue_preemption.PREEMPTED]
    if preempted:
        reasons.append(f"preempts {', '.join(preempted)}")
    return Answer(source, ref, ADMITTED, reasons)


def section(answers: list[Answer]) -> str:
    """summary.md's section."""
    lines = ["", "## Would these jobs be admitted (--job)", "",
             "Each job answered offline by the whole-cluster check's models (render/job_question.py): "
             "the plan's admission policies, Kueue's admission once `pulumi up` has finished (after the program's "
             "queued jobs still running then: those with pulumi.com/skipAwait), "
             "the scheduler with the flavor's node labels and tolerations.", ""]
    lines += [f"- {'✗ ' if a.blocks else ''}{a.line()}" for a in answers]
    return "\n".join(lines) + "\n"
