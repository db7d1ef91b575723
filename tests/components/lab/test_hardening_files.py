"""ControlPlaneFiles (components/lab/hardening_files.py) under the recording mocks: one key per name,
one step per control plane, the EncryptionConfiguration a secret on stdin and never logged, and
kubeadm init waiting for the files."""

from __future__ import annotations

from typing import Any

from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.hardening_files import ControlPlaneFiles, ControlPlaneFilesArgs
from render import program
from render.program import SECRET_MARKER
from stacks.lab import kubeadm_settings
from tests.components.lab.test_lab_components import COMMAND, build, children, deps, key, one, prep
from tests.conftest import host, lab_config, stack_config_with

RANDOM_BYTES = "random:index/randomBytes:RandomBytes"
HA_HOSTS = [host("cp-1", "192.0.2.10", "control-plane"), host("cp-2", "192.0.2.13", "control-plane"),
            host("cp-3", "192.0.2.14", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2)]


def _files(cfg: Any) -> ControlPlaneFiles:
    preps = {h.name: prep(cfg, h.name) for h in cfg.control_planes}
    return ControlPlaneFiles("control-plane-files", ControlPlaneFilesArgs(
        control_planes=tuple(cfg.control_planes), settings=cfg.hardening, private_key=key(),
        prepared={n: p.done for n, p in preps.items()}, bastion=cfg.bastion))


def test_one_key_per_name_and_one_secret_step_per_control_plane(mocks) -> None:
    cfg = lab_config(hosts=HA_HOSTS, controlPlaneEndpoint="192.0.2.50:6443",
                     hardening={"secretsEncryption": {"keys": ["key-2", "key-1"]}})
    build(lambda: _files(cfg))
    plan = mocks.plan
    component = one(plan, "control-plane-files", "gpucluster:lab:ControlPlaneFiles")
    kids = children(plan, component)
    assert sorted(r.name for r in kids if r.type == RANDOM_BYTES) == ["control-plane-files-key-key-1",
                                                                       "control-plane-files-key-key-2"]
    assert all(r.inputs["length"] == 32 for r in kids if r.type == RANDOM_BYTES)
    steps = {r.name: r for r in kids if r.type == COMMAND}
    assert sorted(steps) == ["control-plane-files-cp-1", "control-plane-files-cp-2", "control-plane-files-cp-3"]
    for name, step in steps.items():
        cp = name.removeprefix("control-plane-files-")
        assert step.inputs["stdin"] == SECRET_MARKER, "the EncryptionConfiguration stays a secret"
        assert step.inputs["logging"] == "none"
        assert "audit.k8s.io/v1" in step.inputs["create"] and "secretbox" not in step.inputs["create"]
        assert step.delete_before_replace
        assert f"{cp}-kube-packages" in deps(step), "after the host's node prep"
    assert not [r for r in plan.resources if r.type == COMMAND and r.name.startswith("gpu-1-files")]


def test_with_encryption_off_no_key_and_no_stdin(mocks) -> None:
    cfg = lab_config(hardening={"secretsEncryption": {"enabled": False}, "auditLog": {"enabled": False}})
    build(lambda: _files(cfg))
    plan = mocks.plan
    assert plan.of_type(RANDOM_BYTES) == []
    step = one(plan, "control-plane-files-cp-1")
    assert not step.inputs.get("stdin")
    assert "audit.k8s.io" not in step.inputs["create"]


def test_kubeadm_init_waits_for_the_files(mocks) -> None:
    cfg = lab_config()

    def program() -> None:
        files = _files(cfg)
        ControlPlane("control-plane", ControlPlaneArgs(
            host=cfg.control_planes[0], cluster=kubeadm_settings(cfg), private_key=key(),
            prepared=files.done[cfg.control_planes[0].name], bastion=cfg.bastion))

    build(program)
    init = one(mocks.plan, "control-plane-init")
    assert "control-plane-files-cp-1" in deps(init)
    assert "encryption-provider-config" in str(init.inputs["stdin"])


def test_the_lab_stack_writes_the_files_before_kubeadm_init() -> None:
    """The whole lab stack (the committed Pulumi.lab.yaml, first control plane cp-1): kubeadm init
    waits for that host's files step, which waits for its node prep; the key is a secret."""
    plan = program.run("lab", config=stack_config_with("lab"))
    files = one(plan, "control-plane-files-cp-1")
    assert "control-plane-files-cp-1" in deps(one(plan, "control-plane-init"))
    assert "cp-1-kube-packages" in deps(files)
    assert files.inputs["stdin"] == SECRET_MARKER
    assert len(plan.of_type(RANDOM_BYTES)) == 1


def test_write_unencrypted_reaches_the_encryption_config(mocks, monkeypatch) -> None:
    """The file on the control planes is built with identity first (its text is a secret in the
    plan, so the document builder's call is what is observed)."""
    from components.lab import hardening

    calls: list[tuple[list[str], bool]] = []
    real = hardening.encryption_config

    def recording(keys: list[tuple[str, str]], write_unencrypted: bool = False) -> dict[str, Any]:
        calls.append(([name for name, _ in keys], write_unencrypted))
        return real(keys, write_unencrypted)

    monkeypatch.setattr(hardening, "encryption_config", recording)
    for setting, expected in ((True, True), (False, False)):
        calls.clear()
        cfg = lab_config(hardening={"secretsEncryption": {"keys": ["key-2", "key-1"], "writeUnencrypted": setting}})
        build(lambda cfg=cfg: _files(cfg))
        assert calls == [(["key-2", "key-1"], expected)], calls
