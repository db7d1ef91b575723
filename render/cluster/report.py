"""The whole-cluster check's verdict (render/cluster/__init__.py check): what it found, as lines for
summary.md and as data for the picture (render/cluster_picture.py). Its own module so that the
check's parts (kueue_check.py) add to it without importing the package that runs them."""

from __future__ import annotations

from dataclasses import dataclass, field

from render.cluster.nodes import Node
from render.cluster.objects import Obj
from render.cluster.scheduling import Placement


@dataclass
class Report:
    stack: str
    problems: list[str] = field(default_factory=list)  # each: "<subject>: <reason>"
    lines: list[str] = field(default_factory=list)  # one per workload
    notes: list[str] = field(default_factory=list)  # what the model assumes
    nodes: list[str] = field(default_factory=list)
    objects: int = 0
    # What the lines say, as data: the modelled nodes (a gke pool is one shape) and one placement
    # per line, in the lines' order (render/summary.py and render/cluster_picture.py read them).
    modelled: list[Node] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    # The nodes the placements are on: a gke pool as its nodes up to its maximum (scheduling.expand),
    # with the labels and extended resources the DaemonSets bring (tests/e2e hold kube-scheduler to them).
    scheduled: list[Node] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)  # one per job queued in Kueue: would it be admitted
    checked: list[Obj] = field(default_factory=list)  # every object checked (render/job_question.py reads them)
    minor: str = ""  # the Kubernetes minor the objects were checked against

    @property
    def ok(self) -> bool:
        return not self.problems
