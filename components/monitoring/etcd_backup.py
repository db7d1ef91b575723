"""The monitoring side of the lab's etcd snapshots (components/lab/etcd_backup.py): node-exporter's
textfile collector reads the metrics each snapshot run writes on its control plane, and the rule
group GROUP alerts when they say the backups stopped.

node-exporter (kube-prometheus-stack's subchart) mounts the host's "/" at /host/root already
(hostRootFsMount); its textfile collector is pointed at the snapshot's metrics directory there.
The chart's `extraArgs` is a list, which Helm replaces whole: the chart's own two filesystem
arguments are repeated here (a test compares them with the chart's defaults).

Metrics, one series per control plane (label etcd_member, the node name):
  etcd_backup_last_success_timestamp_seconds  the newest snapshot's time (0: none yet)
  etcd_backup_last_size_bytes                 its size
  etcd_backup_last_run_success                1 if the last run succeeded, else 0
  etcd_backup_s3_last_upload_timestamp_seconds  with etcdBackup.s3: the last upload's time (0: none yet)
"""

from __future__ import annotations

from typing import Any

from components.lab.etcd_backup import NODE_EXPORTER_TEXTFILE_DIR
from components.monitoring.alerts import _alert

GROUP = "gpu-cluster.etcd-backup"
LAST_SUCCESS = "etcd_backup_last_success_timestamp_seconds"
LAST_SIZE = "etcd_backup_last_size_bytes"
LAST_RUN_OK = "etcd_backup_last_run_success"
LAST_UPLOAD = "etcd_backup_s3_last_upload_timestamp_seconds"  # with etcdBackup.s3 only
TOO_OLD_ALERT = "EtcdBackupTooOld"
MISSING_ALERT = "EtcdBackupMissing"
S3_TOO_OLD_ALERT = "EtcdBackupS3TooOld"
# The chart's default node-exporter arguments (values.yaml prometheus-node-exporter.extraArgs).
_CHART_NODE_EXPORTER_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|"
    "fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|"
    "sysfs|tracefs|erofs)$",
)


def node_exporter_values() -> dict[str, Any]:
    """kube-prometheus-stack's `prometheus-node-exporter` keys: the textfile directory added."""
    return {"extraArgs": [*_CHART_NODE_EXPORTER_ARGS, f"--collector.textfile.directory={NODE_EXPORTER_TEXTFILE_DIR}"]}


def _duration(seconds: int) -> str:
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def rule_group(interval_seconds: int) -> dict[str, Any]:
    """EtcdBackupTooOld past twice the schedule's longest gap; EtcdBackupMissing when a control
    plane reports no backup metrics at all for as long."""
    limit = 2 * interval_seconds
    return {"name": GROUP, "rules": [
        _alert(
            TOO_OLD_ALERT,
            # 0 (no snapshot yet) counts as very old.
            f"time() - {LAST_SUCCESS} > {limit}",
            "10m", "warning",
            "The newest etcd snapshot of a control plane is too old",
            "The newest etcd snapshot on {{ $labels.etcd_member }} is {{ $value | humanizeDuration }} old, more than "
            f"twice the schedule's interval ({_duration(limit)}); {LAST_RUN_OK} says whether the last run failed.",
        ),
        _alert(
            MISSING_ALERT,
            f'count(kube_node_role{{role="control-plane"}}) > (count({LAST_SUCCESS}) or vector(0))',
            _duration(limit), "warning",
            "A control plane reports no etcd backup metrics",
            "Fewer control planes report etcd backup metrics than there are control planes, for "
            f"{_duration(limit)}: a backup job is not installed, or node-exporter does not read "
            f"{NODE_EXPORTER_TEXTFILE_DIR}.",
        ),
        _alert(
            S3_TOO_OLD_ALERT,
            # Only members with etcdBackup.s3 have the series; 0 (never uploaded) counts as very old.
            f"time() - {LAST_UPLOAD} > {limit}",
            "10m", "warning",
            "A control plane's newest etcd snapshot in the S3 bucket is too old",
            "{{ $labels.etcd_member }} last uploaded an etcd snapshot to etcdBackup.s3 {{ $value | humanizeDuration }} "
            f"ago, more than twice the schedule's interval ({_duration(limit)}): the off-host copy is stale.",
        ),
    ]}
