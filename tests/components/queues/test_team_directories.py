"""The teams' directories on a static NFS export (components/queues/team_directories.py): the Job's
shell, run for real with sh (the argv it carries) and bash in a temporary directory standing in for
the export's root; its pod against Kubernetes' strict schema and the Pod Security levels; and a
namespace that could break out of the script, impossible in config and in the module.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from components import versions
from components.queues import team_directories
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE
from render.cluster.pod_security import violations
from tests.config.refusals import problems
from tests.config.test_queues_config import dev_raw, queues, team

TEAMS = ["team-vision", "team-language"]


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return container


def _run(command: list[str], root: Path, shell: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    """The Job's command as its container runs it (working directory: the export's root), with
    `shell` in place of argv[0]."""
    path = shutil.which(shell)
    assert path, f"{shell} is needed to run the Job's script"
    return subprocess.run([path, *command[1:]], cwd=root, capture_output=True, text=True, timeout=30,
                          preexec_fn=lambda: os.umask(umask))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_command_makes_exactly_each_teams_directory_writable_by_any_uid(tmp_path: Path, shell: str) -> None:
    command = _container(team_directories.job_manifest(TEAMS))["command"]
    assert command[:2] == ["sh", "-c"]
    (tmp_path / "checkpoints").mkdir(mode=0o700)  # the training namespace's own data, beside `teams`
    (tmp_path / "checkpoints").chmod(0o700)
    # A umask as tight as a hardened image's: the modes must not depend on it.
    result = _run(command, tmp_path, shell, umask=0o077)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "teams"]
    assert sorted(p.name for p in (tmp_path / "teams").iterdir()) == sorted(TEAMS)
    assert _mode(tmp_path / "teams") == 0o755
    for ns in TEAMS:
        assert _mode(tmp_path / "teams" / ns) == 0o777  # NFS ignores fsGroup: any uid of the team writes
    assert _mode(tmp_path / "checkpoints") == 0o700  # untouched


def test_a_rerun_keeps_the_teams_data_and_restores_the_modes(tmp_path: Path) -> None:
    command = _container(team_directories.job_manifest(TEAMS))["command"]
    assert _run(command, tmp_path, "bash").returncode == 0
    (tmp_path / "teams" / "team-vision" / "model.pt").write_text("weights")
    (tmp_path / "teams" / "team-language").chmod(0o700)
    again = _run(command, tmp_path, "bash")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "teams" / "team-vision" / "model.pt").read_text() == "weights"
    assert _mode(tmp_path / "teams" / "team-language") == 0o777
    # A team added later: the new Job's command adds its directory and leaves the others.
    more = _container(team_directories.job_manifest([*TEAMS, "team-speech"]))["command"]
    assert _run(more, tmp_path, "sh").returncode == 0
    assert sorted(p.name for p in (tmp_path / "teams").iterdir()) == sorted([*TEAMS, "team-speech"])
    assert (tmp_path / "teams" / "team-vision" / "model.pt").exists()


def test_a_failure_fails_the_job(tmp_path: Path) -> None:
    """set -e: a directory it cannot make (here a file in its place) fails the pod, so Pulumi's
    wait for the Job fails instead of the team's pods."""
    (tmp_path / "teams").mkdir()
    (tmp_path / "teams" / "team-vision").write_text("not a directory")
    result = _run(_container(team_directories.job_manifest(TEAMS))["command"], tmp_path, "sh")
    assert result.returncode != 0


def test_the_pod_mounts_the_export_root_and_asks_for_nothing_else() -> None:
    manifest = team_directories.job_manifest(TEAMS)
    assert kubernetes_validate.validate(manifest, "1.34", strict=True) == "1.34"
    assert manifest["metadata"]["namespace"] == TRAINING_NAMESPACE
    # Kueue leaves it alone: no queue label (manageJobsWithoutQueueName is off).
    assert not any(k.startswith("kueue.x-k8s.io/") for k in manifest["metadata"].get("labels", {}))
    spec = manifest["spec"]
    assert 0 < spec["activeDeadlineSeconds"] <= 900 and 0 < spec["backoffLimit"] <= 6
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert "hostNetwork" not in pod and "serviceAccountName" not in pod
    assert pod["volumes"] == [{"name": "export", "persistentVolumeClaim": {"claimName": CLAIM_NAME}}]
    c = _container(manifest)
    assert c["image"] == versions.CUDA_VECTORADD_IMAGE  # pinned, already pulled by the GPU-ready gate
    assert c["workingDir"] == c["volumeMounts"][0]["mountPath"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in c["env"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "privileged": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_root_is_the_only_step_past_restricted() -> None:
    """Filestore's share root is root's, mode 0755: uid 0 is needed to make `teams` there. The pod
    is admitted by the training namespace's baseline; restricted refuses it for that alone."""
    manifest = team_directories.job_manifest(TEAMS)
    pod, meta = manifest["spec"]["template"]["spec"], manifest["spec"]["template"]["metadata"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert violations(pod, meta, "baseline") == []
    restricted = violations(pod, meta, "restricted")
    assert restricted and all("runAsNonRoot" in v or "runAsUser" in v for v in restricted), restricted


def test_the_job_name_follows_the_teams_and_nothing_else() -> None:
    name = team_directories.job_manifest(TEAMS)["metadata"]["name"]
    assert name == team_directories.job_manifest(list(reversed(TEAMS)))["metadata"]["name"]
    assert name != team_directories.job_manifest([*TEAMS, "team-speech"])["metadata"]["name"]
    assert len(name) <= 63 and name.startswith(team_directories.JOB_PREFIX)


@pytest.mark.parametrize("namespace", ["team-a;rm -rf /", "../../etc", "team a", "$(id)", "Team-A", "team-'a'"])
def test_a_namespace_that_is_not_a_dns_label_never_reaches_the_shell(namespace: str) -> None:
    raw = dev_raw(queues=queues(team("vision", namespace=namespace, gpus=0)))
    assert any(key == "queues.teams[0].namespace" for key, _ in problems(raw)), problems(raw)
    with pytest.raises(ValueError, match="RFC 1123"):
        team_directories.script([namespace])


def test_the_script_passes_shellcheck(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")  # CI installs it (a skip fails there)
    script = tmp_path / "team-dirs.sh"
    script.write_text(team_directories.script(TEAMS))
    proc = subprocess.run(["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
