"""The etcd backup scripts with representative settings, for the host-script checks (shellcheck,
every host step file read, no placeholder left: test_host_scripts.py, test_host_step_files.py)."""

from __future__ import annotations

import dataclasses

from components.lab import etcd_backup, etcd_backup_s3
from config import LabStack
from stacks.lab import etcd_backup_settings


def etcd_backup_cases(cfg: LabStack) -> dict[str, str]:
    first = etcd_backup_settings(cfg, cfg.control_planes[0])
    assert first is not None
    return {
        "etcd_snapshot": etcd_backup.snapshot_script(first),
        "etcd_backup_install": etcd_backup.install_script(first),
        "etcd_backup_remove": etcd_backup.remove_script(),
        "etcd_restore": etcd_backup.restore_script(first),
        # etcdBackup.s3: the snapshot that uploads, of a third member (its cron entry waits), and the client's steps
        "etcd_snapshot_s3": etcd_backup.snapshot_script(dataclasses.replace(first, s3=True, member_index=2)),
        "etcd_backup_s3_install": etcd_backup_s3.install_script(),
        "etcd_backup_s3_remove": etcd_backup_s3.remove_script(),
    }
