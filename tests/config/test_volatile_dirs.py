"""Directories emptied at boot or writable by every user (config/fields.py volatile_dir_problem) are
refused for etcdBackup.hostPath (the snapshots) and storage.exportPath (the shared data), naming the
key, before anything is registered; the facts the refusal rests on are read from this machine."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from config.fields import volatile_dir_problem
from tests.config.refusals import accepted, reported
from tests.conftest import lab_raw

VOLATILE = ["/tmp/gpu-cluster/etcd", "/tmp/x", "/var/tmp/gpu-cluster/shared", "/dev/shm/gpu-cluster",
            "/run/gpu-cluster/etcd", "/var/run/gpu-cluster", "/var/lock/gpu-cluster"]


@pytest.mark.parametrize("path", VOLATILE)
def test_etcd_backup_host_path_refused(path: str) -> None:
    reported(lab_raw(etcdBackup={"hostPath": path}), "etcdBackup.hostPath", "does not survive",
             "/var/backups/gpu-cluster/etcd")


@pytest.mark.parametrize("path", VOLATILE)
def test_storage_export_path_refused(path: str) -> None:
    reported(lab_raw(storage={"provision": True, "exportPath": path}), "storage.exportPath", "does not survive",
             "on disk")


@pytest.mark.parametrize("path", ["/tmp", "//tmp", "//tmp/x", "/tmp/../tmp/x", "/tmp/x/", "/tmp/./x", "///var//tmp/y",
                                  "/dev/shm", "/var/run/", "/run/../run/x"])
def test_every_spelling_is_caught(path: str) -> None:
    assert volatile_dir_problem(path), path


@pytest.mark.parametrize("path", ["/srv/gpu-cluster/shared", "/var/backups/gpu-cluster/etcd", "/tmpfs/x",
                                  "/srv/tmp/x", "/var/tmpx/y", "/runner/x", "/dev/shmx", "/tmp/../srv/x"])
def test_neighbours_are_not_caught(path: str) -> None:
    assert volatile_dir_problem(path) is None, path


def test_directories_on_disk_are_accepted() -> None:
    cfg = accepted(lab_raw(etcdBackup={"hostPath": "/var/backups/gpu-cluster/etcd"},
                           storage={"provision": True, "exportPath": "/srv/gpu-cluster/shared"}))
    assert cfg.etcd_backup.host_path == "/var/backups/gpu-cluster/etcd"  # type: ignore[attr-defined]


def test_the_reasons_hold_on_this_machine() -> None:
    """/tmp and /var/tmp are writable by every user, /dev/shm is a tmpfs, /var/run and /var/lock
    lead into /run: as on Ubuntu's and Debian's hosts the refusal speaks of."""
    for tree in ("/tmp", "/var/tmp"):
        mode = os.stat(tree).st_mode
        assert mode & stat.S_IWOTH and mode & stat.S_ISVTX, tree
    mounts = {fields[1]: fields[2] for fields in (line.split() for line in Path("/proc/mounts").read_text().splitlines())}
    assert mounts.get("/dev/shm") == "tmpfs"
    for link in ("/var/run", "/var/lock"):
        assert os.path.realpath(link).startswith("/run"), link
        assert volatile_dir_problem(os.path.realpath(link))
