"""The training data in a Cloud Storage bucket (gke.gcsData): the training Job's data mount is the
bucket, through GKE's Cloud Storage FUSE CSI driver, with a Workload Identity the pods run as.

GKE, "Access Cloud Storage buckets with the Cloud Storage FUSE CSI driver"
(cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/cloud-storage-fuse-csi-driver):
the cluster's GcsFuseCsiDriver add-on, a CSI ephemeral volume of driver gcsfuse.csi.storage.gke.io
naming the bucket, the pod annotation gke-gcsfuse/volumes: "true" (GKE's webhook then injects the
FUSE sidecar), and the pod's Kubernetes service account allowed to read the bucket through Workload
Identity. The identity: a Google service account holding the bucket role, which the Kubernetes
service account may act as (roles/iam.workloadIdentityUser for
serviceAccount:<project>.svc.id.goog[<namespace>/<ksa>], and the KSA annotated
iam.gke.io/gcp-service-account), as Cluster Toolkit's modules/project/workload_identity_binding does.
The bucket role: roles/storage.objectViewer when read-only, roles/storage.objectUser otherwise.

Refused, naming the key: a bucket that is no Cloud Storage bucket name; gcsData.bucket without
training.enabled (nothing would mount it); training.prepareData with a bucket (the download goes to
the Filestore's data directory, which the bucket replaces in the training pods).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, empty_to_none

# Bucket names: 3-63 characters of a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit
# (Cloud Storage, "Bucket naming guidelines"); names with dots (domain-verified) are not taken here.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]")
READ_ROLE, WRITE_ROLE = "roles/storage.objectViewer", "roles/storage.objectUser"


class GkeGcsData(Model):
    bucket: str | None = Field(default=None, description="A Cloud Storage bucket mounted as the training pods' data "
                                                         "directory (GCS FUSE CSI driver, Workload Identity); unset: "
                                                         "the Filestore's.")
    read_only: bool = Field(default=True, description="Mount the bucket read-only (roles/storage.objectViewer); false: "
                                                      "read-write (roles/storage.objectUser).")

    _optional = field_validator("bucket", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str | None) -> str | None:
        if v is not None and (not _BUCKET.fullmatch(v) or v.startswith("goog")):
            raise ValueError(f"{v[:70]!r} is not a Cloud Storage bucket name (3-63 characters: a-z, 0-9, '-', '_', "
                             "starting and ending with a letter or digit, not starting with 'goog')")
        return v

    @property
    def role(self) -> str:
        return READ_ROLE if self.read_only else WRITE_ROLE


def gcs_data_problems(data: GkeGcsData, training_enabled: bool, prepare_data: bool) -> Problems:
    if data.bucket is None:
        return []
    if not training_enabled:
        return [("gke.gcsData.bucket", "does nothing without training.enabled: only the training Job mounts it")]
    if prepare_data:
        return [("training.prepareData", "downloads into the Filestore's data directory, which gke.gcsData.bucket "
                                         "replaces in the training pods: copy the dataset into the bucket instead "
                                         "(gcloud storage cp) and set prepareData false")]
    return []
