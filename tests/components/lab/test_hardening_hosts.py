"""The hardening host steps run for real in the host sandbox (tests/hostsim.py):

  - control_plane_files writes the audit policy and the EncryptionConfiguration root only, a second
    run changes nothing, a rotation rewrites the file, a feature turned off leaves its file, the
    delete removes both;
  - apt_repo (lib/apt_repo.sh) with real GnuPG and real keys made here: the pinned key is
    installed, a key with another fingerprint (or one more key beside the pinned one) is refused
    with nothing installed, a keyring in place that no longer matches is fetched again, and with
    hardening.verifyAptKeys off the key is taken unchecked.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from components import versions
from components.lab import hardening, scripts
from tests.components.lab.test_host_scripts import needs_isolation
from tests.components.lab.test_upgrade_scripts import run, run_twice
from tests.hostsim import TIMEOUT, HostSim

KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
SECRET = "c2VjcmV0LWtleS1ieXRlcy1mb3ItdGhlLXRlc3QtMzI="


def _encryption(*names: str) -> str:
    return yaml.safe_dump(hardening.encryption_config([(n, SECRET) for n in names]), sort_keys=False)


POLICY = yaml.safe_dump(hardening.audit_policy(), sort_keys=False)


@needs_isolation
def test_control_plane_files_root_only_twice_rotated_and_deleted(tmp_path: Path) -> None:
    sim = HostSim(tmp_path)
    script = scripts.control_plane_files(POLICY)
    first, _, second, _ = run_twice(sim, script, stdin=_encryption("key-1"))
    assert "updated" in first.stdout and "updated" not in second.stdout
    assert SECRET not in first.stdout + first.stderr + second.stdout + second.stderr
    policy, config = sim.path(hardening.AUDIT_POLICY_FILE), sim.path(hardening.ENCRYPTION_CONFIG_FILE)
    assert yaml.safe_load(policy.read_text()) == hardening.audit_policy()
    assert yaml.safe_load(config.read_text()) == hardening.encryption_config([("key-1", SECRET)])
    for path in (policy, config):
        assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == 0
    assert sim.path(hardening.CONFIG_DIR).stat().st_mode & 0o777 == 0o700
    assert sim.path(hardening.AUDIT_LOG_DIR).is_dir()

    # The first step of a rotation: the new key beside the old one, the file rewritten.
    rotated = run(sim, script, stdin=_encryption("key-1", "key-2"))
    assert f"updated {hardening.ENCRYPTION_CONFIG_FILE}" in rotated.stdout
    assert [k["name"] for k in yaml.safe_load(config.read_text())["resources"][0]["providers"][0]["secretbox"]["keys"]] \
        == ["key-1", "key-2"]

    # Off: the files an API server may still name stay where they are.
    off = run(sim, scripts.control_plane_files(""), stdin="")
    assert "hardening.auditLog.enabled is false" in off.stdout
    assert "hardening.secretsEncryption.enabled is false" in off.stdout
    assert policy.exists() and config.exists()

    run_twice(sim, scripts.control_plane_files_delete())
    assert not policy.exists() and not config.exists() and not sim.path(hardening.CONFIG_DIR).exists()


# ---------------------------------------------------------------------------------------------
# apt repository keys, with real GnuPG


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, tuple[str, str]]]:
    """Two real OpenPGP keys made here: name -> (fingerprint, armored public key)."""
    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed (CI installs it: apt-get install gpg)")
    home = tempfile.mkdtemp(prefix="gpg-", dir="/tmp")  # short: gpg-agent's socket path is limited
    gpg = ["gpg", "--homedir", home, "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    made: dict[str, tuple[str, str]] = {}
    try:
        for name in ("pinned", "other"):
            uid = f"{name} <{name}@example.com>"
            subprocess.run([*gpg, "--quick-gen-key", uid, "ed25519", "sign", "never"], check=True,
                           capture_output=True, timeout=TIMEOUT)
            listing = subprocess.run([*gpg, "--with-colons", "--list-keys", uid], check=True, capture_output=True,
                                     text=True, timeout=TIMEOUT).stdout
            fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
            armored = subprocess.run([*gpg, "--armor", "--export", fpr], check=True, capture_output=True, text=True,
                                     timeout=TIMEOUT).stdout
            made[name] = (fpr, armored)
        yield made
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True, timeout=TIMEOUT, check=False)
        shutil.rmtree(home, ignore_errors=True)


def _fingerprints(path: Path) -> list[str]:
    with tempfile.TemporaryDirectory(dir="/tmp") as home:
        out = subprocess.run(["gpg", "--homedir", home, "--batch", "--show-keys", "--with-colons", str(path)],
                             capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    lines = out.splitlines()
    return [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]


def _toolkit(sim: HostSim, monkeypatch: pytest.MonkeyPatch, pinned: str, served: str, verify: bool = True) -> str:
    monkeypatch.setitem(versions.APT_KEY_FINGERPRINTS, "nvidia-container-toolkit", (pinned,))
    sim.serve(KEY_URL, served)
    return scripts.nvidia_toolkit(versions.NVIDIA_CONTAINER_TOOLKIT, verify_keys=verify)


@needs_isolation
def test_the_pinned_key_is_installed_and_checked_again_each_run(tmp_path, monkeypatch, keys) -> None:
    sim = HostSim(tmp_path, real_tools=("gpg",))
    fpr, armored = keys["pinned"]
    _, calls1, _, calls2 = run_twice(sim, _toolkit(sim, monkeypatch, fpr, armored))
    assert _fingerprints(sim.path(KEYRING)) == [fpr]
    assert sim.path(KEYRING).read_bytes()[:1] != b"-", "apt reads the dearmored (binary) keyring"
    assert sim.path(KEYRING).stat().st_mode & 0o777 == 0o644
    assert f"signed-by={KEYRING}" in sim.path(SOURCE).read_text()
    assert sim.installed()["nvidia-container-toolkit"] == versions.NVIDIA_CONTAINER_TOOLKIT
    assert [c[0] for c in calls1].count("curl") == 1 and "curl" not in [c[0] for c in calls2]

    # A keyring in place that no longer has the pinned key is fetched again, and checked.
    other = tmp_path / "other.asc"
    other.write_text(keys["other"][1])
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(sim.path(KEYRING)), str(other)], check=True,
                   capture_output=True, timeout=TIMEOUT, env={"GNUPGHOME": tempfile.mkdtemp(dir="/tmp"), "PATH": "/usr/bin:/bin"})
    assert _fingerprints(sim.path(KEYRING)) == [keys["other"][0]]
    start = sim.mark()
    run(sim, _toolkit(sim, monkeypatch, fpr, armored))
    assert [c[0] for c in sim.calls_since(start)].count("curl") == 1
    assert _fingerprints(sim.path(KEYRING)) == [fpr]


@pytest.mark.parametrize("served", ["other", "pinned+other", "not a key"])
@needs_isolation
def test_a_key_with_another_fingerprint_is_refused_and_nothing_installed(tmp_path, monkeypatch, keys, served) -> None:
    sim = HostSim(tmp_path, real_tools=("gpg",))
    body = {"other": keys["other"][1], "pinned+other": keys["pinned"][1] + keys["other"][1],
            "not a key": "<html>moved</html>\n"}[served]
    result = run(sim, _toolkit(sim, monkeypatch, keys["pinned"][0], body), rc=1)
    assert "apt repository nvidia-container-toolkit" in result.stderr
    assert f"not the pinned {keys['pinned'][0]}" in result.stderr
    assert "gpu-cluster:hardening.verifyAptKeys" in result.stderr
    if served != "not a key":
        assert keys["other"][0] in result.stderr
    assert not sim.path(KEYRING).exists() and not sim.path(SOURCE).exists()
    assert sim.installed() == {} and not [c for c in sim.calls() if c[0] in ("apt-get", "apt-mark")]


@needs_isolation
def test_with_verification_off_the_key_is_taken_unchecked(tmp_path, monkeypatch, keys) -> None:
    sim = HostSim(tmp_path, real_tools=("gpg",))
    run(sim, _toolkit(sim, monkeypatch, keys["pinned"][0], keys["other"][1], verify=False))
    assert _fingerprints(sim.path(KEYRING)) == [keys["other"][0]]
    again = run(sim, _toolkit(sim, monkeypatch, keys["pinned"][0], keys["other"][1], verify=False))
    assert "its key is not checked (gpu-cluster:hardening.verifyAptKeys is false)" in again.stderr
