"""gke.gcsData (config/gke_gcs_data.py): the training Job reads its data from a Cloud Storage bucket
through GKE's Cloud Storage FUSE CSI driver, as a Workload Identity of its own. Evaluated by the real
program under the recording mocks and rendered by `python -m render` with the whole-cluster check
(admission against the API's schemas, Pod Security of the training namespace, the scheduler):

  - the cluster's GcsFuseCsiDriver add-on, a Google service account with the bucket role on that
    bucket only, the training namespace's Kubernetes service account allowed to act as it
    (roles/iam.workloadIdentityUser) and annotated with it;
  - the training pods: the gke-gcsfuse/volumes annotation, that service account, the CSI ephemeral
    volume of the bucket mounted as the data directory (read-only by default), the Job waiting for
    the identity; the other mounts stay on the Filestore claim;
  - a bad bucket name, a bucket without training, and prepareData with a bucket refused naming the key;
  - the committed stack has none of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import config
from config import ConfigError
from render import program
from tests.config.test_gke_config import L4, gke_raw
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

BUCKET = "my-training-data"


def _plan(**data: Any) -> program.Plan:
    return program.run("gke", config=stack_config_with("gke", gke={"gcsData": {"bucket": BUCKET, **data}}))


def _train_pod(plan: program.Plan) -> tuple[program.Registration, dict[str, Any]]:
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.inputs["metadata"]["name"] == "train"]
    return job, job.inputs["spec"]["template"]


def test_the_training_pods_read_the_bucket_as_their_own_workload_identity():
    plan = _plan()
    (cluster,) = plan.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["addonsConfig"] == {"gcsFuseCsiDriverConfig": {"enabled": True}}
    (gsa,) = [a for a in plan.of_type("gcp:serviceaccount/account:Account") if a.name == "gcs-data-sa"]
    email = f"{gsa.inputs['accountId']}@my-gpu-project.iam.gserviceaccount.com"
    (reader,) = plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert reader.inputs == {"bucket": BUCKET, "role": "roles/storage.objectViewer", "member": f"serviceAccount:{email}"}
    (binding,) = plan.of_type("gcp:serviceaccount/iAMMember:IAMMember")
    assert binding.inputs["role"] == "roles/iam.workloadIdentityUser"
    assert binding.inputs["member"] == "serviceAccount:my-gpu-project.svc.id.goog[training/training-data]"
    (ksa,) = [s for s in plan.of_type("kubernetes:core/v1:ServiceAccount") if s.inputs["metadata"]["name"] == "training-data"]
    assert ksa.inputs["metadata"] == {"name": "training-data", "namespace": "training",
                                      "annotations": {"iam.gke.io/gcp-service-account": email}}
    job, template = _train_pod(plan)
    assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    pod = template["spec"]
    assert pod["serviceAccountName"] == "training-data"
    (bucket,) = [v for v in pod["volumes"] if "csi" in v]
    assert bucket["csi"] == {"driver": "gcsfuse.csi.storage.gke.io", "readOnly": True,
                             "volumeAttributes": {"bucketName": BUCKET, "mountOptions": "implicit-dirs"}}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/mnt/shared/data"] == {"name": bucket["name"], "mountPath": "/mnt/shared/data", "readOnly": True}
    assert mounts["/mnt/shared/checkpoints"]["name"] == "shared"  # checkpoints stay on Filestore
    assert {reader.urn, binding.urn, ksa.urn} <= set(job.dependencies)


def test_a_read_write_bucket_gets_the_object_user_role_and_a_writable_mount():
    plan = _plan(readOnly=False)
    (reader,) = plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert reader.inputs["role"] == "roles/storage.objectUser"
    _, template = _train_pod(plan)
    (bucket,) = [v for v in template["spec"]["volumes"] if "csi" in v]
    assert bucket["csi"]["readOnly"] is False


def test_the_plan_with_a_bucket_comes_up(tmp_path: Path, upstream_dir: Path):
    gke = {**json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"]), "gcsData": {"bucket": BUCKET}}
    result = render_cli(tmp_path, "gke", {"gke": gke}, upstream=upstream_dir)
    assert result.returncode == 0, result.stderr
    assert "would come up" in result.stdout


@pytest.mark.parametrize("gcs, training, key, words", [
    ({"bucket": "Not_A_Bucket"}, {}, "gke.gcsData.bucket", "is not a Cloud Storage bucket name"),
    ({"bucket": "goog-data"}, {}, "gke.gcsData.bucket", "not starting with 'goog'"),
    ({"bucket": BUCKET}, {"enabled": False}, "gke.gcsData.bucket", "does nothing without training.enabled"),
    ({"bucket": BUCKET}, {"prepareData": True, "dataset": "cifar10"}, "training.prepareData",
     "which gke.gcsData.bucket replaces"),
])
def test_refusals_name_the_key(gcs: dict[str, Any], training: dict[str, Any], key: str, words: str):
    raw = gke_raw(L4, gcsData=gcs)
    raw["training"] = {"enabled": True, "image": "registry.example.com/t:1", **training}
    with pytest.raises(ConfigError) as err:
        config.parse(raw)
    problems = dict(err.value.problems)
    assert words in problems[key], problems


def test_the_committed_stack_mounts_no_bucket():
    plan = program.run("gke")
    (cluster,) = plan.of_type("gcp:container/cluster:Cluster")
    assert "addonsConfig" not in cluster.inputs
    assert not plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    _, template = _train_pod(plan)
    assert "serviceAccountName" not in template["spec"]
