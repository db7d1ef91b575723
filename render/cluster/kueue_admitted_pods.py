"""Where a queued job's pods run: as Kueue starts them, not as they are written.

A Job or PyTorchJob with the label kueue.x-k8s.io/queue-name is created suspended; its pods exist
only once Kueue admits it, and then carry what the admitting ResourceFlavors add (the modelled
Kueue, kueue_objects.MODELLED_VERSION, pkg/podset/podset.go: FromAssignment takes each assigned flavor's spec.nodeLabels and
spec.tolerations, Merge writes them into the pod template before unsuspending). docs/queues.md's
team job tolerates no GPU taint and selects no GPU node, and is right not to: the flavor does both.
So the scheduler model (scheduling.schedule) places a queued job Kueue's model admits
(kueue_admission.each_alone, on the same idle cluster) again with its flavors' node selector and
tolerations; a job Kueue would not admit keeps the placement of its pods as written (Kueue's own
verdict on it is kueue_check.py's).
"""

from __future__ import annotations

import dataclasses

import render.cluster.kueue_admission as kueue_admission
import render.cluster.kueue_objects as kueue_objects
from render.cluster.nodes import Node
from render.cluster.objects import Obj
from render.cluster.scheduling import Placement, place
from render.cluster.workloads import Workload


def _pod_set_name(w: Workload) -> str:
    """The Kueue pod set a scheduler-model workload is (kueue_objects._queued names them): a
    PyTorchJob's replica type (workloads.py names it <job>-<master|worker>), else `main`."""
    return w.name[len(w.obj.name) + 1:] if w.kind == "PyTorchJob" else "main"


def as_admitted(objects: list[Obj], nodes: list[Node], placements: list[Placement]) -> list[Placement]:
    """`placements` with each admitted queued job's pods placed as Kueue starts them."""
    world = kueue_objects.read(objects)
    if not world.workloads:
        return placements
    capacity = kueue_admission.capacity_after(nodes, placements)  # what schedule() gave the jobs
    specs: dict[tuple[int, str], dict] = {}  # (id of the job object, pod set) -> pod spec once admitted
    for v in kueue_admission.each_alone(world, capacity):
        if v.state != kueue_admission.ADMITTED:
            continue
        for ps in v.workload.pod_sets:
            flavors = [world.flavors[name] for name in v.flavors.get(ps.name, "").split(", ") if name in world.flavors]
            specs[(id(v.workload.obj), ps.name)] = kueue_objects.admitted_pod_spec(ps.spec, flavors)
    out = list(placements)
    scratch_of: dict[int, list] = {}  # one scratch per job: its pods run together, jobs one after another
    for i, p in enumerate(placements):
        w = p.workload
        spec = specs.get((id(w.obj), _pod_set_name(w))) if w.job else None
        if spec is None:
            continue
        scratch = scratch_of.setdefault(id(w.obj), kueue_admission.capacity_after(nodes, placements))
        out[i] = place(dataclasses.replace(w, spec=spec), scratch, keep=True)
    return out
