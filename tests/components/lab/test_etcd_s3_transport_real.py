"""The S3 client's transport against real gofakes3 (tests/components/lab/s3_servers.py): a multipart
upload that fails or is stopped by a signal part-way is aborted (ListMultipartUploads on the server
shows none left, so no parts stay billed), and a private CA (etcdBackup.s3.caBundle) is the only trust
anchor of the client's TLS, checked through a loopback TLS front with certificates made here by openssl;
addressing: virtual reaches gofakes3 with the bucket in the Host header."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from components.lab import etcd_backup_s3
from config.etcd_backup_s3 import EtcdBackupS3Config
from tests.components.lab.etcd_rehearsal import make_pki
from tests.components.lab.s3_servers import S3Front, gofakes3, open_uploads

BUCKET = "etcd-backups"
PREFIX = "lab-a/etcd/"
NODE = "cp-1"
PART = 64 * 1024

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


VIRTUAL_HOST = "s3.test:9000"  # never resolved: the client reaches it through the front as its http_proxy


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Path-style, and virtual-hosted for <bucket>.s3.test:9000 (gofakes3 -hostbucketbase)."""
    with gofakes3(tmp_path_factory.mktemp("gofakes3") / "log", BUCKET, "-hostbucketbase", VIRTUAL_HOST) as url:
        yield url


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    """Not an etcd snapshot: the client encrypts and ships any file by that name; ~5 parts of PART."""
    path = tmp_path / f"etcd-{NODE}-20261128T120000Z.db"
    path.write_bytes(os.urandom(5 * PART - 1000))
    return path


def _config(tmp: Path, endpoint: str, ca_bundle: str | None = None, name: str = "s3.json",
            addressing: Literal["path", "virtual"] = "path", written_endpoint: str | None = None) -> Path:
    s3 = EtcdBackupS3Config(endpoint=endpoint, bucket=BUCKET, prefix=PREFIX, ca_bundle=ca_bundle,
                            addressing=addressing)
    written = json.loads(etcd_backup_s3.client_config(s3, NODE, {
        "etcdBackupS3AccessKeyId": "AKIAEXAMPLE", "etcdBackupS3SecretAccessKey": "secret/with+chars",
        "etcdBackupEncryptionKey": "correct horse battery staple"}))
    path = tmp / name
    path.write_text(json.dumps({**written, "partBytes": PART, "endpoint": written_endpoint or written["endpoint"]}))
    path.chmod(0o600)
    return path


def _client(config: Path, *args: str) -> list[str]:
    return [sys.executable, str(etcd_backup_s3.CLIENT_SOURCE), *args]


def _env(config: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "GPU_CLUSTER_ETCD_S3_CONFIG": str(config), **extra}


def _run(config: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_client(config, *args), env=_env(config, **env), capture_output=True, text=True,
                          timeout=120, check=False)


def _began_and_aborted(front: S3Front) -> None:
    assert any(seen.startswith("POST ") and seen.endswith("?uploads=") for seen in front.seen), front.seen
    assert any(seen.startswith("DELETE ") and "uploadId=" in seen for seen in front.seen), front.seen


def test_a_failed_part_aborts_the_upload(upstream: str, snapshot: Path, tmp_path: Path) -> None:
    with S3Front(upstream, fail_part=3).running() as front:
        result = _run(_config(tmp_path, front.endpoint), "upload", str(snapshot))
    assert result.returncode == 1, result.stderr + result.stdout
    assert "partNumber&uploadId: HTTP 500 InternalError: the front failed this part" in result.stderr
    assert f"aborted the multipart upload of {PREFIX}{snapshot.name}.enc" in result.stderr
    _began_and_aborted(front)
    assert open_uploads(upstream, BUCKET) == []
    assert not list(tmp_path.glob(".*.part")), "the encrypted copy was left on the host"


def test_a_redirect_is_an_error_and_is_not_followed(upstream: str, tmp_path: Path) -> None:
    """S3 answers 307 for a bucket in another region: the client says so and sends nothing (no
    signature, no Host header of this endpoint) to the server the redirect names."""
    with S3Front(upstream).running() as elsewhere, \
            S3Front(upstream, redirect_to=elsewhere.endpoint).running() as front:
        result = _run(_config(tmp_path, front.endpoint), "check")
    assert result.returncode == 1, result.stderr + result.stdout
    assert f"HTTP 307 TemporaryRedirect: Please re-send this request to the specified temporary endpoint. " \
           f"(redirected to {elsewhere.endpoint}/{BUCKET}" in result.stderr, result.stderr
    assert front.seen and elsewhere.seen == [], elsewhere.seen


def test_a_completion_answered_200_with_an_error_fails_and_aborts(upstream: str, snapshot: Path,
                                                                  tmp_path: Path) -> None:
    with S3Front(upstream, fail_complete=True).running() as front:
        result = _run(_config(tmp_path, front.endpoint), "upload", str(snapshot))
    assert result.returncode == 1, result.stderr + result.stdout
    assert "?uploadId: InternalError: the front failed this part" in result.stderr
    _began_and_aborted(front)
    assert open_uploads(upstream, BUCKET) == []
    listed = _run(_config(tmp_path, upstream, name="direct.json"), "list")
    assert f"{snapshot.name}.enc" not in listed.stdout, listed.stdout


def test_a_signal_mid_upload_aborts_it(upstream: str, snapshot: Path, tmp_path: Path) -> None:
    with S3Front(upstream, hold_part=2).running() as front:
        config = _config(tmp_path, front.endpoint)
        client = subprocess.Popen(_client(config, "upload", str(snapshot)), env=_env(config),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert front.arrived.wait(60), "part 2 never arrived"
            assert open_uploads(upstream, BUCKET) == [f"{PREFIX}{snapshot.name}.enc"]  # begun, part 1 sent
            client.send_signal(signal.SIGTERM)
            _, stderr = client.communicate(timeout=60)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait(timeout=30)
    assert client.returncode == 128 + signal.SIGTERM, stderr
    assert "aborted the multipart upload" in stderr
    _began_and_aborted(front)
    assert open_uploads(upstream, BUCKET) == []


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two CAs, each with a server certificate for 127.0.0.1: the front shows `ours`."""
    root = tmp_path_factory.mktemp("pki")
    make_pki(root / "ours", ["127.0.0.1"])
    make_pki(root / "other", ["127.0.0.1"])
    return {"ours": root / "ours", "other": root / "other"}


@pytest.fixture(scope="module")
def tls_front(upstream: str, pki: dict[str, Path]) -> Iterator[S3Front]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["ours"] / "server.crt", pki["ours"] / "server.key")
    with S3Front(upstream, tls=context).running() as front:
        yield front


def test_the_ca_bundle_is_trusted_for_tls(tls_front: S3Front, pki: dict[str, Path], snapshot: Path,
                                          tmp_path: Path) -> None:
    config = _config(tmp_path, tls_front.endpoint, (pki["ours"] / "ca.crt").read_text())
    result = _run(config, "upload", str(snapshot))
    assert result.returncode == 0, result.stderr + result.stdout
    assert f"uploaded s3://{BUCKET}/{PREFIX}{snapshot.name}.enc" in result.stdout
    listed = _run(config, "list")
    assert listed.returncode == 0 and f"{PREFIX}{snapshot.name}.enc\t" in listed.stdout, listed.stderr


@pytest.mark.parametrize("trust", ["system store", "another CA"])
def test_without_the_ca_bundle_tls_is_refused(tls_front: S3Front, pki: dict[str, Path], tmp_path: Path,
                                              trust: str) -> None:
    bundle = None if trust == "system store" else (pki["other"] / "ca.crt").read_text()
    result = _run(_config(tmp_path, tls_front.endpoint, bundle), "check")
    assert result.returncode == 1, result.stdout
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr, result.stderr


def test_virtual_hosted_addressing_round_trips(upstream: str, snapshot: Path, tmp_path: Path) -> None:
    """addressing: virtual sends Host <bucket>.s3.test:9000 and /<key>; gofakes3 finds the bucket in the
    Host header. The model is given https (it refuses http off loopback); the file then says http so
    that urllib hands the requests to the front as its proxy, in place of DNS."""
    config = _config(tmp_path, f"https://{VIRTUAL_HOST}", addressing="virtual",
                     written_endpoint=f"http://{VIRTUAL_HOST}")
    with S3Front(upstream).running() as front:
        result = _run(config, "upload", str(snapshot), http_proxy=front.endpoint)
    assert result.returncode == 0, result.stderr + result.stdout
    key = f"{PREFIX}{snapshot.name}.enc"
    assert f"PUT http://{BUCKET}.{VIRTUAL_HOST}/{key}?partNumber=1&uploadId=" in "\n".join(front.seen), front.seen
    assert all(seen.split(" ")[1].startswith(f"http://{BUCKET}.{VIRTUAL_HOST}/") for seen in front.seen), front.seen
    # Read back path-style, straight from gofakes3: the same object, decrypted to the same bytes.
    fetched = tmp_path / "fetched.db"
    got = _run(_config(tmp_path, upstream, name="path.json"), "fetch", key, str(fetched))
    assert got.returncode == 0, got.stderr
    assert fetched.read_bytes() == snapshot.read_bytes()

