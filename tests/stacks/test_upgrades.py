"""Upgrades on the real program (render.program.run with Pulumi.lab.yaml): a plan for the deployed
config and one for the bumped config, compared input by input, as Pulumi compares them.

pulumi-command replaces a step when its `triggers` change and otherwise updates it, running its
`update` command (components/lab/upgrade.py cites the source). So for a patch, a minor and a driver
bump: no resource is added or removed, no step's triggers change (nothing is replaced: no `kubeadm
reset`, no re-join), and every step whose inputs change has an `update` command, which upgrades in
place. The stack's previous outputs are what the engine's readStackOutputs returns: mocked here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import render.__main__ as render_main
from config import ConfigError
from render import program
from stacks.lab import READ_STACK_OUTPUTS

COMMAND = "command:remote:Command"
BASE = {"kubernetesVersion": "1.34.2"}
WORKERS = ("gpu-1", "gpu-2")  # Pulumi.lab.yaml: cp-1 and two GPU workers
DEPLOYED = {
    "kubernetesVersion": "1.34.2", "podCidr": "10.244.0.0/16", "serviceCidr": "10.96.0.0/12",
    "controlPlaneEndpoint": "192.0.2.10:6443", "controlPlane": "cp-1 192.0.2.10",
}


@pytest.fixture
def deployed(monkeypatch) -> dict[str, Any]:
    """The stack's previous outputs as the engine would return them; tests edit `record`."""
    state: dict[str, Any] = {"record": dict(DEPLOYED), "asked": []}
    real = program.ProgramMocks.call

    def call(self, args):
        if args.token == READ_STACK_OUTPUTS:
            state["asked"].append(args.args["name"])
            outputs = {"deployed": state["record"]} if state["record"] is not None else {}
            return {"name": args.args["name"], "outputs": {**outputs, "kubeconfig": "..."}, "secretOutputNames": []}
        return real(self, args)

    monkeypatch.setattr(program.ProgramMocks, "call", call)
    return state


def lab_plan(**overrides: Any) -> program.Plan:
    values, secret_keys = program.stack_config("lab")
    for key, value in overrides.items():
        values[f"gpu-cluster:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return program.run("lab", config=(values, secret_keys))


def changes(before: program.Plan, after: program.Plan) -> dict[str, set[str]]:
    """Resource name -> the input keys whose values differ."""
    old = {r.urn: r for r in before.resources}
    new = {r.urn: r for r in after.resources}
    assert set(old) == set(new), f"added {set(new) - set(old)}, removed {set(old) - set(new)}"
    out = {}
    for urn, reg in old.items():
        keys = {k for k in reg.inputs.keys() | new[urn].inputs.keys() if reg.inputs.get(k) != new[urn].inputs.get(k)}
        if keys:
            out[reg.name] = keys
    return out


def prep_steps(*steps: str, hosts=("cp-1", *WORKERS)) -> set[str]:
    return {f"{h}-{s}" for h in hosts for s in steps}


# Each worker upgrades itself: its join step drains it and upgrades it, its ready step waits and
# uncordons it, both on the worker (no control-plane step per worker, test_no_control_plane_step_per_worker).
NODE_STEPS = {f"{w}-{s}" for w in WORKERS for s in ("join", "ready")}

CASES = {
    # kube-packages: kubeadm staged; init: snapshot + kubeadm upgrade apply + its own kubelet; each
    # worker's join and ready steps: drained, upgraded, uncordoned, from the worker itself.
    "patch": ({"kubernetesVersion": "1.34.3"}, {"control-plane-init"} | prep_steps("kube-packages") | NODE_STEPS),
    # The same; the kube-packages step switches to the v1.35 apt repository, and the etcd backup and
    # defragmentation (after the init's upgrade) to the etcdctl of the etcd kubeadm runs for 1.35
    # (versions.ETCD_KUBEADM).
    "minor": ({"kubernetesVersion": "1.35.0"},
              {"control-plane-init", "cp-1-etcd-backup-install", "cp-1-etcd-defrag-install"}
              | prep_steps("kube-packages") | NODE_STEPS),
    # Only the GPU workers: their driver step waits, their join and ready steps drain, switch the
    # branch, reboot and uncordon.
    "driver": ({"nvidiaDriver": {"branch": "580"}}, prep_steps("nvidia-driver", hosts=WORKERS) | NODE_STEPS),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bump_updates_in_place_and_replaces_nothing(deployed, case):
    overrides, expected = CASES[case]
    before, after = lab_plan(**BASE), lab_plan(**overrides)
    changed = changes(before, after)
    assert set(changed) == expected
    by_name = {r.name: r for r in after.resources}
    for name, keys in changed.items():
        reg = by_name[name]
        assert reg.type == COMMAND, f"{name}: only host steps change ({keys})"
        assert "triggers" not in keys, f"{name}: its triggers changed, so Pulumi would replace it"
        assert "update" in keys and reg.inputs.get("update"), f"{name}: an update without its own update command"
        assert "kubeadm reset" not in reg.inputs["update"], name
    # Every step keeps its triggers: the init, the kubeconfig read, the joins, the host steps.
    was = {r.name: r for r in before.resources}
    for reg in after.of_type(COMMAND):
        assert reg.inputs.get("triggers") == was[reg.name].inputs.get("triggers"), reg.name
    assert after.outputs["deployed"]["kubernetesVersion"] == overrides.get("kubernetesVersion", "1.34.2")
    assert deployed["asked"] == ["organization/gpu-cluster/lab"] * 2


@pytest.mark.parametrize("case", CASES)
def test_no_control_plane_step_per_worker_in_an_upgrade(deployed, case):
    """Join at scale holds for updates too: the steps that run on the control plane's sshd in an
    upgrade are the same for 2 workers as for 4, and none is a worker's."""
    overrides, _ = CASES[case]
    values, _ = program.stack_config("lab")
    hosts = json.loads(values["gpu-cluster:hosts"])
    more = [*hosts, *({**hosts[-1], "name": f"gpu-{i}", "address": f"192.0.2.{20 + i}"} for i in (3, 4))]

    def on_control_plane(**extra: Any) -> set[str]:
        before, after = lab_plan(**extra), lab_plan(**extra, **overrides)
        changed = changes(before, after)
        by_name = {r.name: r for r in after.resources}
        return {n for n in changed if by_name[n].type == COMMAND
                and by_name[n].inputs["connection"]["host"] == "192.0.2.10"}

    two, four = on_control_plane(), on_control_plane(hosts=more)
    assert two == four
    assert not any(n.startswith("gpu-") for n in two)


def test_a_minor_whose_pause_image_differs_reruns_the_containerd_step(deployed):
    """1.33 -> 1.34: kubeadm 1.34 expects pause 3.10.1; containerd's step has no update command, so
    its create runs again: the config is rewritten and containerd restarted (containers survive)."""
    deployed["record"]["kubernetesVersion"] = "1.33.5"
    changed = changes(lab_plan(kubernetesVersion="1.33.5"), lab_plan(kubernetesVersion="1.34.2"))
    assert {name for name in changed if name.endswith("-containerd")} == prep_steps("containerd")
    assert all(keys == {"create"} for name, keys in changed.items() if name.endswith("-containerd"))


@pytest.mark.parametrize(("was", "overrides", "key", "words"), [
    ("1.33.5", {"kubernetesVersion": "1.35.0"}, "kubernetesVersion", "1.33.5 -> 1.35.0 skips minor 1.34"),
    ("1.34.2", {"kubernetesVersion": "1.34.1"}, "kubernetesVersion", "older than the deployed 1.34.2"),
    ("1.34.2", {"podCidr": "10.245.0.0/16"}, "podCidr", "needs a new cluster"),
    ("1.34.2", {"serviceCidr": "10.100.0.0/16"}, "serviceCidr", "needs a new cluster"),
    ("1.34.2", {"controlPlaneEndpoint": "k8s-api.lab.example:6443"}, "controlPlaneEndpoint", "needs a new cluster"),
], ids=["skip-minor", "downgrade", "podCidr", "serviceCidr", "endpoint"])
def test_refused_changes_register_nothing_and_exit_2_naming_the_key(deployed, monkeypatch, tmp_path, capsys,
                                                                   was, overrides, key, words):
    deployed["record"]["kubernetesVersion"] = was
    plans: list[program.Plan] = []
    real_plan = program.Plan

    def recording(*args: Any, **kwargs: Any) -> program.Plan:
        plans.append(real_plan(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(program, "Plan", recording)
    with pytest.raises(ConfigError) as info:
        lab_plan(**overrides)
    assert [k for k, _ in info.value.problems] == [key] and words in info.value.problems[0][1]
    assert plans[-1].resources == [], "refused before anything is registered"

    # `make plan` on such a stack file: exit 2, the key named on stderr, nothing written.
    values, secret_keys = program.stack_config("lab")
    values.update({f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in overrides.items()})
    monkeypatch.setattr(program, "stack_config", lambda *args, **kwargs: (values, secret_keys))
    assert render_main.main(["lab", "--out", str(tmp_path / "out"), "--no-check"]) == 2
    err = capsys.readouterr().err
    assert f"gpu-cluster:{key}: " in err and words in err
    assert not (tmp_path / "out").exists()


def test_allow_rebuild_replaces_the_cluster_on_purpose(deployed, monkeypatch):
    protected: dict[str, bool] = {}
    real = program.RecordingMonitor.RegisterResource

    def recording(self, request):
        protected[request.name] = bool(request.protect)
        return real(self, request)

    monkeypatch.setattr(program.RecordingMonitor, "RegisterResource", recording)
    before = lab_plan()
    assert protected["control-plane-init"], "protected from an accidental replacement or deletion"
    after = lab_plan(podCidr="10.245.0.0/16", allowRebuild=True)
    assert not protected["control-plane-init"], "unprotected in the run that rebuilds"
    changed = changes(before, after)
    # A new cluster: the init's triggers change (replaced: reset, then init), and with its id every join's.
    assert "triggers" in changed["control-plane-init"]
    assert after.outputs["deployed"]["podCidr"] == "10.245.0.0/16"


def test_a_new_stack_has_nothing_to_compare(deployed):
    deployed["record"] = None  # a first `up`, or a stack deployed before the output existed
    plan = lab_plan(kubernetesVersion="1.31.0", podCidr="10.245.0.0/16")
    assert plan.outputs["deployed"]["kubernetesVersion"] == "1.31.0"
    assert plan.outputs["etcdSnapshot"] is None  # no upgrade has run yet


def test_adding_a_worker_changes_no_other_hosts_steps(deployed):
    """The upgrade commands depend on the version, the driver and maxUnavailable, not on how many
    hosts there are: a new worker is created and joined, the others stay as they are."""
    values, _ = program.stack_config("lab")
    hosts = json.loads(values["gpu-cluster:hosts"])
    extra = {**hosts[-1], "name": "gpu-3", "address": "192.0.2.13"}
    before, after = lab_plan(), lab_plan(hosts=[*hosts, extra])
    old = {r.urn: r for r in before.resources if r.type == COMMAND}
    new = {r.urn: r for r in after.resources if r.type == COMMAND}
    changed = {r.name for urn, r in old.items() if new[urn].inputs != r.inputs}
    # The export lists the new host; the drain of removed hosts knows one more member.
    assert changed == {"shared-storage-nfs-server", "membership-drain"}
    assert {r.name for urn, r in new.items() if urn not in old} == {
        f"gpu-3-{s}" for s in ("kernel", "nvidia-driver", "driver-ready", "nvidia-toolkit", "containerd",
                               "kube-packages", "join", "ready")} | {"kubelet-config-node-gpu-3"}


def test_upgrading_the_program_keeps_the_init_triggers(deployed):
    """Issue 34: the init step's triggers no longer name "the first host" but the host kubeadm init
    ran on, as recorded; for a stack deployed by the older program (which recorded its first
    control plane) they are the very values that program set, so the first `up` after upgrading
    replaces nothing (a change of triggers would reset and re-init the cluster)."""
    plan = lab_plan()
    (init,) = [r for r in plan.of_type(COMMAND) if r.name == "control-plane-init"]
    assert init.inputs["triggers"] == ["cp-1", "192.0.2.10", "192.0.2.10:6443", "10.244.0.0/16", "10.96.0.0/12"]
    assert plan.outputs["deployed"]["controlPlane"] == "cp-1 192.0.2.10"
