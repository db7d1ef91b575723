"""`python -m render <stack> --against OLD` (render/update.py): what an update from an older config
would create, update, replace and delete, by the engine's rules and each provider's.

The lab scenarios run the real program on two configs and assert one table, SCENARIOS: what the
plan says today. Issue 13 was that a Kubernetes patch release rebuilt the cluster (kubeadm reset
on every node); its row now shows the upgrade in place. The unit tests below build pairs of
plan entries by hand, one per provider and engine rule.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gpu_health_pairs import check_name
from render import __main__ as render_main
from render import program, update, update_risks
from render.update import Action, Resource
from tests.conftest import PROJECT_DIR

COMMAND = "command:remote:Command"
INIT, KUBECONFIG, K8S = "control-plane-init", "control-plane-kubeconfig", "control-plane-k8s"
GPU3 = {"name": "gpu-3", "address": "192.0.2.13", "role": "worker", "gpus": 1, "sshUser": "ubuntu",
        "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHt6mQ1wV0pR8sK3zY5bN2cF7dL4eJ9gA1uX6oT3iM8q"}
GPU3_STEPS = ("kernel", "nvidia-driver", "driver-ready", "nvidia-toolkit", "containerd", "kube-packages",
              "join", "ready")
DRAIN = "membership-drain"  # one control-plane step drains the nodes that left the host list
DBR = "replace (delete first)"
NFS_SERVER = "shared-storage-nfs-server"  # storage.provision's export on the first control plane
APPROVER = "kubelet-serving-deployment"  # kubelet-csr-approver: its allowed names and addresses follow the hosts


# ------------------------------------------------------------------------------------------------
# the real program, config against config


def _stack_values() -> dict[str, Any]:
    return yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]


def _hosts() -> list[dict[str, Any]]:
    return list(_stack_values()["gpu-cluster:hosts"])


def _config(**overrides: Any) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("lab")
    values.update({f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in overrides.items()})
    return values, secret_keys


def _resources(**overrides: Any) -> list[Resource]:
    return Resource.from_plan(program.run("lab", config=_config(**overrides)))


def _gpu3_diagnostic(step: str) -> dict[str, str]:
    """gpuHealth: gpu-3's diagnostic CronJobs come or go, and so do the NCCL pair checks of the
    ring gpu-1, gpu-2, gpu-3 that gpu-1/gpu-2 alone do not have (gpu-1/gpu-2's own check stays as
    it is); the diagnostic's role names every GPU node."""
    new_pairs = [check_name(("gpu-2", "gpu-3")), check_name(("gpu-3", "gpu-1"))]
    pair_steps = {f"nccl-pair-check-{kind}-{name}{suffix}": step for name in new_pairs
                  for kind, suffix in (("cronjob", ""), ("service", "-hosts"), ("networkpolicy", "-peers"))}
    return {"gpu-health-clusterrole-gpu-diag": "update", "gpu-health-cronjob-gpu-diag-gpu-3": step,
            "gpu-health-cronjob-gpu-diag-l2-gpu-3": step, **pair_steps}


@dataclass(frozen=True)
class Scenario:
    old: dict[str, Any]  # config overrides of the deployed (older) side
    new: dict[str, Any]  # and of the newer
    steps: dict[str, str]  # resource name -> Step.label; every other resource: `in_cluster` or same
    loud: tuple[str, ...]  # the resources with a `!!` line
    in_cluster: str = "same"  # what happens to every Kubernetes resource not named in `steps`


_MONITORING = {"enabled": True, "retention": "15d", "storageSize": "50Gi", "storageClass": "",
               "alerts": {"gpuTempCelsius": 85, "idleMinutes": 30}}
_REBUILD_STEPS = {
    INIT: DBR, KUBECONFIG: DBR, K8S: DBR, "control-plane-certificates": DBR, "membership-ca-hash": DBR, DRAIN: DBR,
    **{f"gpu-{i}-{s}": DBR for i in (1, 2) for s in ("join", "ready")},
    # each node's kubelet-config step (components/lab/kubelet_config.py) runs again on the new cluster and
    # finds its file as the new init wrote it; the ConfigMap's step stays (init writes every field)
    **{f"kubelet-config-node-{h}": DBR for h in ("cp-1", "gpu-1", "gpu-2")},
}
_REBUILD_LOUD = (INIT, "gpu-1-join", "gpu-2-join")

SCENARIOS: dict[str, Scenario] = {
    # ISSUE 13, upgraded in place: the init's triggers are the cluster's identity, so a new version
    # is an update; its update script (snapshot, kubeadm upgrade apply, the node drained for its
    # kubelet) is loud for the drain. kube-packages stages the new kubeadm with its update command.
    # Each worker's join step drains and upgrades it, its ready step uncordons it, on the worker
    # (loud for the drain). Nothing is replaced, nothing in the cluster changes.
    "kubernetes-patch-release": Scenario(
        old={"kubernetesVersion": "1.34.2"},
        new={"kubernetesVersion": "1.34.3"},
        steps={INIT: "update", **{f"{h}-kube-packages": "update" for h in ("cp-1", "gpu-1", "gpu-2")},
               **{f"{w}-{s}": "update" for w in ("gpu-1", "gpu-2") for s in ("join", "ready")}},
        loud=(INIT, "gpu-1-join", "gpu-2-join"),
    ),
    "pod-cidr": Scenario(
        old={"podCidr": "10.244.0.0/16"},
        new={"podCidr": "10.245.0.0/16"},
        steps=_REBUILD_STEPS,
        loud=_REBUILD_LOUD,
        in_cluster=DBR,
    ),
    # A new worker: its own steps, plus the NFS export updated in place (the exports file lists
    # every client; issue 34: no longer replaced delete-first, which un-exported the share under
    # running pods) and the GPU-ready gate Job (completions and parallelism count GPU nodes, both
    # immutable).
    "add-worker": Scenario(
        old={},
        new={"hosts": [*_hosts(), GPU3]},
        steps={"gpu-3": "create", **{f"gpu-3-{s}": "create" for s in GPU3_STEPS},
               NFS_SERVER: "update", "gpu-ready": DBR, DRAIN: "update", **_gpu3_diagnostic("create"),
               APPROVER: "update", "kubelet-config-node-gpu-3": "create"},
        # the drain step runs again with the new host list: it drains only hosts that left the
        # older list (render/drain_guards.py), none here, so it is quiet
        loud=(),
    ),
    "remove-worker": Scenario(
        old={"hosts": [*_hosts(), GPU3]},
        new={},
        steps={"gpu-3": "delete", **{f"gpu-3-{s}": "delete" for s in GPU3_STEPS},
               NFS_SERVER: "update", "gpu-ready": DBR, DRAIN: "update", **_gpu3_diagnostic("delete"),
               APPROVER: "update", "kubelet-config-node-gpu-3": "delete"},
        # gpu-3 is drained and deleted by the drain step's update, then reset by its join's delete
        loud=(DRAIN, "gpu-3-join", "gpu-3-kube-packages", "gpu-3-containerd"),
    ),
    # Issue 34: a worker's new address re-joins that worker (its steps' triggers hold the address)
    # and the drain step drains its old Node; the NFS export is updated in place, never deleted.
    "worker-address": Scenario(
        old={},
        new={"hosts": [h if h["name"] != "gpu-2" else {**h, "address": "192.0.2.22"} for h in _hosts()]},
        steps={**{f"gpu-2-{s}": DBR for s in GPU3_STEPS}, NFS_SERVER: "update", DRAIN: "update", APPROVER: "update",
               "kubelet-config-node-gpu-2": DBR},
        loud=(DRAIN, "gpu-2-join", "gpu-2-kube-packages", "gpu-2-containerd"),
    ),
    "helm-value": Scenario(
        old={"monitoring": _MONITORING},
        new={"monitoring": {**_MONITORING, "retention": "30d"}},
        steps={"monitoring-kube-prometheus-stack": "update"},
        loud=(),
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_update_on_lab(name: str) -> None:
    scenario = SCENARIOS[name]
    plan = update.compare(_resources(**scenario.old), _resources(**scenario.new), "lab", name)
    for s in plan.steps:
        r = s.resource
        if not r.custom:  # a component (gpu-3, or gpu-ready beside its Job) is only ever created or deleted
            want = scenario.steps.get(r.name, "same") if scenario.steps.get(r.name) in ("create", "delete") else "same"
        elif r.name in scenario.steps:
            want = scenario.steps[r.name]
        elif r.type.startswith("kubernetes:") or r.type == "pulumi:providers:kubernetes":
            want = scenario.in_cluster
        else:
            want = "same"
        assert s.label == want, f"{name}: {r.name} ({r.type}): {s.label}, expected {want}: {'; '.join(s.reasons)}"
    missing = set(scenario.steps) - {s.resource.name for s in plan.steps}
    assert not missing, sorted(missing)
    loud = sorted({s.resource.name for s in plan.steps if s.loud})
    assert loud == sorted(scenario.loud), plan.text()


def test_patch_release_upgrades_the_control_plane_in_place() -> None:
    """Issue 13 as the operator sees it now: updates in place, no reset; loud for the drains."""
    plan = update.compare(_resources(), _resources(kubernetesVersion="1.34.3"), "lab", "old.yaml")
    (init,) = [s for s in plan.steps if s.resource.name == INIT]
    assert init.loud == [f"UPDATE {INIT}: runs its update script again on 192.0.2.10, a script that "
                         "drains a node (kubectl drain): the node is drained for kubernetesVersion 1.34.2 -> 1.34.3"]
    assert init.runs == "runs its update command"
    assert not any(c.replaces for c in init.changes)
    (packages,) = [s for s in plan.steps if s.resource.name == "gpu-1-kube-packages"]
    assert packages.runs == "runs its update command"
    assert sorted(c.path for c in packages.changes) == ["create", "update"]
    (join,) = [s for s in plan.steps if s.resource.name == "gpu-1-join"]
    assert join.loud == ["UPDATE gpu-1-join: runs its update script again on 192.0.2.11, a script that "
                         "drains a node (kubectl drain): the node is drained for kubernetesVersion 1.34.2 -> 1.34.3"]
    # the worker drains itself, on its own sshd
    assert plan.destructive
    assert not any("kubeadm reset" in line for s in plan.steps for line in s.loud)
    (cni,) = [s for s in plan.steps if s.resource.name == "cni-calico"]
    assert cni.label == "same"


def _as_older_program_deployed_it(resources: list[Resource]) -> list[Resource]:
    """The NFS export as the program before issue 34 recorded it: triggers [share, *clients],
    delete-before-replace."""
    out = []
    for r in resources:
        if r.name == NFS_SERVER:
            # the share's clients (the etcd snapshots' export beside it lists the control planes again)
            clients = list(dict.fromkeys(re.findall(r"([0-9.]+)\(rw,", r.inputs["create"])))
            options = {k: v for k, v in r.options.items() if k != "ignoreChanges"} | {"deleteBeforeReplace": True}
            r = dataclasses.replace(r, inputs={**r.inputs, "triggers": ["/srv/gpu-cluster/shared", *clients]},
                                    options=options)
        out.append(r)
    return out


@pytest.mark.parametrize("new_hosts", [
    pytest.param(None, id="same-hosts"),
    pytest.param([*_hosts(), GPU3], id="a-worker-added"),
    pytest.param([h if h["name"] != "gpu-1" else {**h, "address": "192.0.2.21"} for h in _hosts()],
                 id="a-worker-readdressed"),
])
def test_the_nfs_export_is_never_deleted_under_its_pods(new_hosts: list[dict[str, Any]] | None) -> None:
    """Issue 34: a stack deployed by the older program (its triggers held every client) upgrades
    to this one without its NFS export being replaced, and a host added or readdressed later only
    updates it: no step of the update runs the export's delete (un-export, purge the server)."""
    old = _as_older_program_deployed_it(_resources())
    assert next(r for r in old if r.name == NFS_SERVER).inputs["triggers"][1:] == ["192.0.2.10", "192.0.2.11",
                                                                                  "192.0.2.12"]
    plan = update.compare(old, _resources(**({"hosts": new_hosts} if new_hosts else {})), "lab", "older program")
    (nfs,) = [s for s in plan.steps if s.resource.name == NFS_SERVER]
    assert nfs.action is (Action.SAME if new_hosts is None else Action.UPDATE), plan.text()
    assert not nfs.loud and nfs.runs in ("", "runs its create command again (no update command)")
    assert not [s for s in plan.steps if s.action in (Action.REPLACE, Action.DELETE)
                and s.resource.type == COMMAND and "exportfs" in str(s.resource.inputs.get("delete"))]


def test_same_config_changes_nothing() -> None:
    plan = update.compare(_resources(), _resources(), "lab", "same")
    assert {s.action for s in plan.steps} == {Action.SAME}
    assert not plan.destructive


# ------------------------------------------------------------------------------------------------
# the command line: a stack file or a plan.json on the older side


def _older_stack_file(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())
    data["config"].update({f"gpu-cluster:{k}": v for k, v in changes.items()})
    path = tmp_path / "old-Pulumi.lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_against_stack_file_and_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old_yaml = _older_stack_file(tmp_path, kubernetesVersion="1.34.1")
    rc = render_main.main(["lab", "--out", str(tmp_path / "a"), "--no-check", "--against", str(old_yaml)])
    out = capsys.readouterr()
    assert rc == 4, out.err
    assert f"!! UPDATE {INIT}: runs its update script again on 192.0.2.10, a script that drains a node" in out.out
    assert "exit 4" in out.err
    summary = (tmp_path / "a" / "summary.md").read_text()
    assert f"## Update from `{old_yaml}`" in summary and f"**!! UPDATE {INIT}" in summary
    from_yaml = [line for line in out.out.splitlines() if line.startswith(("update of", "!!"))]

    # The same older side as a plan.json, written by render itself.
    render_main.write(program.run("lab", config=program.stack_config("lab", stack_file=old_yaml)), tmp_path / "old")
    old_json = tmp_path / "old" / "plan.json"
    rc = render_main.main(["lab", "--out", str(tmp_path / "b"), "--no-check", "--against", str(old_json)])
    out = capsys.readouterr()
    assert rc == 4
    from_json = [line.replace(str(old_json), str(old_yaml)) for line in out.out.splitlines()
                 if line.startswith(("update of", "!!"))]
    assert from_json == from_yaml


def test_against_a_plan_json_without_options(tmp_path: Path) -> None:
    """A plan.json written before options were recorded still compares, with a note."""
    old = program.run("lab", config=_config(kubernetesVersion="1.34.1"))
    entries = [{k: v for k, v in r.entry().items() if k in ("type", "name", "urn", "parent", "dependencies", "inputs")}
               for r in old.resources]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"stack": "lab", "resources": entries, "outputs": {}}))
    older = update_risks.older_side(path, "lab").resources
    plan = update.compare(older, Resource.from_plan(program.run("lab")), "lab", str(path))
    with_options = update.compare(Resource.from_plan(old), Resource.from_plan(program.run("lab")), "lab", str(path))
    assert [(s.resource.name, s.label) for s in plan.steps] == [(s.resource.name, s.label) for s in with_options.steps]
    assert any("records no resource options" in n for n in plan.notes)


def test_against_unchanged_stack_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = render_main.main(["lab", "--out", str(tmp_path), "--no-check", "--against", str(PROJECT_DIR / "Pulumi.lab.yaml")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "0 to create, 0 to update, 0 to replace, 0 to delete" in out and "!!" not in out


def test_against_bad_older_config_or_other_stack_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _older_stack_file(tmp_path, podCidr="not-a-cidr")
    assert render_main.main(["lab", "--out", str(tmp_path / "a"), "--no-check", "--against", str(bad)]) == 2
    assert "the older config" in capsys.readouterr().err and not (tmp_path / "a").exists()
    other = tmp_path / "dev.json"
    other.write_text(json.dumps({"stack": "dev", "resources": []}))
    assert render_main.main(["lab", "--out", str(tmp_path / "b"), "--no-check", "--against", str(other)]) == 2
    assert "not 'lab'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# options as the plan records them


def test_options_recorded_from_the_real_registration() -> None:
    plan = program.run("lab")
    by_name = {r.name: r for r in plan.resources}
    init = by_name[INIT]
    assert init.options["deleteBeforeReplace"] is True
    assert init.options["replaceOnChanges"] == ["triggers[*]"]  # added by pulumi_command's SDK
    assert init.options["updateCommand"] is True  # a new version upgrades in place
    assert init.options["protect"] is True and init.options["retainOnDelete"] is False  # allowRebuild unset
    assert "stdout" in by_name[KUBECONFIG].options["additionalSecretOutputs"]
    assert by_name[K8S].property_dependencies == {"kubeconfig": [by_name[KUBECONFIG].urn]}
    assert by_name["gpu-1-join"].property_dependencies["triggers"] == [init.urn]
    release = by_name["cni-calico"]
    assert release.options["deleteBeforeReplace"] is None  # left to the provider
    entry = init.entry()
    assert entry["options"] == init.options and entry["custom"] is True


# ------------------------------------------------------------------------------------------------
# one rule at a time, on hand-built entries


def res(type_: str, name: str, inputs: dict[str, Any], *, options: dict[str, Any] | None = None,
        provider: str = "", prop_deps: dict[str, list[str]] | None = None, custom: bool = True,
        dependencies: list[str] | None = None) -> Resource:
    return Resource(urn=f"urn:pulumi:lab::gpu-cluster::{type_}::{name}", type=type_, name=name, custom=custom,
                    provider=provider, inputs=inputs, dependencies=dependencies or [],
                    property_dependencies=prop_deps or {}, options=options or {})


def one_step(old: list[Resource] | Resource, new: list[Resource] | Resource, name: str) -> update.Step:
    olds = old if isinstance(old, list) else [old]
    news = new if isinstance(new, list) else [new]
    (s,) = [s for s in update.compare(olds, news).steps if s.resource.name == name]
    return s


def command(name: str = "c", create: str = "echo hi", *, triggers: list[Any] | None = None, delete: str | None = None,
            update_: str | None = None, host: str = "192.0.2.10", **kw: Any) -> Resource:
    inputs: dict[str, Any] = {"create": create, "connection": {"host": host, "privateKey": "[secret]"}}
    if triggers is not None:
        inputs["triggers"] = triggers
    if delete is not None:
        inputs["delete"] = delete
    if update_ is not None:
        inputs["update"] = update_
    options = {"replaceOnChanges": ["triggers[*]"], **kw.pop("options", {})}
    return res(COMMAND, name, inputs, options=options, **kw)


class TestCommand:
    """pulumi-command 1.2.1: triggers replaces; any other change re-runs update, else create."""

    def test_create_changed_without_update_reruns_create(self) -> None:
        s = one_step(command(create="a"), command(create="b"), "c")
        assert (s.action, s.runs) == (Action.UPDATE, "runs its create command again (no update command)")

    def test_create_changed_with_update_runs_update(self) -> None:
        s = one_step(command(create="a", update_="u"), command(create="b", update_="u"), "c")
        assert (s.action, s.runs) == (Action.UPDATE, "runs its update command")

    def test_only_the_delete_script_changed_still_reruns_create(self) -> None:
        s = one_step(command(delete="x"), command(delete="y"), "c")
        assert (s.action, s.runs) == (Action.UPDATE, "runs its create command again (no update command)")

    def test_connection_changed_is_an_update(self) -> None:
        s = one_step(command(host="192.0.2.10"), command(host="192.0.2.99"), "c")
        assert s.action is Action.UPDATE and [c.path for c in s.changes] == ["connection.host"]

    def test_triggers_changed_replaces_create_first(self) -> None:
        s = one_step(command(triggers=["a"], delete="rm x"), command(triggers=["b"], delete="rm x"), "c")
        assert (s.label, s.runs) == ("replace (create first)", "runs create, then its old delete")

    def test_triggers_added_replaces(self) -> None:
        s = one_step(command(), command(triggers=["a"]), "c")
        assert s.action is Action.REPLACE

    def test_delete_before_replace_option(self) -> None:
        s = one_step(command(triggers=["a"]), command(triggers=["b"], options={"deleteBeforeReplace": True}), "c")
        assert s.label == DBR

    def test_triggers_from_a_replaced_resource_replace(self) -> None:
        root_old, root_new = command("root", triggers=["a"]), command("root", triggers=["b"])
        dep = command("dep", triggers=["root-id"], prop_deps={"triggers": [root_new.urn]})
        s = one_step([root_old, dep], [root_new, dep], "dep")
        assert s.action is Action.REPLACE and s.changes[0].unknown

    def test_depends_on_alone_does_not_replace(self) -> None:
        root_old, root_new = command("root", triggers=["a"]), command("root", triggers=["b"])
        dep = command("dep", dependencies=[root_new.urn])
        assert one_step([root_old, dep], [root_new, dep], "dep").action is Action.SAME

    def test_stdin_from_a_replaced_resource_is_an_update(self) -> None:
        root_old, root_new = command("root", triggers=["a"]), command("root", triggers=["b"])
        dep = command("dep", prop_deps={"stdin": [root_new.urn]})
        dep = Resource(**{**dep.__dict__, "inputs": {**dep.inputs, "stdin": "token"}})
        s = one_step([root_old, dep], [root_new, dep], "dep")
        assert s.action is Action.UPDATE and any("unknown at preview" in r for r in s.reasons)


class TestEngine:
    def test_ignore_changes_drops_the_path(self) -> None:
        old = command(triggers=["a"])
        new = command(triggers=["b"], options={"ignoreChanges": ["triggers"]})
        assert one_step(old, new, "c").action is Action.SAME

    def test_replace_on_changes_forces_a_replace(self) -> None:
        cm = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {"a": "1"}}}
        cm2 = {**cm, "metadata": {"name": "n", "labels": {"a": "2"}}}
        t = "kubernetes:core/v1:Namespace"
        assert one_step(res(t, "n", cm), res(t, "n", cm2), "n").action is Action.UPDATE
        s = one_step(res(t, "n", cm), res(t, "n", cm2, options={"replaceOnChanges": ["metadata.labels"]}), "n")
        assert s.action is Action.REPLACE and s.changes[0].replaces == "replaceOnChanges option"

    def test_protect_makes_a_replace_or_delete_loud(self) -> None:
        p = {"protect": True}
        s = one_step(command(triggers=["a"], options=p), command(triggers=["b"], options=p), "c")
        assert s.loud and s.loud[0].startswith("PROTECTED c")
        plan = update.compare([command(options=p)], [])
        assert plan.destructive and "PROTECTED c" in plan.loud[0]

    def test_unprotecting_in_the_same_update_is_not_loud(self) -> None:
        s = one_step(command(triggers=["a"], options={"protect": True}), command(triggers=["b"]), "c")
        assert not s.loud

    def test_retain_on_delete_skips_the_delete(self) -> None:
        reset = "kubeadm reset -f"
        plan = update.compare([command(delete=reset, options={"retainOnDelete": True})], [])
        assert not plan.loud and "retainOnDelete" in plan.steps[0].reasons[0]
        assert update.compare([command(delete=reset)], []).loud

    def test_replaced_provider_replaces_what_it_manages(self) -> None:
        kube = "pulumi:providers:kubernetes"
        p_old = res(kube, "k8s", {"kubeconfig": "[secret]"}, prop_deps={})
        src_old, src_new = command("kc", triggers=["a"]), command("kc", triggers=["b"])
        p_new = res(kube, "k8s", {"kubeconfig": "[secret]"}, prop_deps={"kubeconfig": [src_new.urn]})
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
        t = "kubernetes:core/v1:Namespace"
        n = res(t, "n", ns, provider=f"{p_new.urn}::id")
        plan = update.compare([src_old, p_old, n], [src_new, p_new, n])
        by = {s.resource.name: s for s in plan.steps}
        assert by["k8s"].action is Action.REPLACE and by["n"].action is Action.REPLACE
        # Forced by the provider: the object's own delete-before-replace preference is not asked.
        assert by["n"].label == "replace (create first)"

    def test_delete_before_replace_cascades_to_dependents(self) -> None:
        root_old = command("root", triggers=["a"], options={"deleteBeforeReplace": True})
        root_new = command("root", triggers=["b"], options={"deleteBeforeReplace": True})
        dep = command("dep", triggers=["x"], delete="rm y", prop_deps={"triggers": [root_new.urn]})
        s = one_step([root_old, dep], [root_new, dep], "dep")
        assert s.label == DBR and s.runs == "runs its old delete, then create"
        assert any("deleted before root is replaced" in r for r in s.reasons)


def k8s(kind: str, api: str, name: str, body: dict[str, Any], *, provider: str = "", ns: str | None = "default"
        ) -> Resource:
    md: dict[str, Any] = {"name": name, **({"namespace": ns} if ns else {})}
    group = api.split("/")[0] if "/" in api else "core"
    version = api.split("/")[-1]
    return res(f"kubernetes:{group}/{version}:{kind}", name, {"apiVersion": api, "kind": kind, "metadata": md, **body},
               provider=provider)


class TestKubernetes:
    """pulumi-kubernetes provider/pkg/provider/diff.go forceNew and provider.go Diff."""

    @pytest.mark.parametrize(
        "kind,api,before,after,label",
        [
            ("Job", "batch/v1", {"spec": {"template": {"spec": {"x": 1}}}}, {"spec": {"template": {"spec": {"x": 2}}}},
             DBR),
            ("Job", "batch/v1", {"spec": {"backoffLimit": 1}}, {"spec": {"backoffLimit": 2}}, "update"),
            ("Deployment", "apps/v1", {"spec": {"template": {"spec": {"x": 1}}}},
             {"spec": {"template": {"spec": {"x": 2}}}}, "update"),
            ("Deployment", "apps/v1", {"spec": {"selector": {"matchLabels": {"a": "1"}}}},
             {"spec": {"selector": {"matchLabels": {"a": "2"}}}}, DBR),
            ("Service", "v1", {"spec": {"clusterIP": "10.0.0.1"}}, {"spec": {"clusterIP": "10.0.0.2"}}, DBR),
            ("Service", "v1", {"spec": {"ports": [{"port": 80}]}}, {"spec": {"ports": [{"port": 81}]}}, "update"),
            ("PersistentVolumeClaim", "v1", {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
             {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}, "update"),
            ("PersistentVolumeClaim", "v1", {"spec": {"storageClassName": "a"}}, {"spec": {"storageClassName": "b"}},
             DBR),
            ("StorageClass", "storage.k8s.io/v1", {"parameters": {"a": "1"}}, {"parameters": {"a": "2"}}, DBR),
            ("ConfigMap", "v1", {"data": {"a": "1"}}, {"data": {"a": "2"}}, DBR),
            ("Secret", "v1", {"stringData": {"a": "1"}}, {"stringData": {"a": "2"}}, DBR),
            ("RoleBinding", "rbac.authorization.k8s.io/v1", {"roleRef": {"name": "a"}}, {"roleRef": {"name": "b"}},
             DBR),
            ("PrometheusRule", "monitoring.coreos.com/v1", {"spec": {"a": 1}}, {"spec": {"a": 2}}, "update"),
        ],
    )
    def test_force_new(self, kind: str, api: str, before: dict[str, Any], after: dict[str, Any], label: str) -> None:
        assert one_step(k8s(kind, api, "o", before), k8s(kind, api, "o", after), "o").label == label

    def test_added_selector_map_matches_its_force_new_path(self) -> None:
        s = one_step(k8s("DaemonSet", "apps/v1", "o", {"spec": {}}),
                     k8s("DaemonSet", "apps/v1", "o", {"spec": {"selector": {"matchLabels": {"a": "1"}}}}), "o")
        assert s.action is Action.REPLACE

    def test_config_map_mutable_by_provider_config(self) -> None:
        prov = res("pulumi:providers:kubernetes", "k8s", {"enableConfigMapMutable": "true"})
        ref = f"{prov.urn}::id"
        old = k8s("ConfigMap", "v1", "o", {"data": {"a": "1"}}, provider=ref)
        new = k8s("ConfigMap", "v1", "o", {"data": {"a": "2"}}, provider=ref)
        assert one_step([prov, old], [prov, new], "o").action is Action.UPDATE

    def test_renamed_object_replaces_create_first(self) -> None:
        old = k8s("Namespace", "v1", "o", {}, ns=None)
        new = Resource(**{**old.__dict__, "inputs": {**old.inputs, "metadata": {"name": "p"}}})
        assert one_step(old, new, "o").label == "replace (create first)"

    def test_patch_resource_updates_in_place(self) -> None:
        old = res("kubernetes:core/v1:NodePatch", "p",
                  {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "1"}}, "spec": {}})
        new = res("kubernetes:core/v1:NodePatch", "p",
                  {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "2"}},
                   "spec": {"unschedulable": True}})
        assert one_step(old, new, "p").action is Action.UPDATE

    def test_unknown_spec_is_left_to_the_provider(self) -> None:
        root_old, root_new = command("root", triggers=["a"]), command("root", triggers=["b"])
        job = k8s("Job", "batch/v1", "j", {"spec": {"template": {}}})
        job = Resource(**{**job.__dict__, "property_dependencies": {"spec": [root_new.urn]}})
        s = one_step([root_old, job], [root_new, job], "j")
        assert s.label == "update?" and any("provider decides" in r for r in s.reasons)


class TestHelmRelease:
    T = "kubernetes:helm.sh/v3:Release"

    def release(self, **inputs: Any) -> Resource:
        return res(self.T, "r", {"name": "r", "namespace": "a", "chart": "c", "version": "1", "values": {}, **inputs})

    def test_values_and_version_are_an_upgrade(self) -> None:
        s = one_step(self.release(), self.release(version="2", values={"a": 1}), "r")
        assert (s.action, s.runs) == (Action.UPDATE, "helm upgrade")

    def test_namespace_replaces_create_first(self) -> None:
        assert one_step(self.release(), self.release(namespace="b"), "r").label == "replace (create first)"


class TestProviderAndOthers:
    K = "pulumi:providers:kubernetes"

    @staticmethod
    def kubeconfig(server: str, current: str = "a") -> str:
        return yaml.safe_dump({
            "current-context": current,
            "contexts": [{"name": "a", "context": {"cluster": "c1"}}, {"name": "b", "context": {"cluster": "c2"}}],
            "clusters": [{"name": "c1", "cluster": {"server": server}}, {"name": "c2", "cluster": {"server": "https://b"}}],
        })

    def test_kubeconfig_same_active_cluster_is_an_update(self) -> None:
        old = res(self.K, "p", {"kubeconfig": self.kubeconfig("https://a")})
        new = res(self.K, "p", {"kubeconfig": self.kubeconfig("https://a") + "# comment\n"})
        assert one_step(old, new, "p").action is Action.UPDATE

    def test_context_to_another_cluster_replaces(self) -> None:
        old = res(self.K, "p", {"kubeconfig": self.kubeconfig("https://a"), "context": "a"})
        new = res(self.K, "p", {"kubeconfig": self.kubeconfig("https://a"), "context": "b"})
        assert one_step(old, new, "p").action is Action.REPLACE

    def test_unchanged_cluster_identifier_suppresses_replacement(self) -> None:
        old = res(self.K, "p", {"context": "a", "clusterIdentifier": "x"})
        new = res(self.K, "p", {"context": "b", "clusterIdentifier": "x"})
        assert one_step(old, new, "p").action is Action.UPDATE

    def test_unreadable_context_change_is_assumed_to_replace_and_says_so(self) -> None:
        s = one_step(res(self.K, "p", {"context": "a"}), res(self.K, "p", {"context": "b"}), "p")
        assert s.action is Action.REPLACE and "assumed" in s.reasons[0]

    def test_random_password_any_input_replaces(self) -> None:
        t = "random:index/randomPassword:RandomPassword"
        assert one_step(res(t, "p", {"length": 32.0}), res(t, "p", {"length": 24}), "p").action is Action.REPLACE
        assert one_step(res(t, "p", {"length": 32.0}), res(t, "p", {"length": 32}), "p").action is Action.SAME

    def test_gcp_is_left_to_the_provider(self) -> None:
        t = "gcp:container/nodePool:NodePool"
        s = one_step(res(t, "np", {"nodeConfig": {"machineType": "a"}}),
                     res(t, "np", {"nodeConfig": {"machineType": "b"}}), "np")
        assert (s.action, s.label, s.modelled) == (Action.UPDATE, "update?", False)
        assert "not modelled" in s.reasons[0]

    def test_remote_component_change_is_left_to_the_provider(self) -> None:
        t = "kubernetes:kustomize/v2:Directory"
        old = res(t, "d", {"directory": "a"}, custom=False, options={"remote": True})
        new = res(t, "d", {"directory": "b"}, custom=False, options={"remote": True})
        assert one_step(old, new, "d").label == "update?"

    def test_component_is_never_updated_itself(self) -> None:
        t = "gpucluster:lab:NodePrep"
        assert one_step(res(t, "n", {}, custom=False), res(t, "n", {"x": 1}, custom=False), "n").action is Action.SAME


class TestNodeEffects:
    @pytest.mark.parametrize(
        "script,effects",
        [
            ("kubeadm reset -f", ["resets a node (kubeadm reset)"]),
            ("kubectl --kubeconfig /etc/kubernetes/admin.conf drain gpu-1 --force",
             ["drains a node (kubectl drain)"]),
            ("kubectl --kubeconfig x delete node gpu-1", ["deletes a node (kubectl delete node)"]),
            ("apt_unpin_purge kubectl kubeadm kubelet", ["removes kubelet or containerd from the host"]),
            ("apt-get remove -y containerd.io", ["removes kubelet or containerd from the host"]),
            ("rm -f /etc/sysctl.d/x.conf", []),
            ("kubectl get nodes", []),
        ],
    )
    def test_recognised_from_the_script(self, script: str, effects: list[str]) -> None:
        assert update.node_effects(command(delete=script)) == effects

    def test_secret_script_falls_back_to_the_step_name(self) -> None:
        assert update.node_effects(command("gpu-1-join", delete="[secret]"))
        assert not update.node_effects(command("gpu-1-kernel", delete="[secret]"))

    def test_no_delete_is_not_loud(self) -> None:
        assert not update.compare([command("gpu-1-token")], []).loud

    def test_an_update_that_runs_a_draining_script_is_loud(self) -> None:
        """pulumi-command re-runs `create` (or runs `update`) on an in-place update: a script that
        drains or resets nodes makes that update loud, whichever of the two runs."""
        drain = "kubectl --kubeconfig /etc/kubernetes/admin.conf drain gpu-3 --ignore-daemonsets"
        plan = update.compare([command("membership-drain", f"{drain} # a b")], [command("membership-drain", f"{drain} # a")])
        assert [s.action for s in plan.steps] == [Action.UPDATE]
        assert plan.loud and "drains a node (kubectl drain)" in plan.loud[0] and "create script" in plan.loud[0]
        upgrade = update.compare([command("w", "echo 1", update_="kubeadm upgrade node")],
                                 [command("w", "echo 2", update_=f"{drain}; kubeadm upgrade node")])
        assert upgrade.loud and "update script" in upgrade.loud[0]
        # an update whose script touches no node is quiet
        assert not update.compare([command("w", "echo 1")], [command("w", "echo 2")]).loud


class TestPaths:
    def test_parse_and_format(self) -> None:
        assert update.parse_path('metadata.annotations["a.b/c"]') == ("metadata", "annotations", "a.b/c")
        assert update.parse_path(".spec.containers[*].image") == ("spec", "containers", "*", "image")
        assert update.parse_path("triggers[2]") == ("triggers", 2)
        assert update.format_path(("metadata", "annotations", "a.b/c")) == 'metadata.annotations["a.b/c"]'
        assert update.format_path(("triggers", 2)) == "triggers[2]"

    def test_contains(self) -> None:
        assert update.contains(("triggers", "*"), ("triggers", 2))
        assert not update.contains(("triggers", "*"), ("triggers",))
        assert update.contains(("spec", "template"), ("spec", "template", "spec", "x"))

    def test_numbers_and_booleans(self) -> None:
        assert update.leaf_changes({"a": 32.0}, {"a": 32}) == []
        assert update.leaf_changes({"a": True}, {"a": 1}) == [(("a",), "update")]
        assert update.leaf_changes({"a": None}, {}) == []
