"""GcsDataAccess: the Workload Identity the training pods read gke.gcsData.bucket with (config/gke_gcs_data.py
says why each piece): a Google service account holding the bucket role on that bucket only, the
Kubernetes service account of the training namespace allowed to act as it
(roles/iam.workloadIdentityUser, as Cluster Toolkit's modules/project/workload_identity_binding
binds them), and that Kubernetes service account, annotated iam.gke.io/gcp-service-account. The
training Job waits for all of them (storage_contract.BucketData.ready).

Does not manage: the bucket itself (it must exist), its location or retention, other buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.gke.node_identity import account_id
from components.storage_contract import TRAINING_NAMESPACE, BucketData
from config.gke_gcs_data import GkeGcsData

DATA_SERVICE_ACCOUNT = "training-data"  # the Kubernetes service account the training pods run as
WI_ANNOTATION = "iam.gke.io/gcp-service-account"


@dataclass(frozen=True)
class GcsDataAccessArgs:
    data: GkeGcsData
    project: str  # gcp:project (its Workload Identity pool is <project>.svc.id.goog)
    cluster_name: str
    namespace: k8s.core.v1.Namespace  # the training namespace


class GcsDataAccess(pulumi.ComponentResource):
    mount: BucketData

    def __init__(self, name: str, args: GcsDataAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:GcsDataAccess", name, None, opts)
        bucket = args.data.bucket
        assert bucket is not None  # stacks/gke.py builds this only with a bucket
        child = pulumi.ResourceOptions(parent=self)
        gsa = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=account_id(args.cluster_name, "data"), project=args.project,
            display_name=f"{args.cluster_name} training data ({bucket})", opts=child,
        )
        member = gsa.email.apply(lambda email: f"serviceAccount:{email}")
        reader = gcp.storage.BucketIAMMember(f"{name}-bucket", bucket=bucket, role=args.data.role, member=member,
                                             opts=child)
        binding = gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity", service_account_id=gsa.name, role="roles/iam.workloadIdentityUser",
            member=f"serviceAccount:{args.project}.svc.id.goog[{TRAINING_NAMESPACE}/{DATA_SERVICE_ACCOUNT}]",
            opts=child,
        )
        ksa = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=DATA_SERVICE_ACCOUNT, namespace=TRAINING_NAMESPACE,
                                                annotations={WI_ANNOTATION: gsa.email}),
            # No API token in the pods: the GCS FUSE CSI driver does not read it. Its CSIDriver asks kubelet for
            # a token of this account (tokenRequests, audience <project>.svc.id.goog, requiresRepublish) and
            # gets it in NodePublishVolume's volume context (GoogleCloudPlatform/gcs-fuse-csi-driver@5fcdc04a:
            # deploy/base/setup/csi_driver.yaml, pkg/csi_driver/node.go), and its e2e suite runs a pod with
            # automountServiceAccountToken false (test/e2e/testsuites/workloads.go).
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.namespace]),
        )
        self.mount = BucketData(bucket=bucket, read_only=args.data.read_only, service_account=DATA_SERVICE_ACCOUNT,
                                ready=(reader, binding, ksa))
        self.register_outputs({"bucket": bucket, "serviceAccount": gsa.email, "role": args.data.role})
