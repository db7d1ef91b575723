"""hosts[].gone on the HA example (Pulumi.lab-ha.yaml), as `--against` previews it: a dead control
plane (cp-3) is forgotten in two `pulumi up`s and no step ever connects to it
(components/lab/gone_hosts.py):

1. cp-3 marked gone: the removal step is created on the first control plane; every step of cp-3
   stays as it is (no script runs there) and is recorded with retainOnDelete;
2. cp-3's entry replaced by a new control plane, cp-4: cp-3's steps are deleted without their
   delete (retainOnDelete), cp-4 joins, and nothing is refused.
"""

from __future__ import annotations

import json
from typing import Any

from render import program, update
from render.update import Action, Resource
from render.update_risks import plan_side, refusals

COMMAND = "command:remote:Command"
CP3 = "192.0.2.30"


def _plan(edit: Any) -> program.Plan:
    values, secret_keys = program.stack_config("lab-ha")
    values = {**values, "gpu-cluster:hosts": json.dumps(edit(json.loads(values["gpu-cluster:hosts"])))}
    return program.run("lab-ha", config=(values, secret_keys))



def _cp3_gone(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**h, "gone": True} if h["name"] == "cp-3" else h for h in hosts]


def _cp3_replaced(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**h, "name": "cp-4", "address": "192.0.2.40"} if h["name"] == "cp-3" else h for h in hosts]


def _on_cp3(step: update.Step) -> bool:
    return step.resource.type == COMMAND and (step.resource.inputs.get("connection") or {}).get("host") == CP3


# A gone host gets no kubelet-config step (components/lab/kubelet_config.py): the one it had leaves at
# once, and it has no delete command, so nothing connects to the host (pulumi-command's Delete runs
# nothing without one).
KUBELET_CONFIG_CP3 = "kubelet-config-node-cp-3"


def test_a_dead_control_plane_is_forgotten_without_connecting_to_it() -> None:
    deployed, gone, replaced = _plan(lambda hosts: hosts), _plan(_cp3_gone), _plan(_cp3_replaced)

    mark = update.compare(Resource.from_plan(deployed), Resource.from_plan(gone), "lab-ha", "cp-3 gone")
    (kubelet,) = [s for s in mark.steps if s.resource.name == KUBELET_CONFIG_CP3]
    assert kubelet.action is Action.DELETE and kubelet.runs == "nothing runs (no delete command)", kubelet.runs
    assert kubelet.old is not None and not kubelet.old.inputs.get("delete")
    on_cp3 = [s for s in mark.steps if _on_cp3(s) and s is not kubelet]
    assert len(on_cp3) >= 8 and {s.label for s in on_cp3} == {"same"}, mark.text()
    assert all(s.new is not None and s.new.option("retainOnDelete", False) for s in on_cp3)
    (removal,) = [s for s in mark.steps if s.resource.name == "membership-remove-gone"]
    assert removal.action is Action.CREATE and removal.resource.inputs["connection"]["host"] == "192.0.2.10"
    assert "gone_members=(cp-3)" in removal.resource.inputs["create"]
    assert not [s for s in mark.steps if s.action in (Action.REPLACE, Action.DELETE) and s is not kubelet], mark.text()
    assert not refusals(plan_side(deployed), gone.config)

    swap = update.compare(Resource.from_plan(gone), Resource.from_plan(replaced), "lab-ha", "cp-3 -> cp-4")
    dropped = [s for s in swap.steps if _on_cp3(s)]
    assert {s.label for s in dropped} == {"delete"} and len(dropped) == len(on_cp3)
    for s in dropped:
        assert "retainOnDelete: its delete does not run" in s.reasons and not s.loud, s.resource.name
    assert not [line for line in swap.loud if CP3 in line], swap.loud
    assert {s.resource.name for s in swap.of(Action.CREATE)} >= {"cp-4-join", "cp-4-ready"}
    assert not refusals(plan_side(gone), replaced.config)
