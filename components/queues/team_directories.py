"""The teams' directories on a static NFS export (dev storage.nfs, gke's Filestore share): a one-shot
Job that makes `teams/<namespace>` for every team before any team's volume is registered.

Why a Job: a team's PersistentVolume is the export's subdirectory `<export>/teams/<namespace>`
(components/queues/team_storage.py), and NFS makes no directory on mount: without it a team's first
pod would stay in ContainerCreating ("No such file or directory"). The NFS CSI driver on lab makes
its own directories, and the kubelet makes a hostPath one (DirectoryOrCreate): no Job there.

Where it runs: the training namespace, mounting its claim `shared-data`, which is the export's root
on both platforms (dev: the PersistentVolume of `storage.nfs.path`; gke: the share `/shared`). The
kubelet mounts NFS from the node, so the pod needs no network and no NetworkPolicy opens any.
Kueue leaves it alone: it carries no queue label and Kueue's manageJobsWithoutQueueName is off
(components/queues/kueue.py); it is still created after Kueue's release, whose webhooks answer for
every Job of the training namespace.

The pod runs as root, with nothing else: a Filestore share's root is rwxr-xr-x, root's, exported
no_root_squash (cloud.google.com/filestore/docs/access-control: "only root users on connected
clients have read/write access"), so only uid 0 may create `teams` there; on the dev export
(docs/data.md: owned by nobody, exported no_root_squash) root may too, and under root squash root
becomes the anonymous uid, which works where that uid owns the export's root. Every capability is dropped: the NFS server checks the caller's uid, not its capabilities.
No privilege escalation, a read-only root filesystem, RuntimeDefault seccomp, no ServiceAccount
token: `baseline`, the training namespace's level (restricted would refuse uid 0).

Idempotent (mkdir -p; chmod sets the mode again), bounded (activeDeadlineSeconds, backoffLimit).
Its name carries a digest of its spec: a new team (or image) makes a new Job, which Pulumi creates
before deleting the old one, since a Job's pod template cannot be changed in place.

Does not manage: removing a deleted team's directory (its data stays, as its volume's Retain says).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE
from config.fields import DNS_LABEL
from config.scheduling_contract import addon_affinity, addon_tolerations

TEAMS_DIR = "teams"
EXPORT_MOUNT = "/export"
# Any uid of the team's pods may write: NFS ignores fsGroup (the kubelet cannot chown an NFS volume),
# and team pods run as whatever uid their image says. Teams are kept apart by each team's volume
# mounting its own directory only, not by this mode.
TEAM_DIRECTORY_MODE = "0777"
# `teams` itself: root's, readable and searchable by all (the kubelet mounts below it, root squashed or not).
TEAMS_DIRECTORY_MODE = "0755"
# The CUDA sample image the GPU-ready gate already runs with /bin/sh (components/ready_gate.py):
# Ubuntu's sh, mkdir and chmod, pinned, and no further image for the cluster to pull.
IMAGE = versions.CUDA_VECTORADD_IMAGE
JOB_PREFIX = "gpu-cluster-team-dirs"
LABELS = {"app.kubernetes.io/name": "gpu-cluster-team-directories", "app.kubernetes.io/part-of": "gpu-cluster"}
DEADLINE_SECONDS = 600
BACKOFF_LIMIT = 3


def script(namespaces: list[str]) -> str:
    """The shell the Job runs in the export's root (its working directory): each team's directory,
    made and set writable, whether or not it existed."""
    for ns in namespaces:
        if not DNS_LABEL.fullmatch(ns):  # config/queues.py refuses these first: never a path or a word of shell
            raise ValueError(f"team namespace {ns!r} is not an RFC 1123 label")
    teams = " ".join(shlex.quote(ns) for ns in sorted(set(namespaces)))
    return "\n".join([
        "set -eu",
        f"mkdir -p {TEAMS_DIR}",
        f"chmod {TEAMS_DIRECTORY_MODE} {TEAMS_DIR}",
        f"for ns in {teams}; do",
        f'  mkdir -p "{TEAMS_DIR}/$ns"',
        f'  chmod {TEAM_DIRECTORY_MODE} "{TEAMS_DIR}/$ns"',
        f'  ls -ld "{TEAMS_DIR}/$ns"',
        "done",
        "",
    ])


def _spec(namespaces: list[str]) -> dict[str, Any]:
    return {
        "backoffLimit": BACKOFF_LIMIT,
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "template": {
            "metadata": {"labels": dict(LABELS)},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": {
                    # root: see the module's docstring (the share's root is root's, mode 0755)
                    "runAsUser": 0,
                    "runAsGroup": 0,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "tolerations": addon_tolerations(),
                "affinity": addon_affinity(),
                "containers": [{
                    "name": "mkdir",
                    "image": IMAGE,
                    "command": ["sh", "-c", script(namespaces)],
                    "workingDir": EXPORT_MOUNT,
                    # The CUDA image sets NVIDIA_VISIBLE_DEVICES=all: no GPU for this pod on a node
                    # whose default runtime is NVIDIA's.
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                  "limits": {"cpu": "100m", "memory": "64Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "export", "mountPath": EXPORT_MOUNT}],
                }],
                "volumes": [{"name": "export", "persistentVolumeClaim": {"claimName": CLAIM_NAME}}],
            },
        },
    }


def job_name(spec: dict[str, Any]) -> str:
    """Changes with anything in the spec (the teams, the image): a new Job, never an in-place patch."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    return f"{JOB_PREFIX}-{digest}"


def job_manifest(namespaces: list[str]) -> dict[str, Any]:
    spec = _spec(namespaces)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name(spec), "namespace": TRAINING_NAMESPACE, "labels": dict(LABELS)},
            "spec": spec}


def team_directories_job(name: str, namespaces: list[str], after: list[pulumi.Resource],
                         opts: pulumi.ResourceOptions) -> k8s.batch.v1.Job:
    """Register the Job after `after` (the training claim, Kueue's release); Pulumi waits for it to
    complete, so whatever depends on it finds the directories."""
    manifest = job_manifest(namespaces)
    return k8s.batch.v1.Job(name, metadata=manifest["metadata"], spec=manifest["spec"],
                            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                                depends_on=after)))
