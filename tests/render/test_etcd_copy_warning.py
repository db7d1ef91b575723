"""A lab with one control plane and no off-host copy of etcd (etcdBackup.s3 unset) is said loudly by
the plan: on stderr and under the summary's Warnings (config/etcd_backup_s3.py single_copy_warning);
the NFS shared copy does not count, its export is served by the same host. Three control planes, or
etcdBackup.s3, and the warning goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from render import __main__ as render_main
from render import program
from tests.conftest import stack_config_with

_RUN = program.run
S3 = {"endpoint": "https://s3.example.com", "bucket": "lab-backups", "prefix": "lab-a/etcd/"}
S3_SECRETS = ("etcdBackupS3AccessKeyId", "etcdBackupS3SecretAccessKey", "etcdBackupEncryptionKey")


def _render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
            secrets: tuple[str, ...] = (), stack: str = "lab", **overrides: object) -> tuple[int, list[str], str]:
    values, secret_keys = stack_config_with(stack, **overrides)
    values.update({f"gpu-cluster:{k}": "[secret]" for k in secrets})
    config = (values, [*secret_keys, *(f"gpu-cluster:{k}" for k in secrets)])
    monkeypatch.setattr(render_main.program, "run", lambda s, **kw: _RUN(s, config=config))
    rc = render_main.main([stack, "--out", str(tmp_path / "out"), "--no-check"])
    err = capsys.readouterr().err
    warnings = [x for x in err.splitlines() if x.startswith("warning: ") and "etcd" in x]
    return rc, warnings, (tmp_path / "out" / "summary.md").read_text()


def test_one_control_plane_without_s3_is_said_in_the_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, (line,), summary = _render(monkeypatch, tmp_path, capsys, storage={"provision": True})
    assert rc == 0
    assert "one control plane (cp-1) and no off-host copy of etcd" in line
    assert "NFS shared copy is served by cp-1 too" in line and "etcdBackup.s3" in line
    assert "## Warnings" in summary and "no off-host copy of etcd" in summary


def test_without_a_provisioned_export_there_is_no_shared_copy_to_mention(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, (line,), _ = _render(monkeypatch, tmp_path, capsys, etcdBackup={"copyToShared": False})
    assert rc == 0 and "every etcd snapshot stays on cp-1;" in line and "NFS" not in line


def test_etcd_backup_off_is_said_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _, (line,), _ = _render(monkeypatch, tmp_path, capsys, etcdBackup={"enabled": False})
    assert "no snapshot is taken at all" in line


def test_s3_or_three_control_planes_silence_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc, warnings, _ = _render(monkeypatch, tmp_path / "s3", capsys, S3_SECRETS, etcdBackup={"s3": S3})
    assert rc == 0 and warnings == []
    rc, warnings, _ = _render(monkeypatch, tmp_path / "ha", capsys, stack="lab-ha")  # three control planes
    assert rc == 0 and warnings == []
