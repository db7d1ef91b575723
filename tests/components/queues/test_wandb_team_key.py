"""Who can read the W&B API key in a team namespace (components/training/wandb_launch.py, Teams).

The old claim (docs/queues.md, the module's docstring): the team's group is never granted Secrets, so
its members cannot read the key. False: the team's Role lets them create Jobs, and a Job's pod may
reference any Secret of its namespace, so the key Secret there is theirs to print. The tests below
show that, from the Role and the Secret the plan registers; then that the copy is opt-in
(wandb.teamQueues): a team not named gets no key, no queue and no agent RoleBinding in its namespace,
a named team's copy stays a Pulumi secret, and a name that is not a team is refused, exit 2."""

from __future__ import annotations

import json

import pytest

import config
from components.queues import objects
from components.training.wandb_launch import API_KEY_FIELD, API_KEY_SECRET
from config import wandb_teams
from render import program
from tests.components.training.test_wandb_launch import CANARY, WANDB, wandb_config

SECRET = "kubernetes:core/v1:Secret"


def wandb_team_config(stack: str, teams: list[str]) -> tuple[dict[str, str], list[str]]:
    """wandb_config with wandb.teamQueues naming `teams`."""
    values, secrets = wandb_config(stack)
    values["gpu-cluster:wandb"] = json.dumps({**WANDB, "teamQueues": teams})
    return values, secrets


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha", config=wandb_team_config("lab-ha", ["vision"]))


def _key_secrets(plan: program.Plan) -> dict[str, program.Registration]:
    return {r.inputs["metadata"]["namespace"]: r for r in plan.of_type(SECRET)
            if r.inputs["metadata"]["name"] == API_KEY_SECRET}


def _a_member_can_read(namespace: str) -> bool:
    """What Kubernetes lets a member of the team do with its Role: create a Job (the Role's verbs)
    whose pod env-references a Secret of the namespace. Pod creation by the Job controller checks
    the reference against the namespace only (no RBAC on the creator for secretKeyRef), so the
    member can read any Secret in a namespace where the Role lets them create Jobs."""
    role = objects.team_role(namespace)
    return any(rule["apiGroups"] == ["batch"] and "jobs" in rule["resources"] and "create" in rule["verbs"]
               for rule in role["rules"])


def test_a_team_member_can_read_a_key_copied_into_the_team_namespace(plan: program.Plan) -> None:
    """The old claim was wrong: a copy in the team's namespace is readable by its members. So only
    the teams named in wandb.teamQueues may hold one."""
    secrets = _key_secrets(plan)
    for ns in ("team-vision", "team-language"):
        if ns in secrets:
            assert _a_member_can_read(ns)
    readable = {ns for ns in secrets if ns.startswith("team-") and _a_member_can_read(ns)}
    assert readable == {"team-vision"}, "the key reached a team that was not trusted with it"


def test_a_team_not_named_gets_no_key_no_queue_and_no_agent_rights(plan: program.Plan) -> None:
    assert "team-language" not in _key_secrets(plan)
    assert set(plan.outputs["wandbTeamQueues"]) == {"vision"}
    (agent,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "wandb-launch"]
    targets = agent.inputs["values"]["additionalTargetNamespaces"]
    assert "team-vision" in targets and "team-language" not in targets
    assert "gpu-queue-language" not in agent.inputs["values"]["launchConfig"]


def test_the_default_trusts_no_team_with_the_key() -> None:
    plan = program.run("lab-ha", config=wandb_config("lab-ha"))
    assert not [ns for ns in _key_secrets(plan) if ns.startswith("team-")]
    assert "wandbTeamQueues" not in plan.outputs


def test_a_named_teams_copy_stays_a_pulumi_secret(plan: program.Plan) -> None:
    copy = _key_secrets(plan)["team-vision"]
    assert copy.inputs["stringData"] == program.SECRET_MARKER
    assert API_KEY_FIELD  # the field the runner reads
    assert CANARY not in json.dumps(plan.outputs) and CANARY not in json.dumps([r.inputs for r in plan.resources])


@pytest.mark.parametrize(("wandb", "queues", "needle"), [
    ({**WANDB, "teamQueues": ["nobody"]}, None, "'nobody' is not a team"),
    ({**WANDB, "teamQueues": ["vision", "vision"]}, None, "twice"),
    ({**WANDB, "enabled": False, "teamQueues": ["vision"]}, None, "wandb.enabled"),
    ({**WANDB, "teamQueues": ["vision"]}, {"enabled": False}, "queues.enabled"),
])
def test_a_team_queue_that_cannot_be_is_refused_before_anything_is_registered(wandb, queues, needle) -> None:
    values, secrets = wandb_config("lab-ha")
    values["gpu-cluster:wandb"] = json.dumps(wandb)
    if queues is not None:
        values["gpu-cluster:queues"] = json.dumps(queues)
    with pytest.raises(config.ConfigError) as err:
        program.run("lab-ha", config=(values, secrets))
    assert f"gpu-cluster:{wandb_teams.KEY}" in str(err.value) and needle in str(err.value), str(err.value)
