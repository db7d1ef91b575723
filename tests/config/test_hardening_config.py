"""gpu-cluster:hardening (config/hardening.py): secure by default, each feature off by its own key,
bad values refused naming the key (exit 2 through the real program, before anything is registered)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.config.refusals import accepted, reported
from tests.conftest import lab_raw
from tests.render_cli import render_cli

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
    out = tmp_path / "out"
    result = render_cli(tmp_path, "lab", {"hardening": {"secretsEncryption": {"keys": ["key-1", "key-1"]}}})
    assert result.returncode == 2, result.stderr
    assert f"{NS}:hardening.secretsEncryption.keys:" in result.stderr and "twice" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# writeUnencrypted and rewrittenWith (issue 30): the steps of a safe rotation or turning off


def test_the_safe_steps_are_accepted() -> None:
    def enc(**s: Any) -> Any:
        return accepted(lab_raw(hardening={"secretsEncryption": s})).hardening.secrets_encryption  # type: ignore[union-attr]

    assert enc().writer == "key-1" and enc().rewritten_with is None and not enc().write_unencrypted
    assert enc(keys=["key-2", "key-1"], rewrittenWith="key-2").writer == "key-2"
    assert enc(writeUnencrypted=True).writer == "identity"
    assert enc(writeUnencrypted=True, rewrittenWith="identity").rewritten_with == "identity"
    assert enc(enabled=False, rewrittenWith="identity").writer == ""


@pytest.mark.parametrize(("encryption", "words"), [
    ({"keys": ["key-1"], "rewrittenWith": "key-9"}, ("'key-9' is neither one of keys",)),
    # a key that only reads cannot be what every Secret was re-written with
    ({"keys": ["key-2", "key-1"], "rewrittenWith": "key-1"}, ("not what Secrets are written with now", "'key-2'")),
    ({"keys": ["key-1"], "rewrittenWith": "identity"}, ("not what Secrets are written with now",)),
    ({"keys": ["key-1"], "writeUnencrypted": True, "rewrittenWith": "key-1"}, ("'identity'",)),
])
def test_a_rewrite_claim_that_cannot_be_true_is_refused(encryption: dict[str, Any], words: tuple[str, ...]) -> None:
    reported(lab_raw(hardening={"secretsEncryption": encryption}), "hardening.secretsEncryption.rewrittenWith", *words)


def test_write_unencrypted_with_encryption_off_is_refused_as_inert() -> None:
    reported(lab_raw(hardening={"secretsEncryption": {"enabled": False, "writeUnencrypted": True}}),
             "hardening.secretsEncryption.writeUnencrypted", "does nothing with enabled false")


def test_a_key_may_not_be_named_like_the_unencrypted_provider() -> None:
    reported(lab_raw(hardening={"secretsEncryption": {"keys": ["identity"]}}), "hardening.secretsEncryption.keys",
             "unencrypted provider")
