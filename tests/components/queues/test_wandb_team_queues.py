"""W&B Launch with queues.teams: a W&B queue per team whose config makes each run a Job in the
team's namespace, on the team's LocalQueue (kueue.x-k8s.io/queue-name), with the team's priority
class, created suspended as Kueue wants, mounting the team's own claim. The agent polls every
queue and may create Jobs in the teams' namespaces (the chart's RoleBindings there), the API key's
runs copy and the egress policy are there too, and the Kueue admission model of the whole-cluster
check admits such a run into the team's ClusterQueue."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from wandb.sdk.launch.utils import validate_kubernetes_resource_args

from components.storage_contract import CLAIM_NAME
from components.training.wandb_launch import API_KEY_SECRET, EGRESS_POLICY, RUN_LABELS
from config.queues import BATCH_PRIORITY_CLASS, PRIORITY_LABEL, PROGRAM_PRIORITY_CLASS, QUEUE_LABEL
from config.scheduling_contract import GPU_NODE_LABEL
from render import cluster, program
from render.cluster import kueue_admission, kueue_objects
from render.cluster.objects import Obj, collect
from tests.components.queues.test_wandb_team_key import wandb_team_config
from tests.components.training.test_wandb_launch import WANDB, as_the_agent_submits
from tests.render.kueue_builders import capacity, gpu_node

TEAMS = {"vision": ("team-vision", PROGRAM_PRIORITY_CLASS), "language": ("team-language", BATCH_PRIORITY_CLASS)}


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha", config=wandb_team_config("lab-ha", ["vision", "language"]))


def test_each_team_has_a_wandb_queue_of_queued_jobs_in_its_namespace(plan: program.Plan) -> None:
    queues = plan.outputs["wandbTeamQueues"]
    assert set(queues) == set(TEAMS)
    for team, (ns, priority) in TEAMS.items():
        q = queues[team]
        assert q["queue"] == f"{WANDB['queue']}-{team}" and f"-q {q['queue']} " in q["submit"]
        config = q["config"]
        assert config["metadata"]["namespace"] == ns
        assert config["metadata"]["labels"][QUEUE_LABEL] == team  # the team's LocalQueue
        assert config["metadata"]["labels"][PRIORITY_LABEL] == priority
        assert config["spec"]["suspend"] is True
        (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in config["spec"]["template"]["spec"]["volumes"]
                    if "persistentVolumeClaim" in v]
        assert claim == CLAIM_NAME
        claims = [r for r in plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")
                  if r.inputs["metadata"] == {"name": claim, "namespace": ns}]
        assert claims, f"no claim {claim} in {ns}: the run's pods would stay Pending"
        validate_kubernetes_resource_args(config)  # what the agent refuses from a queue
        job = as_the_agent_submits(config)
        validate_kubernetes_resource_args(job)
        assert kubernetes_validate.validate(job, "1.34", strict=True) == "1.34"
    # The program's own queue is unchanged: the training namespace, the program's LocalQueue.
    assert plan.outputs["wandbQueueConfig"]["metadata"]["namespace"] == "training"


def test_the_agent_polls_every_team_queue_and_reaches_their_namespaces(plan: program.Plan, upstream_dir: Path) -> None:
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "wandb-launch"]
    values = release.inputs["values"]
    config = yaml.safe_load(values["launchConfig"])
    assert config["queues"] == [WANDB["queue"], *(f"{WANDB['queue']}-{t}" for t in TEAMS)]
    assert values["additionalTargetNamespaces"] == ["training", *(ns for ns, _ in TEAMS.values())]
    for ns, _ in TEAMS.values():
        secrets = [r for r in plan.of_type("kubernetes:core/v1:Secret")
                   if r.inputs["metadata"] == {"name": API_KEY_SECRET, "namespace": ns}]
        assert len(secrets) == 1, ns  # the runner refuses a run whose namespace holds another key
        (policy,) = [r for r in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                     if r.inputs["metadata"] == {"name": EGRESS_POLICY, "namespace": ns}]
        assert policy.inputs["spec"]["podSelector"] == {"matchLabels": RUN_LABELS}
    # The chart's RoleBindings in the team namespaces: the check finds each namespace made first.
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    objects = collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    bound = {o.namespace for o in objects if o.kind == "RoleBinding" and o.source == release.urn}
    assert bound >= {ns for ns, _ in TEAMS.values()}


def test_kueue_admits_a_teams_run_into_the_teams_cluster_queue(plan: program.Plan, upstream_dir: Path) -> None:
    """The run Job the agent makes of the vision queue's config, added to the plan's objects: the
    admission model finds its LocalQueue in the team's namespace and admits it to ClusterQueue vision."""
    job = as_the_agent_submits(plan.outputs["wandbTeamQueues"]["vision"]["config"])
    job["metadata"]["name"] = "launch-run"
    objects = [*collect(plan, upstream_dir, plan.config.kubernetes_version).objects, Obj(job, "urn:wandb-run", "W&B")]
    world = kueue_objects.read(objects)
    (run,) = [w for w in world.workloads if w.obj.name == "launch-run"]
    world.workloads = [run]
    # lab-ha's two GPU hosts, one GPU each, as the check models them once the device plugin runs.
    nodes = [gpu_node(f"gpu-{i}", 1, **{GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]}) for i in (1, 2)]
    (verdict,) = kueue_admission.each_alone(world, capacity(*nodes))
    assert verdict.state == kueue_admission.ADMITTED, verdict.reasons
    assert verdict.cluster_queue == "vision" and verdict.queue == "team-vision/vision"
