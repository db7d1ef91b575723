"""The etcd backup scripts with representative settings, for the host-script checks (shellcheck,
every host step file read, no placeholder left: test_host_scripts.py, test_host_step_files.py)."""

from __future__ import annotations

from components.lab import etcd_backup
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
    }
