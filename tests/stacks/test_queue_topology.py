"""Racks (hosts[].rack) as a Kueue topology level, and jobs over RDMA admitted into one rack:

* config: a rack is an RFC 1123 label, named on every GPU host or none (exit 2 naming the key);
* the plan: a NodePatch writes the rack label on each host after it joined; a Topology (levels rack,
  then hostname) validated by the whole-cluster check against the pinned chart's CRD; the GPU
  ResourceFlavor names it; the RDMA jobs' pod templates require the rack level, other jobs do not;
* the whole-cluster check (Kueue's admission model): both GPU hosts in one rack, the two-node RDMA
  jobs are admitted; in two racks they can never be, and ./plan exits 3 naming the job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.queue_flavors import TOPOLOGY_NAME
from config.queues import REQUIRED_TOPOLOGY
from config.scheduling_contract import RACK_LABEL
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.config.refusals import problems
from tests.conftest import SEED_002_ROCE, stack_config_with
from tests.render_cli import render_cli

ROCE = {"rdma": True, "linkGbps": 25, "roce": SEED_002_ROCE}


def _hosts(*racks: str | None) -> list[dict[str, Any]]:
    """lab-ha's hosts with the GPU hosts' racks set in order (None: no rack)."""
    values, _ = program.stack_config("lab-ha")
    hosts = json.loads(values["gpu-cluster:hosts"])
    gpu = [h for h in hosts if h.get("gpus")]
    assert len(gpu) == len(racks)
    for h, rack in zip(gpu, racks, strict=True):
        if rack is not None:
            h["rack"] = rack
    return hosts


def _plan(*racks: str | None, **overrides: Any) -> program.Plan:
    return program.run("lab-ha", config=stack_config_with("lab-ha", hosts=_hosts(*racks), **overrides))


def _raw(*racks: str | None) -> dict[str, Any]:
    values, secret_keys = program.stack_config("lab-ha")
    raw = {k.removeprefix("gpu-cluster:"): json.loads(v) if v.startswith(("[", "{")) else v for k, v in values.items()
           if k not in secret_keys}
    raw["hosts"] = _hosts(*racks)
    return raw


def test_a_rack_on_some_gpu_hosts_only_is_refused() -> None:
    found = problems(_raw("r1", None))
    assert any(key == "hosts[4].rack" or key.endswith("].rack") for key, _ in found), found
    assert any("every GPU host must name one" in why for _, why in found), found


def test_a_rack_must_be_a_label() -> None:
    found = problems(_raw("Rack 1", "r1"))
    assert any(key.endswith("].rack") and "RFC 1123" in why for key, why in found), found


def test_one_rack_topology_flavor_patches_and_rdma_jobs(upstream_dir: Path) -> None:
    plan = _plan("r1", "r1", network=ROCE)
    objects = kubernetes_objects(plan)
    topologies = [o for o in objects if o["kind"] == "Topology"]
    assert [t["metadata"]["name"] for t in topologies] == [TOPOLOGY_NAME]
    assert [lvl["nodeLabel"] for lvl in topologies[0]["spec"]["levels"]] == [RACK_LABEL, "kubernetes.io/hostname"]
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    assert [f["spec"].get("topologyName") for f in flavors] == [TOPOLOGY_NAME]
    patches = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
               for r in plan.of_type("kubernetes:core/v1:NodePatch") if r.name.endswith("-rack")}
    assert patches == {"gpu-1": {RACK_LABEL: "r1"}, "gpu-2": {RACK_LABEL: "r1"}}
    jobs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"
            and o["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name")}
    assert jobs, "no queued job"
    for name, job in jobs.items():
        annotations = job["spec"]["template"]["metadata"].get("annotations") or {}
        assert annotations.get(REQUIRED_TOPOLOGY) == RACK_LABEL, name  # every queued job here runs over RDMA
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems


def test_without_rdma_no_job_requires_a_rack() -> None:
    plan = _plan("r1", "r2")  # lab-ha's jobs use sockets: quota alone decides
    for o in kubernetes_objects(plan):
        if o["kind"] == "Job":
            assert REQUIRED_TOPOLOGY not in (o["spec"]["template"]["metadata"].get("annotations") or {})


def test_without_racks_no_topology() -> None:
    objects = kubernetes_objects(_plan(None, None, network=ROCE))
    assert not [o for o in objects if o["kind"] == "Topology"]
    assert all("topologyName" not in o["spec"] for o in objects if o["kind"] == "ResourceFlavor")


@pytest.mark.would_not_come_up
def test_two_node_rdma_jobs_across_two_racks_never_come_up(tmp_path: Path, upstream_dir: Path) -> None:
    result = render_cli(tmp_path, "lab-ha", {"hosts": _hosts("r1", "r2"), "network": ROCE}, upstream=upstream_dir)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "nccl-acceptance" in result.stderr and "rack" in result.stderr.lower(), result.stderr
