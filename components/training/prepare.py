"""PrepareData: one Job that downloads training.dataset into the shared claim's data mount before
the training job starts (training.prepareData with cifar10 or fashion-mnist).

The pod runs `python -m trainer.prepare --dataset <d> --data-dir <data mount>` from the workload
image (idempotent and checksummed: a second run finds the files and exits). The layout it leaves,
which is also what a user who copies the files in by hand (prepareData false) must provide:

  cifar10:        <data mount>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}
  fashion-mnist:  <data mount>/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz

The training namespace denies all egress but DNS (network_policy.py); this Job's pods alone get
HTTPS/HTTP to public addresses (`<job>-internet`), never to the cluster's own ranges. No GPU: it
prefers a node without one (the cluster add-ons' placement), so a GPU node's capacity stays for
training. `pulumi up` waits for the Job to complete (bounded by activeDeadlineSeconds), so the
training job that depends on it starts with the data in place.

Does not manage: the dataset's licence, mirrors or an HTTP proxy, datasets other than the two
public ones, deleting the files (they stay on the claim: Retain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.storage_contract import MOUNTS, TRAINING_NAMESPACE, SharedClaim
from components.training import launch
from components.training.network_policy import job_internet
from config.scheduling_contract import JOB_LABEL, addon_affinity, addon_tolerations

PREPARE_MODULE = "trainer.prepare"
CONTAINER = "prepare"
SHARED_VOLUME = "shared"
# Both datasets are under 200 MB; an hour covers a slow mirror and the image pull. Retrying a
# failed download twice is enough: the script resumes from what it verified.
DEADLINE_SECONDS = 3600
BACKOFF_LIMIT = 2
# `up` gives up a little after the Job's own deadline has failed it.
AWAIT_MINUTES = DEADLINE_SECONDS // 60 + 5
# Download, verify, unpack: one core, and memory for one archive member at a time.
RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
# What the program can download (config.training.Dataset.downloadable mirrors it).
DATASETS = ("cifar10", "fashion-mnist")
# Where each dataset lands under the data mount (docs/data.md).
LAYOUT = {"cifar10": "cifar-10-batches-py", "fashion-mnist": "fashion-mnist"}


@dataclass(frozen=True)
class PrepareDataArgs:
    image: str
    dataset: str  # one of DATASETS
    claim: SharedClaim
    # The cluster's own pod and Service ranges, where the platform knows them (lab): never "internet".
    cluster_cidrs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"PrepareData: dataset {self.dataset!r} is not one of {', '.join(DATASETS)}")


def prepare_command(dataset: str) -> list[str]:
    return ["python", "-m", PREPARE_MODULE, "--dataset", dataset, "--data-dir", MOUNTS["data"][1]]


def labels(job: str) -> dict[str, str]:
    return {JOB_LABEL: job, "app.kubernetes.io/part-of": "gpu-cluster-training",
            "app.kubernetes.io/component": "prepare-data"}


def job_manifest(job: str, args: PrepareDataArgs) -> dict[str, Any]:
    mounts = [MOUNTS["data"], MOUNTS["cache"]]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": args.image,
        "command": prepare_command(args.dataset),
        "env": [{"name": k, "value": v} for k, v in (("PYTHONUNBUFFERED", "1"), *launch.CACHE_ENV)],
        "resources": RESOURCES,
        "volumeMounts": [{"name": SHARED_VOLUME, "mountPath": path, "subPath": sub} for sub, path in mounts],
        # The image's own user (root in the trainer image, as the training pods: the files it
        # writes are theirs); nothing more than that user's default capabilities.
        "securityContext": {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # The download talks to the dataset's host only, never to the Kubernetes API: no token.
        "automountServiceAccountToken": False,
        "tolerations": addon_tolerations(),
        "affinity": addon_affinity(),
        "containers": [container],
        "volumes": [{"name": SHARED_VOLUME, "persistentVolumeClaim": {"claimName": args.claim.name}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "namespace": TRAINING_NAMESPACE, "labels": labels(job)},
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "completions": 1,
            "parallelism": 1,
            "template": {"metadata": {"labels": labels(job)}, "spec": pod},
        },
    }


class PrepareData(pulumi.ComponentResource):
    """The data preparation Job and the egress policy only its pods get."""

    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: PrepareDataArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:training:PrepareData", name, None, opts)
        internet = job_internet(name, args.cluster_cidrs)
        policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-internet", metadata=internet["metadata"], spec=internet["spec"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        manifest = job_manifest(name, args)
        self.job = k8s.batch.v1.Job(
            name,
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[policy, *args.claim.ready],
                # A Job's template is immutable: a new dataset or image is a new Job.
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{AWAIT_MINUTES}m", update=f"{AWAIT_MINUTES}m"),
            ),
        )
        self.register_outputs({
            "job": f"{TRAINING_NAMESPACE}/{name}",
            "dataset": args.dataset,
            "dataDir": f"{MOUNTS['data'][1]}/{LAYOUT[args.dataset]}",
        })
