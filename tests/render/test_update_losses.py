"""`--against` is loud (`!!`, exit 4) about what an update loses for good (issue 30):

  - a Secrets encryption key dropped while Secrets may still be written with it, a key replaced,
    encryption turned off in one step: every such Secret becomes unreadable. The documented safe
    steps (a key added second, made first, the old one dropped once `rewrittenWith` says every
    Secret was re-written; writeUnencrypted before turning off) preview without `!!`;
  - a team removed, renamed or `queues.enabled: false`: its namespace goes with every job in it,
    and Kueue's CRDs with its release. The safe way named is a LocalQueue stopPolicy the pinned
    Kueue CRD accepts.
The older configs are the committed stack files with overrides (as in test_update_risks.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from render import __main__ as render_main
from render import program, update, update_encryption, update_risks, update_teams
from tests.conftest import PROJECT_DIR

ENC = "gpu-cluster:hardening.secretsEncryption"


def _side(stack: str = "lab", **overrides: Any) -> update_risks.Side:
    return _rendered(stack, json.dumps(overrides, sort_keys=True))


@functools.cache
def _rendered(stack: str, overrides: str) -> update_risks.Side:
    """A side rendered once per config (the sequences share steps); never mutated by a test."""
    values, secret_keys = program.stack_config(stack)
    values.update({f"gpu-cluster:{k}": json.dumps(v) for k, v in json.loads(overrides).items()})
    return update_risks.plan_side(program.run(stack, config=(values, secret_keys)))


def _keys(stack: str = "lab", **encryption: Any) -> update_risks.Side:
    return _side(stack, hardening={"secretsEncryption": encryption})


def _encryption(older: update_risks.Side, newer: update_risks.Side) -> tuple[list[str], list[str]]:
    plan = update.compare(older.resources, newer.resources, "lab", "old")
    return update_encryption.changes(older, newer, plan.steps, len(update_risks.control_planes(newer)))


def _older_stack_file(tmp_path: Path, stack: str, **changes: Any) -> Path:
    data = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())
    data["config"].update({f"gpu-cluster:{k}": v for k, v in changes.items()})
    path = tmp_path / f"old-Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _against(tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str, old: Path) -> tuple[int, list[str], str]:
    rc = render_main.main([stack, "--out", str(tmp_path / "out"), "--no-check", "--against", str(old)])
    out = capsys.readouterr()
    return rc, [line for line in out.out.splitlines() if line.startswith("!!")], out.err


# ------------------------------------------------------------------------------------------------
# Secrets encryption keys


def test_replacing_the_key_in_one_step_is_loud_from_the_command_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The committed lab writes with key-1; an older config that wrote with key-2 loses it."""
    old = _older_stack_file(tmp_path, "lab", hardening={"secretsEncryption": {"keys": ["key-2"]}})
    rc, loud, err = _against(tmp_path, capsys, "lab", old)
    assert rc == 4, err
    assert loud == [line for line in loud if line.startswith("!! Secrets encryption key key-2 dropped")], loud
    assert len(loud) == 1 and "while it is the key Secrets are written with" in loud[0]
    assert "add the new key second" in loud[0] and "kubectl replace -f -" in loud[0]
    assert "Secrets' keys or team namespaces lost" in err
    assert "!! Secrets encryption key key-2 dropped" in (tmp_path / "out" / "summary.md").read_text()


def test_turning_encryption_off_in_one_step_is_loud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loud, _ = _encryption(_keys(), _keys(enabled=False))
    assert len(loud) == 1 and loud[0].startswith(f"Secrets encryption turned off ({ENC}.enabled false) with keys "
                                                 "key-1: they are deleted from the stack's state"), loud
    assert f"{ENC}.writeUnencrypted true" in loud[0] and f"{ENC}.rewrittenWith identity" in loud[0]
    # Turning it on (an older config that had it off, against the committed lab) loses nothing.
    old = _older_stack_file(tmp_path, "lab", hardening={"secretsEncryption": {"enabled": False}})
    _, lines, err = _against(tmp_path, capsys, "lab", old)
    assert not [line for line in lines if "Secrets encryption" in line], (lines, err)


@pytest.mark.parametrize(("older", "newer", "words"), [
    ({"keys": ["key-2", "key-1"]}, {"keys": ["key-1"]}, "key-2 dropped (gpu-cluster:hardening.secretsEncryption.keys) "
                                                        "while it is the key Secrets are written with"),
    ({"keys": ["key-2", "key-1"]}, {"keys": ["key-2"]}, "key-1 dropped (gpu-cluster:hardening.secretsEncryption.keys): "
                                                        "every Secret not re-written since key-2 took over"),
    ({"keys": ["key-1"], "writeUnencrypted": True}, {"enabled": False}, "turned off"),
], ids=["the-writing-key", "an-older-key-without-rewrite", "off-before-the-rewrite"])
def test_a_drop_that_can_lose_secrets_is_loud(older: dict[str, Any], newer: dict[str, Any], words: str) -> None:
    loud, _ = _encryption(_keys(**older), _keys(**newer))
    assert len(loud) == 1 and words in loud[0], loud


def test_the_documented_rotation_is_quiet_at_every_step() -> None:
    """docs/security/hardening.md, "Rotating the key": each step against the one before."""
    steps = [_keys(), _keys(keys=["key-1", "key-2"]), _keys(keys=["key-2", "key-1"]),
             _keys(keys=["key-2", "key-1"], rewrittenWith="key-2"), _keys(keys=["key-2"], rewrittenWith="key-2")]
    notes = []
    for before, after in zip(steps, steps[1:], strict=False):
        loud, step_notes = _encryption(before, after)
        assert loud == [], loud
        notes.append(step_notes)
    assert notes[0] == [], "a key added second is quiet"
    assert any("key-2 writes from now on" in n and "kubectl replace -f -" in n for n in notes[1]), notes[1]
    assert notes[2] == []
    assert any("key-1 dropped: every Secret was re-written with key-2" in n for n in notes[3]), notes[3]


def test_the_documented_way_off_is_quiet_at_every_step() -> None:
    steps = [_keys(), _keys(writeUnencrypted=True), _keys(writeUnencrypted=True, rewrittenWith="identity"),
             _keys(enabled=False, rewrittenWith="identity")]
    notes = []
    for before, after in zip(steps, steps[1:], strict=False):
        loud, step_notes = _encryption(before, after)
        assert loud == [], loud
        notes.append(step_notes)
    assert any("written unencrypted from now on" in n for n in notes[0]), notes[0]
    assert any("turned off" in n and "re-written unencrypted" in n for n in notes[2]), notes[2]


def test_a_new_key_that_writes_at_once_is_a_note_with_several_control_planes() -> None:
    loud, notes = _encryption(_keys("lab-ha", keys=["key-1", "key-2"]), _keys("lab-ha", keys=["key-3", "key-1", "key-2"]))
    assert loud == [] and any("key-3 is new and writes at once: until all 3 API servers" in n for n in notes), notes
    _, notes = _encryption(_keys(keys=["key-1", "key-2"]), _keys(keys=["key-3", "key-1", "key-2"]))
    assert not any("writes at once" in n for n in notes), "one API server: nothing to wait for"


def test_a_rewrite_claim_made_with_the_promotion_is_noted() -> None:
    _, notes = _encryption(_keys(keys=["key-1", "key-2"]), _keys(keys=["key-2", "key-1"], rewrittenWith="key-2"))
    assert any("rewrittenWith key-2 is set in the update that makes it write" in n for n in notes), notes


def test_an_older_plan_json_does_not_say_which_key_writes(tmp_path: Path) -> None:
    older = _keys(keys=["key-2", "key-1"], rewrittenWith="key-2")
    plan_json = update_risks.Side(older.resources, older.outputs)  # what an older plan.json holds: no config
    keys = update_encryption.keys_of(plan_json)
    assert keys is not None and sorted(keys.names) == ["key-1", "key-2"] and keys.writer is None
    loud, _ = _encryption(plan_json, _keys(keys=["key-2"], rewrittenWith="key-2"))
    assert len(loud) == 1 and "key-1 dropped" in loud[0] and "does not say which key writes" in loud[0], loud


def test_a_key_replaced_under_the_same_name_is_loud() -> None:
    older = _keys()
    # any input of a random resource replaces it (update_providers: random)
    resources = [dataclasses.replace(r, inputs={**r.inputs, "length": 33})
                 if r.type == "random:index/randomBytes:RandomBytes" else r for r in older.resources]
    loud, _ = _encryption(older, update_risks.Side(resources, older.outputs, older.config))
    assert any(line.startswith("Secrets encryption key key-1 is replaced (control-plane-files-key-key-1)")
               for line in loud), loud


def test_a_key_made_anew_under_another_resource_name_is_loud() -> None:
    """A renamed component or key resource: the old bytes are deleted, new ones created, the
    config's key names unchanged."""
    older = _keys()
    old_urn = next(r.urn for r in older.resources if r.type == "random:index/randomBytes:RandomBytes")
    resources = [dataclasses.replace(r, urn=r.urn.replace("::control-plane-files-key-", "::control-plane-files-key-v2-"))
                 if r.urn == old_urn else r for r in older.resources]
    loud, _ = _encryption(older, update_risks.Side(resources, older.outputs, older.config))
    assert any(line.startswith("Secrets encryption key key-1 is deleted and made anew") for line in loud), loud


def test_nothing_changes_nothing_is_said() -> None:
    assert _encryption(_keys(), _keys()) == ([], [])
    assert _encryption(_side("dev"), _side("dev")) == ([], []), "no encryption settings off lab"


# ------------------------------------------------------------------------------------------------
# teams and Kueue


def _teams(older: update_risks.Side, newer: update_risks.Side) -> list[str]:
    plan = update.compare(older.resources, newer.resources, "lab-ha", "old")
    return update_teams.losses(plan.steps, newer.config)


def _committed_teams() -> list[dict[str, Any]]:
    return list(yaml.safe_load((PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())["config"]["gpu-cluster:queues"]["teams"])


def _queues(teams: list[dict[str, Any]], enabled: bool = True) -> dict[str, Any]:
    q = yaml.safe_load((PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())["config"]["gpu-cluster:queues"]
    return {**q, "enabled": enabled, "teams": teams} if enabled else {"enabled": False}


AUDIO = {**_committed_teams()[1], "name": "audio", "namespace": "team-audio", "group": "gpu-audio", "gpus": 0}


def test_removing_a_team_is_loud_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _older_stack_file(tmp_path, "lab-ha", queues=_queues([*_committed_teams(), AUDIO]))
    rc, loud, err = _against(tmp_path, capsys, "lab-ha", old)
    assert rc == 4, err
    assert len(loud) == 1 and loud[0].startswith("!! team audio's namespace team-audio is deleted "
                                                 "(gpu-cluster:queues.teams): every Job, PyTorchJob and pod"), loud
    assert "kubectl -n team-audio patch localqueue audio" in loud[0]


def test_queues_off_names_every_team_and_kueue() -> None:
    loud = _teams(_side("lab-ha"), _side("lab-ha", queues={"enabled": False}))
    teams = sorted(t["name"] for t in _committed_teams())
    named = sorted(re.match(r"team (\S+)'s namespace", line).group(1) for line in loud if line.startswith("team "))  # type: ignore[union-attr]
    assert named == teams, loud
    assert all("(gpu-cluster:queues.enabled false)" in line for line in loud)
    assert any(line.startswith("Kueue is uninstalled") and "every ClusterQueue, LocalQueue and Workload" in line
               for line in loud), loud


def test_renaming_a_team_namespace_is_loud_and_adding_a_team_is_quiet() -> None:
    renamed = [{**t, "namespace": "team-vision-2"} if t["name"] == "vision" else t for t in _committed_teams()]
    loud = _teams(_side("lab-ha"), _side("lab-ha", queues=_queues(renamed)))
    assert len(loud) == 1 and loud[0].startswith("team vision's namespace team-vision is replaced"), loud
    assert _teams(_side("lab-ha"), _side("lab-ha", queues=_queues([*_committed_teams(), AUDIO]))) == []


def test_the_safe_way_is_a_stop_policy_the_pinned_kueue_accepts(upstream_dir: Path) -> None:
    """The patch in the line, against the pinned chart's LocalQueue CRD (its served versions'
    spec.stopPolicy enum); and the chart ships its CRDs as templates, so an uninstall deletes them."""
    line = update_teams.safe_way("vision", "team-vision")
    patch = json.loads(re.search(r"-p '([^']+)'", line).group(1))  # type: ignore[union-attr]
    chart = next((upstream_dir / "charts").glob("kueue-*"))
    crd_text = (chart / "templates" / "crd" / "kueue.x-k8s.io_localqueues.yaml").read_text()
    untemplated = [line for line in re.sub(r"\{\{-? */\*.*?\*/ *-?\}\}", "", crd_text, flags=re.DOTALL).splitlines()
                   if not line.strip().startswith("{{")]
    crd = yaml.safe_load(re.sub(r"\{\{.*?\}\}", "x", "\n".join(untemplated)))
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        assert patch["spec"]["stopPolicy"] in spec["stopPolicy"]["enum"], version["name"]
    assert not (chart / "crds").exists(), "CRDs under crds/ would survive an uninstall"
    assert "helm.sh/resource-policy" not in crd_text
