"""etcdBackup.s3 (config/etcd_backup_s3.py): each bad value refused naming gpu-cluster:etcdBackup.s3.<key>
before anything is registered, and the three secrets required with it, refused without it."""

from __future__ import annotations

from typing import Any

import pytest

import config
from tests.components.lab.etcd_rehearsal import make_pki
from tests.config.refusals import accepted, problems, reported
from tests.conftest import lab_raw

SECRETS = {"sshPrivateKey", "etcdBackupS3AccessKeyId", "etcdBackupS3SecretAccessKey", "etcdBackupEncryptionKey"}
GOOD = {"endpoint": "https://s3.example.com", "bucket": "lab-backups", "prefix": "lab-a/etcd/"}


def _raw(**s3: Any) -> dict[str, Any]:
    return lab_raw(etcdBackup={"s3": {**GOOD, **s3}})


def test_a_complete_section_is_accepted_with_defaults() -> None:
    cfg = accepted(_raw(endpoint="https://minio.lab:9000/"), SECRETS)
    assert isinstance(cfg, config.LabStack)
    s3 = cfg.etcd_backup.s3
    assert s3 is not None and s3.endpoint == "https://minio.lab:9000" and s3.region == "us-east-1"
    assert s3.retain == 28 and s3.retain_days is None
    accepted(_raw(endpoint="http://127.0.0.1:9000"), SECRETS)  # loopback: http allowed


@pytest.mark.parametrize(("s3", "key", "words"), [
    ({"endpoint": "http://s3.example.com"}, "etcdBackup.s3.endpoint", ("https", "loopback")),
    ({"endpoint": "s3.example.com"}, "etcdBackup.s3.endpoint", ("https://host",)),
    ({"endpoint": "https://s3.example.com/lab-backups"}, "etcdBackup.s3.endpoint", ("no path",)),
    ({"endpoint": "https://id:key@s3.example.com"}, "etcdBackup.s3.endpoint", ("etcdBackupS3SecretAccessKey",)),
    ({"endpoint": "https://s3.example.com:99999"}, "etcdBackup.s3.endpoint", ("port",)),
    ({"endpoint": "https://s3.example.com\n; rm -rf /"}, "etcdBackup.s3.endpoint", ("control character",)),
    ({"endpoint": "https://s3.example.com;reboot"}, "etcdBackup.s3.endpoint", ("DNS name or an address",)),
    ({"bucket": "Lab_Backups"}, "etcdBackup.s3.bucket", ("bucket name",)),
    ({"bucket": "ab"}, "etcdBackup.s3.bucket", ("3 to 63",)),
    ({"prefix": "lab-a/etcd"}, "etcdBackup.s3.prefix", ("ending in '/'",)),
    ({"prefix": "/lab-a/"}, "etcdBackup.s3.prefix", ("no leading",)),
    ({"prefix": "lab a/"}, "etcdBackup.s3.prefix", ("letters, digits",)),
    ({"prefix": "../"}, "etcdBackup.s3.prefix", ("'..'",)),
    ({"region": "US East"}, "etcdBackup.s3.region", ("us-east-1",)),
    ({"retain": 0}, "etcdBackup.s3.retain", ("greater than or equal to 1",)),
    ({"retainDays": 0}, "etcdBackup.s3.retainDays", ("greater than or equal to 1",)),
    ({"secretAccessKey": "x"}, "etcdBackup.s3.secretAccessKey", ()),
])
def test_bad_values_are_refused_naming_the_key(s3: dict[str, Any], key: str, words: tuple[str, ...]) -> None:
    reported(_raw(**s3), key, *words, secrets=SECRETS)


def test_the_required_keys_are_named() -> None:
    for missing in GOOD:
        raw = lab_raw(etcdBackup={"s3": {k: v for k, v in GOOD.items() if k != missing}})
        reported(raw, f"etcdBackup.s3.{missing}", secrets=SECRETS)


@pytest.mark.parametrize("secret", sorted(SECRETS - {"sshPrivateKey"}))
def test_each_secret_is_required_with_s3(secret: str) -> None:
    reported(_raw(), secret, "etcdBackup.s3 needs it as a secret", f"--secret gpu-cluster:{secret}",
             secrets=SECRETS - {secret})


def test_the_secrets_without_s3_are_refused_and_never_parsed_as_plaintext() -> None:
    reported(lab_raw(), "etcdBackupEncryptionKey", "etcdBackup.s3 is not", secrets=SECRETS)
    found = problems({**_raw(), "etcdBackupS3SecretAccessKey": "plain"}, SECRETS - {"etcdBackupS3SecretAccessKey"})
    assert ("etcdBackupS3SecretAccessKey", "must be set as a secret (`pulumi config set --secret ...`)") in found
    assert all("plain" not in message for _, message in found)


def test_a_dev_stack_refuses_them_as_lab_keys() -> None:
    raw = {"platform": "dev", "kubeContext": "kind-dev"}
    reported(raw, "etcdBackupEncryptionKey", "lab key", secrets={"etcdBackupEncryptionKey"})


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA certificate and its key, made by openssl (the etcd rehearsal's PKI)."""
    root = tmp_path_factory.mktemp("ca") / "pki"
    make_pki(root, [])
    return {"cert": (root / "ca.crt").read_text(), "key": (root / "ca.key").read_text()}


def test_a_ca_bundle_of_certificates_is_accepted(pem: dict[str, str]) -> None:
    bundle = f"# Issuer: CN=lab-s3-ca\n{pem['cert']}\n{pem['cert']}"
    cfg = accepted(_raw(caBundle=bundle, addressing="virtual"), SECRETS)
    assert isinstance(cfg, config.LabStack) and cfg.etcd_backup.s3 is not None
    assert cfg.etcd_backup.s3.ca_bundle == pem["cert"] * 2  # the blocks alone, each ending in a newline
    assert cfg.etcd_backup.s3.addressing == "virtual"


@pytest.mark.parametrize(("bundle", "words"), [
    ("{cert}{key}", ("private key",)),
    ("not a certificate", ("PEM certificates", "no PEM block")),
    ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", ("found PUBLIC KEY",)),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", ("certificate 1 of 1 does not parse",)),
])
def test_a_bad_ca_bundle_is_refused_naming_the_key(pem: dict[str, str], bundle: str, words: tuple[str, ...]) -> None:
    reported(_raw(caBundle=bundle.format(**pem)), "etcdBackup.s3.caBundle", *words, secrets=SECRETS)


def test_a_ca_bundle_needs_https(pem: dict[str, str]) -> None:
    reported(_raw(endpoint="http://127.0.0.1:9000", caBundle=pem["cert"]), "etcdBackup.s3.caBundle", "http",
             secrets=SECRETS)


@pytest.mark.parametrize(("s3", "words"), [
    ({"addressing": "vhost"}, ("'path' or 'virtual'",)),
    ({"addressing": "virtual", "endpoint": "https://10.0.0.5:9000"}, ("DNS name",)),
    ({"addressing": "virtual", "endpoint": "http://localhost:9000"}, ("DNS name",)),
    ({"addressing": "virtual", "bucket": "lab.backups"}, ("'.'", "wildcard certificate")),
])
def test_virtual_addressing_is_refused_where_it_cannot_work(s3: dict[str, Any], words: tuple[str, ...]) -> None:
    reported(_raw(**s3), "etcdBackup.s3.addressing", *words, secrets=SECRETS)
