"""The README's plan command, `./plan [STACK] [render options]`, ends with render's own exit status
(`make plan` cannot: GNU make exits 2 for any failed recipe), and sets up .venv first when it is
missing or older than the requirements it installs: requirements-plan.txt only, never torch or the
test tools (those come with `make`, requirements-dev.txt).

Each test runs the script in a copy of the project in its own temporary directory, so the stack
files it adds and the out/ it writes touch nothing shared (the tests may run in parallel)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from tests.conftest import PROJECT_DIR
from tests.plan_environment import closure, requirements

NOT_COPIED = shutil.ignore_patterns(".venv", ".git", "out", "__pycache__", ".pytest_cache", ".mypy_cache",
                                    ".ruff_cache", "build")


def _copy_project(dest: Path) -> Path:
    project = dest / "project"
    shutil.copytree(PROJECT_DIR, project, ignore=NOT_COPIED, symlinks=True)
    return project


def _use_the_installed_venv(project: Path) -> None:
    """.venv is this test run's own environment, already up to date: the script must not reinstall."""
    (project / ".venv").symlink_to(Path(sys.prefix))
    stamp = Path(sys.prefix) / ".installed"
    if not stamp.exists():
        pytest.skip(f"{stamp} is missing: this environment was not created by `make`/`./plan`")
    for name in ("requirements.txt", "requirements-plan.txt", "requirements-dev.txt"):  # older than the stamp
        os.utime(project / name, (stamp.stat().st_mtime - 60,) * 2)


def _stack_file(project: Path, stack: str, base: str, **changes: dict) -> None:
    """Pulumi.<stack>.yaml: the committed Pulumi.<base>.yaml with some gpu-cluster: sections merged."""
    doc = yaml.safe_load((project / f"Pulumi.{base}.yaml").read_text())
    for key, value in changes.items():
        full = f"gpu-cluster:{key}"
        current = doc["config"].get(full)
        doc["config"][full] = {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _plan(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(project / "plan"), *args], cwd=project, capture_output=True, text=True,
                          timeout=300, env=env or os.environ.copy(), check=False)


def test_a_plan_that_would_not_come_up_exits_3(tmp_path: Path, upstream_dir: Path) -> None:
    # 80Gi fits the a2-highgpu-1g machine type (85 GB) but not what its kubelet leaves allocatable
    # (GKE's reservations: 78Gi), so only the whole-cluster check can find that it cannot be placed.
    project = _copy_project(tmp_path)
    _use_the_installed_venv(project)
    _stack_file(project, "tight", "gke", training={"memoryRequest": "80Gi", "memoryLimit": "80Gi"})
    result = _plan(project, "tight", env={**os.environ, "GPU_CLUSTER_UPSTREAM": str(upstream_dir)})
    assert result.returncode == 3, result.stderr
    assert "would not come up" in result.stderr and "Job training/train" in result.stderr
    assert "insufficient memory" in result.stderr
    assert "**no**" in (project / "out" / "tight" / "summary.md").read_text()


def test_a_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    _use_the_installed_venv(project)
    _stack_file(project, "bad", "lab", cni="weave")
    result = _plan(project, "bad", "--no-check")
    assert result.returncode == 2, result.stderr
    assert "gpu-cluster:cni" in result.stderr
    assert not (project / "out" / "bad").exists()  # nothing written for a refused config


def test_render_options_are_passed_on_and_the_stack_defaults_to_lab(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    _use_the_installed_venv(project)
    elsewhere = tmp_path / "plans" / "lab"
    result = _plan(project, "--no-check", "--out", str(elsewhere))
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "plan.json").is_file() and not (project / "out").exists()


FAKE_PYTHON3 = """#!/usr/bin/env bash
# Stands in for the system python3: `-m venv DIR` makes DIR/bin/python, itself a fake that logs its
# arguments and exits 3 for `-m render` (as render does for a plan that would not come up).
echo "python3 $*" >> "$FAKE_LOG"
[ "$1 $2" = "-m venv" ] || exit 9
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'EOF'
#!/usr/bin/env bash
echo "venv-python $*" >> "$FAKE_LOG"
[ "$1 $2" = "-m render" ] && exit 3
exit 0
EOF
chmod +x "$3/bin/python"
"""


def _fake_python3(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose python3 only logs what ./plan asks of it (FAKE_PYTHON3), and that log."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(FAKE_PYTHON3)
    (fake_bin / "python3").chmod(0o755)
    log = tmp_path / "log"
    return {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)}, log


def test_the_venv_is_created_when_missing_and_refreshed_when_older_than_the_requirements(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    env, log = _fake_python3(tmp_path)
    venv = project / ".venv"

    def run() -> list[str]:
        log.write_text("")
        result = _plan(project, "dev", "--no-check", env=env)
        assert result.returncode == 3, result.stderr  # render's status, through exec
        return log.read_text().splitlines()

    install = [f"python3 -m venv {venv}", "venv-python -m pip install -q --upgrade pip",
               f"venv-python -m pip install -q -r {project}/requirements-plan.txt"]
    render = "venv-python -m render dev --out out/dev --no-check"
    assert run() == [*install, render]  # no .venv: created first
    assert (venv / ".plan-installed").is_file()
    assert run() == [render]  # up to date: used as it is
    stamp = (venv / ".plan-installed").stat().st_mtime
    os.utime(project / "requirements-dev.txt", (stamp + 10, stamp + 10))
    assert run() == [render]  # the test tools changed: not the plan's business
    for name in ("requirements-plan.txt", "requirements.txt"):
        stamp = (venv / ".plan-installed").stat().st_mtime
        os.utime(project / name, (stamp + 10, stamp + 10))
        assert run() == [*install, render]  # a requirement of the plan changed since: refreshed
    stamp = (venv / ".plan-installed").stat().st_mtime
    os.utime(project / "requirements-plan.txt", (stamp + 10, stamp + 10))
    (venv / ".installed").touch()  # ... but `make` has installed everything since
    os.utime(venv / ".installed", (stamp + 20, stamp + 20))
    assert run() == [render]


# What a fresh machine must not download for a plan: torch's CUDA build (several GB) and the rest.
TRAINING_ONLY = {"torch", "numpy", "wandb", "triton"}


def test_the_venv_that_plan_sets_up_holds_no_training_or_test_package(tmp_path: Path) -> None:
    """What ./plan installs on a fresh checkout, followed through every dependency the installed
    packages declare: none of requirements-dev.txt's own packages, nothing of torch's."""
    project = _copy_project(tmp_path)
    env, log = _fake_python3(tmp_path)
    assert _plan(project, "lab", "--no-check", env=env).returncode == 3
    files = [line.split(" -r ", 1)[1] for line in log.read_text().splitlines() if " pip install " in line and " -r " in line]
    assert files, log.read_text()
    named = [req for file in files for req in requirements(Path(file))]
    installed = closure(named)
    heavy = {name for name in installed if name in TRAINING_ONLY or name.startswith(("nvidia-", "cuda-"))}
    assert heavy == set(), f"./plan installs {files}, which bring in {sorted(heavy)}"
    dev_only = {canonicalize_name(req.name) for req in requirements(project / "requirements-dev.txt")} - {
        canonicalize_name(req.name) for req in named}
    assert dev_only, "requirements-dev.txt adds nothing: where do the tests' packages come from?"
    assert installed & dev_only == set()  # not even through a dependency of the plan's packages
    assert {"pulumi", "kubernetes-validate", "helm-python-sdk", "jsonschema"} <= installed  # the plan and its check


def test_a_failed_plan_never_leaves_the_last_verdict(tmp_path: Path, upstream_dir: Path) -> None:
    """The README says read summary.md first: after a run that says yes, a bad config (exit 2) or a
    check that cannot run (exit 1) into the same out/ must not leave that yes behind."""
    project = _copy_project(tmp_path)
    _use_the_installed_venv(project)
    env = {**os.environ, "GPU_CLUSTER_UPSTREAM": str(upstream_dir)}
    summary, out = project / "out" / "dev" / "summary.md", project / "out" / "dev"
    good = (project / "Pulumi.dev.yaml").read_text()
    assert _plan(project, "dev", env=env).returncode == 0
    assert "**yes**" in summary.read_text()
    (out / "notes.md").write_text("mine\n")  # a file of the user's beside render's: it stays

    _stack_file(project, "dev", "dev", cni="weave")
    result = _plan(project, "dev", env=env)
    assert result.returncode == 2, result.stderr
    text = summary.read_text()
    assert "**yes**" not in text and "No: bad config" in text and "gpu-cluster:cni" in text
    assert sorted(p.name for p in out.iterdir()) == [".gpu-cluster-render", "notes.md", "summary.md"]

    (project / "Pulumi.dev.yaml").write_text(good)
    assert _plan(project, "dev", env=env).returncode == 0 and "**yes**" in summary.read_text()
    empty = tmp_path / "no-upstream"
    empty.mkdir()
    result = _plan(project, "dev", env={**os.environ, "GPU_CLUSTER_UPSTREAM": str(empty)})
    assert result.returncode == 1, result.stderr
    text = summary.read_text()
    assert "**yes**" not in text and "could not run" in text
    assert (out / "notes.md").read_text() == "mine\n"
