"""etcdBackup (lab): scheduled etcd snapshots on every control plane, kept on the host and, with
storage.provision, copied to the shared export (components/lab/etcd_backup.py; docs/operations/etcd-backup.md).

Defaults, and why: a snapshot every 6 hours, 28 kept (a week): a lost control plane loses at most 6
hours of objects, and a week of history covers a bad change noticed late. The alert fires when the
newest snapshot is older than twice the longest gap between two runs of the schedule (`interval_seconds`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronsim import CronSim
from pydantic import Field, field_validator

from config.cron import check_cron
from config.errors import Problems
from config.etcd_backup_s3 import EtcdBackupS3Config
from config.fields import Model, check_abs_path, host_dir_problem, volatile_dir_problem

# How far ahead the schedule's runs are read to find its longest gap: a year and a bit (a schedule
# that runs once a year still shows one gap), at most this many runs (every minute: two weeks).
_HORIZON = timedelta(days=800)
_MAX_RUNS = 20_000


class EtcdBackupConfig(Model):
    """Scheduled etcd snapshots on each control plane (a cron file on the host)."""

    enabled: bool = Field(default=True, description="Take scheduled etcd snapshots on every control plane.")
    schedule: str = Field(
        default="23 */6 * * *",
        description="Cron schedule, five numeric fields (read by the host's cron, in the host's time zone: UTC on "
                    "Ubuntu's server images).",
    )
    retain: int = Field(default=28, ge=1, le=1000,
                        description="Snapshots kept per control plane (and on the shared copy); older ones are deleted.")
    host_path: str = Field(
        default="/var/backups/gpu-cluster/etcd",
        description="Directory on each control plane for the snapshots (root only: they hold every Secret); not "
                    "under a system directory nor storage.exportPath, nor under /tmp, /var/tmp, /run or /dev/shm "
                    "(emptied at boot or writable by every user).",
    )
    copy_to_shared: bool = Field(
        default=True,
        description="With storage.provision: also copy each snapshot of the control plane serving the export (storage.server) to "
                    "<storage.exportPath>-etcd-backups, beside the export (not in it) and exported to the control "
                    "planes only; on the same host as the export, so not an off-host copy (etcdBackup.s3 is).",
    )

    s3: EtcdBackupS3Config | None = Field(
        default=None,
        description="Ship every snapshot of every control plane, encrypted on the host, to an S3-compatible bucket: "
                    "{endpoint, bucket, prefix, region, retain, retainDays}; the credentials and the encryption key are "
                    "the secrets etcdBackupS3AccessKeyId, etcdBackupS3SecretAccessKey, etcdBackupEncryptionKey.",
    )

    _schedule = field_validator("schedule")(classmethod(lambda cls, v: check_cron(v)))

    @field_validator("host_path")
    @classmethod
    def _host_path(cls, v: str) -> str:
        check_abs_path(v)
        if problem := volatile_dir_problem(v):  # the snapshots are the way back after a lost cluster
            raise ValueError(f"{problem}; keep the snapshots on disk, e.g. /var/backups/gpu-cluster/etcd")
        if problem := host_dir_problem(v):
            raise ValueError(problem.replace("e.g. /srv/gpu-cluster/shared", "e.g. /var/backups/gpu-cluster/etcd"))
        return v

    @property
    def interval_seconds(self) -> int:
        """The longest time between two runs of the schedule, in seconds."""
        start = datetime(2001, 1, 1, tzinfo=UTC)  # a Monday, not in a leap year
        runs = CronSim(self.schedule, start)
        previous, longest = next(runs), 0
        for _, run in zip(range(_MAX_RUNS), runs, strict=False):
            longest = max(longest, int((run - previous).total_seconds()))
            previous = run
            if run - start > _HORIZON:
                break
        return longest


def etcd_backup_problems(backup: EtcdBackupConfig, export_path: str | None) -> Problems:
    """The backup directory against the NFS export this program serves (storage.provision), which
    every node mounts read-write: snapshots hold every Secret of the cluster."""
    if not backup.enabled or export_path is None:
        return []
    path = backup.host_path
    if path == export_path or path.startswith(export_path + "/") or export_path.startswith(path + "/"):
        return [("etcdBackup.hostPath", f"{path} overlaps storage.exportPath {export_path}, which every node mounts; "
                                        "use a directory outside it, e.g. /var/backups/gpu-cluster/etcd")]
    return []
