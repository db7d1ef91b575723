"""Shared storage per team (components/queues/team_storage.py): each team's namespace gets a claim
`shared-data` of its own on the platform's shared storage, in a directory no other team's claim
reaches:

* lab (lab-ha: the NFS CSI driver's class): a claim on the class, after the class and its driver,
  validated by the whole-cluster check (kubernetes-validate, the namespace exists before it);
* static storage (dev storage.nfs, storage.hostPath; gke's Filestore share): a PersistentVolume of
  the team's own subdirectory, pre-bound both ways, valid against Kubernetes' strict schema;
* NetworkPolicy: the volume is mounted by the kubelet, so the team's default deny needs no rule
  for it, and it keeps the team's pods from the NFS server itself (the evaluator says so);
* each team's storage is a stack output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from components.queues import objects, team_storage
from components.storage_contract import CLAIM_NAME, TeamVolumes
from render import cluster, program
from render.cluster.network_policy import Endpoint, allowed
from tests.conftest import stack_config_with

PVC = "kubernetes:core/v1:PersistentVolumeClaim"
PV = "kubernetes:core/v1:PersistentVolume"
TEAMS = {"vision": "team-vision", "language": "team-language"}
NFS_PORT = 2049


def _team_queues() -> str:
    values, _ = program.stack_config("lab-ha")
    return values["gpu-cluster:queues"]


@pytest.fixture(scope="module")
def lab() -> program.Plan:
    return program.run("lab-ha")


def _of(plan: program.Plan, type_: str, namespace: str | None = None) -> list[program.Registration]:
    return [r for r in plan.of_type(type_) if (r.inputs.get("metadata") or {}).get("namespace") == namespace]


def _strict(manifest: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(manifest, "1.34", strict=True) == "1.34"


def test_on_lab_each_team_gets_its_own_claim_on_the_nfs_class(lab: program.Plan, upstream_dir: Path) -> None:
    (training_claim,) = _of(lab, PVC, "training")
    (storage_class,) = lab.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    for team, ns in TEAMS.items():
        (claim,) = _of(lab, PVC, ns)
        assert claim.inputs["metadata"]["name"] == CLAIM_NAME  # the name every job's pod template mounts
        # The class makes a directory per claim: the team's is not the training claim's.
        assert claim.inputs["spec"]["storageClassName"] == storage_class.inputs["metadata"]["name"]
        assert claim.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
        assert "volumeName" not in claim.inputs["spec"]
        assert storage_class.urn in claim.dependencies and claim.urn != training_claim.urn
        assert lab.outputs["queues"][team]["storage"] == f"{ns}/{CLAIM_NAME}: its own directory of StorageClass gpu-cluster-nfs"
    assert not lab.of_type(PV)  # dynamic: the driver makes the volumes
    report = cluster.check(lab, lab.config, upstream_dir)  # schema and namespace order of every claim
    assert report.ok, report.problems


def test_a_team_pod_cannot_reach_the_nfs_server_and_needs_not(lab: program.Plan) -> None:
    """The kubelet mounts NFS from the node; the team's own pods reach neither the server nor
    another namespace, only each other and DNS."""
    policies = objects.team_network_policies("team-vision")
    server = Endpoint("nfs-server", "10.0.0.11", node="cp-1")  # storage.provision: the first control plane
    pod = Endpoint("run-0", "10.244.1.5", "team-vision", {"job-name": "run"}, node="gpu-1")
    other_team = Endpoint("run-0", "10.244.2.5", "team-language", node="gpu-2")
    peer = Endpoint("run-1", "10.244.2.6", "team-vision", node="gpu-2")
    assert not allowed(policies, pod, server, NFS_PORT), allowed(policies, pod, server, NFS_PORT)
    assert not allowed(policies, pod, other_team, 29500)
    assert allowed(policies, pod, peer, 29500)
    # ... and the claim those pods mount is the team's own.
    (claim,) = _of(lab, PVC, "team-vision")
    assert claim.inputs["spec"]["storageClassName"]


def _dev_plan(storage: dict[str, Any]) -> program.Plan:
    """dev (one GPU) with lab-ha's two teams, lending each other everything (no nominal GPUs)."""
    queues = json.loads(_team_queues())
    queues["teams"] = [{**t, "gpus": 0} for t in queues["teams"]]
    cfg = stack_config_with("dev", storage=json.dumps(storage), queues=queues)
    return program.run("dev", config=cfg)


@pytest.mark.parametrize("storage,source", [
    ({"nfs": {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}, "size": "100Gi"},
     lambda ns: {"nfs": {"server": "192.168.49.1", "path": f"/srv/nfs/kubedata/teams/{ns}"}}),
    ({"hostPath": "/data/gpu-cluster-shared", "size": "50Gi"},
     lambda ns: {"hostPath": {"path": f"/data/gpu-cluster-shared/teams/{ns}", "type": "DirectoryOrCreate"}}),
])
def test_static_storage_gives_each_team_a_volume_of_its_own_directory(storage, source) -> None:
    plan = _dev_plan(storage)
    volumes = {r.inputs["metadata"]["name"]: r for r in plan.of_type(PV)}
    paths = set()
    for team, ns in TEAMS.items():
        (claim,) = _of(plan, PVC, ns)
        volume = volumes[team_storage.volume_name(ns)]
        spec = volume.inputs["spec"]
        kind = next(iter(source(ns)))
        assert spec[kind] == source(ns)[kind]
        paths.add(json.dumps(spec[kind]))
        # Bound both ways: only the team's claim takes the volume, and the claim only it.
        assert spec["claimRef"] == {"namespace": ns, "name": CLAIM_NAME}
        assert spec["storageClassName"] == "" == claim.inputs["spec"]["storageClassName"]
        assert claim.inputs["spec"]["volumeName"] == volume.inputs["metadata"]["name"]
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        assert volume.urn in claim.dependencies
        for r in (volume, claim):
            _strict({"apiVersion": "v1", "kind": r.type.rsplit(":", 1)[-1], **r.inputs})
        assert team in plan.outputs["queues"] and ns in plan.outputs["queues"][team]["storage"]
    assert len(paths) == len(TEAMS)  # no two teams share a directory, none the export's root
    if "nfs" in storage:
        assert all(volumes[team_storage.volume_name(ns)].inputs["spec"]["mountOptions"] == ["nfsvers=4.1", "hard"]
                   for ns in TEAMS.values())


def test_on_gke_a_team_gets_a_subdirectory_of_the_filestore_share() -> None:
    """gke's share is a static Filestore volume: the team's volume is its subdirectory of the same
    instance (the mocks' address), NFSv3 as Filestore serves it."""
    plan = program.run("gke", config=stack_config_with("gke", queues=json.loads(_team_queues())))
    (training,) = [r for r in plan.of_type(PV) if r.inputs["spec"]["claimRef"]["namespace"] == "training"]
    for team, ns in TEAMS.items():
        (claim,) = _of(plan, PVC, ns)
        (volume,) = [r for r in plan.of_type(PV) if r.inputs["metadata"]["name"] == claim.inputs["spec"]["volumeName"]]
        spec = volume.inputs["spec"]
        assert spec["nfs"] == {"server": training.inputs["spec"]["nfs"]["server"], "path": f"/shared/teams/{ns}"}
        assert spec["mountOptions"] == training.inputs["spec"]["mountOptions"] == ["hard", "nfsvers=3"]
        assert spec["claimRef"] == {"namespace": ns, "name": CLAIM_NAME}
        for r in (volume, claim):
            _strict({"apiVersion": "v1", "kind": r.type.rsplit(":", 1)[-1], **r.inputs})
        assert plan.outputs["queues"][team]["storage"].startswith(f"{ns}/{CLAIM_NAME}: teams/{ns} of the NFS export /shared")


def test_on_the_default_class_a_team_claim_waits_for_its_first_pod() -> None:
    v = TeamVolumes(size="50Gi", default_class=True)
    pvc = team_storage.claim_manifest(v, "team-vision")
    assert "storageClassName" not in pvc["spec"] and team_storage.volume_manifest(v, "team-vision") is None
    assert pvc["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    _strict(pvc)
