"""docs/queues.md: the team member's examples are what the API server would take and what Kueue would
queue. The Indexed Job against Kubernetes' schema (kubernetes-validate), the PyTorchJob against the
pinned training operator's CRD, the config example through the config model; each names the team's
LocalQueue of that config, is created suspended, and lies in the team's namespace, where its Role
lets the team's group create it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from components.queues import objects
from config.queues import QUEUE_LABEL
from render.cluster.admission import builtin_validator, strict_schema
from tests.config.refusals import accepted
from tests.conftest import PROJECT_DIR, lab_raw

PAGE = PROJECT_DIR / "docs" / "queues.md"


def _yaml_blocks() -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)]


def _example(kind: str) -> dict[str, Any]:
    (found,) = [b for b in _yaml_blocks() if isinstance(b, dict) and b.get("kind") == kind]
    return found


def _team():
    # the page's one whole queues config (the topology and GPU model sections show fragments beside hosts)
    (config_block,) = [b for b in _yaml_blocks() if isinstance(b, dict) and set(b) == {"gpu-cluster:queues"}]
    queues = config_block["gpu-cluster:queues"]
    # the documented team, in a lab with room for its GPUs
    cfg = accepted(lab_raw(queues=queues))
    (team,) = cfg.queues.teams
    return team


def test_the_config_example_is_accepted():
    team = _team()
    assert team.group and team.namespace not in ("training", "default")


def test_the_indexed_job_example_is_a_valid_queued_job():
    job, team = _example("Job"), _team()
    errors = [e.message for e in builtin_validator("batch/v1", "Job", "1.34").iter_errors(job)]
    assert not errors, errors
    assert job["metadata"]["namespace"] == team.namespace
    assert job["metadata"]["labels"][QUEUE_LABEL] == team.name
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] in objects.PRIORITY_CLASSES
    assert job["spec"]["suspend"] is True and job["spec"]["completionMode"] == "Indexed"


def test_the_pytorchjob_example_is_valid_against_the_training_operators_crd(upstream_dir: Path):
    crd_file = (upstream_dir / "charts" / "training-operator-v1.9.4" / "manifests" / "base" / "crds"
                / "kubeflow.org_pytorchjobs.yaml")
    if not crd_file.is_file():
        pytest.fail(f"the pinned training operator's CRD is missing: {crd_file}")
    crd = yaml.safe_load(crd_file.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = json.loads(json.dumps(version["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}
    job, team = _example("PyTorchJob"), _team()
    errors = [e.message for e in jsonschema.Draft7Validator(strict_schema(schema)).iter_errors(job)]
    assert not errors, errors
    assert job["metadata"]["namespace"] == team.namespace
    assert job["metadata"]["labels"][QUEUE_LABEL] == team.name
    assert job["spec"]["runPolicy"]["suspend"] is True


def test_the_team_role_lets_the_examples_be_created():
    rules = objects.team_role(_team().namespace)["rules"]
    for kind, group, resource in (("Job", "batch", "jobs"), ("PyTorchJob", "kubeflow.org", "pytorchjobs")):
        assert _example(kind)["apiVersion"].split("/")[0] == group
        assert any(group in r["apiGroups"] and resource in r["resources"] and "create" in r["verbs"] for r in rules)
