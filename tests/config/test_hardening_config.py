"""gpu-cluster:hardening (config/hardening.py): secure by default, each feature off by its own key,
bad values refused naming the key (exit 2 through the real program, before anything is registered)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.config.refusals import accepted, reported
from tests.conftest import PROJECT_DIR, lab_raw

NS = "gpu-cluster"


def test_everything_is_on_by_default() -> None:
    h = accepted(lab_raw()).hardening  # type: ignore[union-attr]
    assert h.audit_log.enabled and h.secrets_encryption.enabled and h.verify_apt_keys
    assert h.secrets_encryption.keys == ("key-1",)
    assert not h.kubelet.read_only_port and not h.kubelet.anonymous_auth


def test_each_feature_has_its_own_off_key() -> None:
    h = accepted(lab_raw(hardening={
        "auditLog": {"enabled": False}, "secretsEncryption": {"enabled": False},
        "kubelet": {"readOnlyPort": True, "anonymousAuth": True}, "verifyAptKeys": False,
    })).hardening  # type: ignore[union-attr]
    assert not h.audit_log.enabled and not h.secrets_encryption.enabled and not h.verify_apt_keys
    assert h.kubelet.read_only_port and h.kubelet.anonymous_auth


def test_a_rotation_names_two_keys() -> None:
    h = accepted(lab_raw(hardening={"secretsEncryption": {"keys": ["key-2", "key-1"]}})).hardening  # type: ignore[union-attr]
    assert h.secrets_encryption.keys == ("key-2", "key-1")


@pytest.mark.parametrize(("hardening", "key", "words"), [
    ({"secretsEncryption": {"keys": []}}, "hardening.secretsEncryption.keys", ("1 to 3",)),
    ({"secretsEncryption": {"keys": ["a", "b", "c", "d"]}}, "hardening.secretsEncryption.keys", ("1 to 3",)),
    ({"secretsEncryption": {"keys": ["key-1", "key-1"]}}, "hardening.secretsEncryption.keys", ("twice",)),
    ({"secretsEncryption": {"keys": ["Key_1"]}}, "hardening.secretsEncryption.keys", ("RFC 1123",)),
    ({"auditLog": {"maxAgeDays": 0}}, "hardening.auditLog.maxAgeDays", ()),
    ({"auditLog": {"maxBackups": 0}}, "hardening.auditLog.maxBackups", ()),
    ({"auditLog": {"maxSizeMb": -1}}, "hardening.auditLog.maxSizeMb", ()),
    ({"kubelet": {"readOnlyPort": "maybe"}}, "hardening.kubelet.readOnlyPort", ()),
    ({"auditlog": {"enabled": False}}, "hardening.auditlog", ()),
])
def test_bad_values_are_refused_naming_the_key(hardening: dict[str, Any], key: str, words: tuple[str, ...]) -> None:
    reported(lab_raw(hardening=hardening), key, *words)


def test_the_program_exits_2_naming_the_key(tmp_path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "Pulumi.lab.yaml"):
        shutil.copy(PROJECT_DIR / name, project / name)
    for name in ("config", "components", "stacks", "render"):
        (project / name).symlink_to(PROJECT_DIR / name, target_is_directory=True)
    stack = yaml.safe_load((project / "Pulumi.lab.yaml").read_text())
    stack["config"][f"{NS}:hardening"] = {"secretsEncryption": {"keys": ["key-1", "key-1"]}}
    (project / "Pulumi.bad.yaml").write_text(yaml.safe_dump(stack))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(project)}
    env.pop("PULUMI_CONFIG", None)
    result = subprocess.run([sys.executable, "-m", "render", "bad", "--out", str(out)], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr
    assert f"{NS}:hardening.secretsEncryption.keys:" in result.stderr and "twice" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
