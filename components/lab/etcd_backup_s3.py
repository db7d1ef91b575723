"""EtcdBackupS3: every control plane ships each scheduled snapshot, encrypted on the host, to an
S3-compatible bucket (etcdBackup.s3; docs/operations/etcd-backup.md, "Off the host: an S3 bucket").

One step per control plane installs the client (components/lab/etcd_s3_client.py, as
/usr/local/sbin/gpu-cluster-etcd-s3) and its root-only JSON config; the config holds the S3 credentials
and the encryption key, so it travels on stdin as a Pulumi secret and the step logs nothing. The
snapshot script (host_steps/etcd/snapshot.sh) runs `gpu-cluster-etcd-s3 upload` after each snapshot; a
failed upload fails the run (etcd_backup_last_run_success 0, the alert).
The snapshot the first control plane takes before a Kubernetes upgrade goes up through the same
client (`upload-pre-upgrade`, host_steps/upgrade/kubeadm_upgrade_apply.sh), before kubeadm runs;
ControlPlaneArgs.etcd_s3 tells that step the client is there.

Why every control plane uploads its own snapshots: a cluster that lost its first control plane still
has the others' copies, and each member's names carry its node name, so their retentions never meet.

Large snapshots go up as multipart uploads, aborted on failure; a private CA (caBundle) travels in the
config file and is the client's only trust anchor; addressing is path-style or virtual-hosted.

Does not manage: the bucket (created by you, ideally with versioning or object lock, so that these
credentials cannot erase the history, and a lifecycle rule AbortIncompleteMultipartUpload for an upload
whose abort failed too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
from pulumi_command import remote

from components.lab import scripts
from components.lab.etcd_backup import S3_CLIENT_PATH, here_document
from components.lab.host_steps import fill
from config.etcd_backup_s3 import ACCESS_KEY_ID, ENCRYPTION_KEY, SECRET_ACCESS_KEY, EtcdBackupS3Config

CLIENT_PATH = S3_CLIENT_PATH
CONFIG_PATH = "/etc/gpu-cluster/etcd-backup-s3.json"
CLIENT_SOURCE = Path(__file__).resolve().parent / "etcd_s3_client.py"


def client_script() -> str:
    return CLIENT_SOURCE.read_text(encoding="utf-8")


def client_config(s3: EtcdBackupS3Config, node: str, secrets: Mapping[str, str]) -> str:
    """The client's config file (etcd_s3_client.py): the bucket, this member's name and retention,
    the credentials and the encryption key."""
    return json.dumps({
        "endpoint": s3.endpoint, "bucket": s3.bucket, "prefix": s3.prefix, "region": s3.region, "node": node,
        "retain": s3.retain, "retainDays": s3.retain_days, "caBundle": s3.ca_bundle, "addressing": s3.addressing,
        "accessKeyId": secrets[ACCESS_KEY_ID].strip(), "secretAccessKey": secrets[SECRET_ACCESS_KEY].strip(),
        # Without the newline `pulumi config set ... < file` may keep: the same passphrase a person types.
        "encryptionKey": secrets[ENCRYPTION_KEY].strip(),
    }, indent=2) + "\n"


def install_script() -> str:
    return scripts._script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "etcd/s3_install.sh", CLIENT=here_document(client_script(), "GPU_CLUSTER_ETCD_S3_CLIENT"),
        CLIENT_PATH=CLIENT_PATH, CONFIG_PATH=CONFIG_PATH))


def remove_script() -> str:
    return scripts._script(fill("etcd/s3_remove.sh", CLIENT_PATH=CLIENT_PATH, CONFIG_PATH=CONFIG_PATH))  # noqa: SLF001


@dataclass(frozen=True)
class EtcdBackupS3Args:
    s3: EtcdBackupS3Config
    node: str
    address: str
    secrets: Mapping[str, pulumi.Output[str]]  # config.StackSecrets.etcd_backup: Pulumi secrets
    connection: remote.ConnectionArgs
    after: Sequence[pulumi.Resource]


class EtcdBackupS3(pulumi.ComponentResource):
    """Name it `<host>-etcd-backup-s3`; the backup install step depends on `install` (its first
    snapshot is uploaded)."""

    def __init__(self, name: str, args: EtcdBackupS3Args, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:EtcdBackupS3", name, None, opts)
        keys = (ACCESS_KEY_ID, SECRET_ACCESS_KEY, ENCRYPTION_KEY)
        values: pulumi.Output[list[str]] = pulumi.Output.all(*(args.secrets[k] for k in keys))
        config: pulumi.Output[str] = pulumi.Output.secret(values.apply(
            lambda given: client_config(args.s3, args.node, dict(zip(keys, given, strict=True)))))
        self.install = remote.Command(
            f"{name}-install",
            connection=args.connection,
            create=scripts.as_root(install_script()),
            update=scripts.as_root(install_script()),
            delete=scripts.as_root(remove_script()),
            stdin=config,
            logging=remote.Logging.NONE,
            # The host it runs on: a new one (name or address) replaces it, the old one cleaned first.
            triggers=[args.node, args.address],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after), delete_before_replace=True,
                                        additional_secret_outputs=["stdin", "stdout", "stderr"]),
        )
        self.register_outputs({})
