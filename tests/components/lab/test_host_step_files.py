"""The host steps as files (components/lab/host_steps/) and the loader that fills them:

  - shellcheck and `bash -n` read every .sh file as it is, placeholders and all;
  - every file opens with a header that names exactly the values filled into it, and every file is
    used by a script of components/lab/scripts.py;
  - the loader refuses a missing or unknown value, an unknown file or a path outside the folder,
    quotes every plain value, places Shell text as it is, fills in one pass, and finds the files
    from any working directory;
  - render/drain_guards.py takes its marks from the files.

The rendered scripts themselves (shellcheck, run in the host sandbox): test_host_scripts.py and
test_upgrade_scripts.py.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.lab import host_steps, scripts
from render import drain_guards
from tests.components.lab.test_host_scripts import SCRIPTS, _script_cases
from tests.hostsim import TIMEOUT

REPO = Path(__file__).resolve().parents[3]
FILES = sorted(str(p.relative_to(host_steps.FOLDER)) for p in host_steps.FOLDER.glob("*/*.sh"))


def test_the_folder_holds_the_steps() -> None:
    folders = {name.split("/")[0] for name in FILES}
    assert {"lib", "node_prep", "roce", "cluster", "storage", "upgrade"} <= folders
    assert len(FILES) >= 40, FILES


@pytest.mark.parametrize("name", FILES)
def test_shellcheck_reads_the_file_as_it_is(name: str) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (CI installs it: apt-get install shellcheck)")
    result = subprocess.run(
        ["shellcheck", "--shell", "bash", "--severity", "style", "--format", "gcc", name],
        cwd=host_steps.FOLDER, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )
    assert result.returncode == 0, f"shellcheck findings in host_steps/{name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", FILES)
def test_bash_parses_the_file_as_it_is(name: str) -> None:
    result = subprocess.run(["bash", "-n", str(host_steps.FOLDER / name)], capture_output=True, text=True,
                            timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr


def _header(name: str) -> str:
    text = (host_steps.FOLDER / name).read_text()
    return text.split("\n\n", 1)[0]


@pytest.mark.parametrize("name", FILES)
def test_the_header_names_the_values_filled_in(name: str) -> None:
    header = _header(name)
    assert header.startswith("#!/usr/bin/env bash\n# "), "a shebang, then what the step does"
    assert "Filled in:" in header, "the header says which values are filled in (or `Filled in: nothing.`)"
    documented = set(host_steps.PLACEHOLDER.findall(header.split("Filled in:", 1)[1]))
    own = set(host_steps.PLACEHOLDER.findall(host_steps._body((host_steps.FOLDER / name).read_text(), name)))
    taken = host_steps.placeholders(name)  # its own and its includes'
    assert own <= documented, f"placeholders not described in the header: {sorted(own - documented)}"
    assert documented <= taken, f"the header names values the file does not take: {sorted(documented - taken)}"


def test_every_file_is_read_by_a_script(monkeypatch: pytest.MonkeyPatch) -> None:
    used: set[str] = set()
    cached = host_steps.read
    real = cached.__wrapped__

    def recording(name: str) -> str:
        used.add(name)
        return real(name)

    monkeypatch.setattr(host_steps, "read", recording)
    monkeypatch.setattr(scripts, "read", recording)
    _script_cases()
    assert set(FILES) - used == set(), "a host step file no script uses"


# ---------------------------------------------------------------------------------------------
# the loader


def test_a_missing_or_unknown_value_is_an_error_at_load_time() -> None:
    with pytest.raises(ValueError, match=r"node_prep/driver_ready.sh: no value for \['GPUS'\]"):
        host_steps.fill("node_prep/driver_ready.sh")
    with pytest.raises(ValueError, match=r"no placeholder for \['GPU'\]"):
        host_steps.fill("node_prep/driver_ready.sh", GPUS=2, GPU=2)
    with pytest.raises(TypeError, match="GPUS: a host step value is str, int or Shell, not NoneType"):
        host_steps.fill("node_prep/driver_ready.sh", GPUS=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not bool"):
        host_steps.fill("node_prep/driver_ready.sh", GPUS=True)


@pytest.mark.parametrize("name", ["node_prep/absent.sh", "../scripts.py", "lib/../../scripts.sh", "prelude.sh",
                                  "node_prep/kernel_prep.txt"])
def test_only_files_of_the_folder_are_read(name: str) -> None:
    with pytest.raises(ValueError, match="no host step file"):
        host_steps.read(name)


def test_values_are_quoted_and_shell_text_placed_as_it_is() -> None:
    body = host_steps.fill("node_prep/nvidia_driver.sh", BRANCH="580", VERSION="1.0 $(reboot)")
    assert "\nwant='1.0 $(reboot)'\n" in body
    assert "\npkg=nvidia-driver-580-server\n" in body
    assert "\nwant=''\n" in host_steps.fill("node_prep/nvidia_driver.sh", BRANCH="580", VERSION="")
    toolkit = host_steps.fill("node_prep/nvidia_toolkit.sh", PACKAGES=host_steps.Shell("a=1 b=2"), KEY_PINS="")
    assert "\napt_pin a=1 b=2\n" in toolkit


def test_a_value_is_filled_once_not_read_as_a_placeholder() -> None:
    body = host_steps.fill("node_prep/nvidia_driver.sh", BRANCH="580", VERSION=host_steps.Shell("__BRANCH__"))
    assert "\nwant=__BRANCH__\n" in body


def test_the_header_is_not_sent_and_includes_are_filled() -> None:
    body = host_steps.fill("node_prep/kube_packages.sh", MINOR="1.34", PACKAGES=host_steps.Shell("kubelet=1"),
                           KEY_PINS="")
    assert not body.startswith("#!") and "Filled in" not in body and "@include" not in body
    assert "apt_repo kubernetes-v1.34 https://pkgs.k8s.io/core:/stable:/v1.34/deb/Release.key" in body
    with pytest.raises(ValueError, match="opens with a header"):
        host_steps._body("echo no header\n", "x.sh")


def test_no_placeholder_is_left_in_any_rendered_script() -> None:
    for name, text in SCRIPTS.items():
        assert not host_steps.PLACEHOLDER.search(text), name
        assert "# @include" not in text, name


def test_files_are_found_from_any_working_directory(tmp_path: Path) -> None:
    code = "from components.lab import scripts; print(scripts.kernel_prep().splitlines()[0])"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "#!/usr/bin/env bash\n"


def test_scripts_py_holds_no_bash_bodies() -> None:
    """The bash lives in the files: no string in scripts.py but its docstrings runs past two lines."""
    tree = ast.parse(Path(scripts.__file__).read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    long = [node.value[:60] for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and node.value.count("\n") > 2]
    assert long == []


# ---------------------------------------------------------------------------------------------
# render/drain_guards.py reads the files' marks


def test_drain_guards_marks_come_from_the_files() -> None:
    helpers = host_steps.read("lib/upgrade_helpers.sh")
    assert helpers.splitlines()[0] == drain_guards.UPGRADE_HELPERS_MARK
    assert drain_guards.version_values(SCRIPTS["node_upgrade_drain-exact-driver"]) is not None
    assert drain_guards.members(SCRIPTS["drain_removed_nodes-members"]) == ["cpu-1 192.0.2.12", "gpu-1 192.0.2.11"]
    # the lines drain_guards reads are assignments from placeholders in the files
    decide = host_steps.read("upgrade/drain_decide.sh") + host_steps.read("upgrade/drain_driver_need.sh")
    for line in ("want=__VERSION__", "branch=__BRANCH__", "pkg=nvidia-driver-__BRANCH__-server",
                 "want_driver=__VERSION__"):
        assert f"\n{line}\n" in f"\n{decide}", line
    assert "\nmembers=__MEMBERS_FILE__\n" in host_steps.read("cluster/drain_removed_nodes.sh")
