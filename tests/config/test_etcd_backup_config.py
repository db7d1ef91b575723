"""etcdBackup (config/etcd_backup.py): refusals name the key and exit 2 before anything is
registered; the alert's interval is the schedule's longest gap, as cronsim walks it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cronsim import CronSim

import config
from components import versions
from config.etcd_backup import EtcdBackupConfig
from tests.config.refusals import accepted, reported
from tests.conftest import lab_raw
from tests.render_cli import render_cli


def test_defaults_are_on_and_accepted() -> None:
    cfg = accepted(lab_raw())
    assert isinstance(cfg, config.LabStack)
    backup = cfg.etcd_backup
    assert backup.enabled and backup.retain == 28 and backup.interval_seconds == 6 * 3600


@pytest.mark.parametrize(("section", "key", "words"), [
    ({"schedule": "0 3 * *"}, "etcdBackup.schedule", ("five fields",)),
    ({"schedule": "@daily"}, "etcdBackup.schedule", ("0 0 * * *",)),
    ({"schedule": "61 * * * *"}, "etcdBackup.schedule", ("minute",)),
    ({"schedule": "0 0 30 2 *"}, "etcdBackup.schedule", ("never run",)),
    ({"retain": 0}, "etcdBackup.retain", ("greater than or equal to 1",)),
    ({"hostPath": "/etc/kubernetes/backups"}, "etcdBackup.hostPath", ("/etc", "system directory")),
    ({"hostPath": "/var/lib/etcd/backups"}, "etcdBackup.hostPath", ("/var/lib/etcd",)),
    ({"hostPath": "backups"}, "etcdBackup.hostPath", ("absolute path",)),
    ({"keep": 3}, "etcdBackup.keep", ()),
])
def test_bad_values_are_refused_naming_the_key(section: dict[str, object], key: str, words: tuple[str, ...]) -> None:
    reported(lab_raw(etcdBackup=section), key, *words)


def test_a_backup_directory_inside_the_shared_export_is_refused() -> None:
    raw = lab_raw(storage={"provision": True, "exportPath": "/srv/gpu-cluster/shared"},
                  etcdBackup={"hostPath": "/srv/gpu-cluster/shared/etcd"})
    reported(raw, "etcdBackup.hostPath", "storage.exportPath", "every node mounts")
    # Off: nothing to refuse.
    raw["etcdBackup"]["enabled"] = False
    accepted(raw)


@pytest.mark.parametrize("schedule", ["23 */6 * * *", "0 3 * * 1", "*/15 * * * *", "0 0,12 * * *", "30 2 1 * *",
                                      "0 0 * * 1-5"])
def test_the_interval_is_the_longest_gap_between_runs(schedule: str) -> None:
    runs = CronSim(schedule, datetime(2001, 1, 1, tzinfo=UTC))
    times = [next(runs) for _ in range(400)]
    longest = max(int((b - a).total_seconds()) for a, b in zip(times, times[1:], strict=False))
    assert EtcdBackupConfig(schedule=schedule).interval_seconds == longest
    assert EtcdBackupConfig(schedule="0 0 * * 1-5").interval_seconds == 3 * 24 * 3600  # Friday to Monday


def test_every_supported_minor_has_kubeadms_etcd() -> None:
    assert set(versions.ETCD_KUBEADM) == set(versions.KUBERNETES_SUPPORTED_MINORS)
    for tag in versions.ETCD_KUBEADM.values():
        major, minor = (int(x) for x in tag.split(".")[:2])
        # etcdutl (the restore tool) exists from 3.5 on.
        assert (major, minor) >= (3, 5), tag


def test_render_exits_2_naming_the_key(tmp_path) -> None:
    result = render_cli(tmp_path, "lab", {"etcdBackup": {"schedule": "0 3 * * 7"}})
    assert result.returncode == 2, result.stderr
    assert "gpu-cluster:etcdBackup.schedule" in result.stderr and "0-6" in result.stderr
    assert not (tmp_path / "out" / "plan.json").exists()
