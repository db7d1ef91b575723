"""`python -m config.reference --write` never leaves Pulumi.yaml unparseable: a description over
several lines is replaced whole, what it would write is read back before it replaces the file (a
rename of a file written beside it), and every failure ends with a message, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROJECT_DIR

COMMITTED = (PROJECT_DIR / "Pulumi.yaml").read_text()
PLATFORM = ('    description: "Which environment this stack builds: lab (own servers over SSH, kubeadm), gke (Google '
            'Kubernetes Engine) or dev (an existing cluster)."\n')
VERSION = '    description: "Kubernetes version, minors'
assert PLATFORM in COMMITTED and VERSION in COMMITTED


def _write(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "config.reference", "--write", "--root", str(root), *args],
                          cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("platform", [
    "    description: >\n      Which environment,\n      over two lines.\n",
    "    description: |\n      Which environment,\n\n      with a blank line.\n",
    "    description: Which environment,\n      a plain text over two lines.\n",
])
def test_a_description_over_several_lines_is_replaced_whole(tmp_path: Path, platform: str) -> None:
    text = COMMITTED.replace(PLATFORM, platform).replace(VERSION, '    description: "Kubernetes version,\n      minors')
    yaml.safe_load(text)  # the edited file is valid YAML to begin with
    (tmp_path / "Pulumi.yaml").write_text(text)
    (tmp_path / "Pulumi.yaml").chmod(0o640)
    result = _write(tmp_path)
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "Pulumi.yaml").read_text()
    assert yaml.safe_load(written) == yaml.safe_load(COMMITTED)  # today: "expected <block end>"
    assert written == COMMITTED
    assert (tmp_path / "Pulumi.yaml").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.yaml", "docs"]  # no temporary file left


@pytest.mark.parametrize(("name", "edit", "said"), [
    ("a key no model has", lambda t: t.replace("config:\n", "config:\n  noSuchKey:\n    type: string\n"
                                                          "    description: x\n", 1), "noSuchKey"),
    ("a tab", lambda t: t.replace("config:\n  platform:", "config:\n\tplatform:", 1), "a tab in the indentation"),
    ("a description in a flow mapping", lambda t: t.replace(
        "  platform:\n    type: string\n    default: dev\n" + PLATFORM,
        '  platform: {type: string, default: dev, description: "x"}\n', 1), "shares its lines"),
    ("a duplicate key", lambda t: t.replace("    default: dev\n", "    default: dev\n    default: lab\n", 1),
     "given twice"),
    ("no description", lambda t: t.replace(PLATFORM, "", 1), "no description line for platform"),
])
def test_a_failure_ends_with_a_message_and_writes_nothing(tmp_path: Path, name: str, edit, said: str) -> None:
    text = edit(COMMITTED)
    assert text != COMMITTED, name
    (tmp_path / "Pulumi.yaml").write_text(text)
    result = _write(tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.startswith("error: ") and said in result.stderr
    assert (tmp_path / "Pulumi.yaml").read_text() == text
    assert sorted(os.listdir(tmp_path)) == ["Pulumi.yaml"]  # the reference is not written either


def test_a_missing_pulumi_yaml_is_a_message(tmp_path: Path) -> None:
    result = _write(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "Pulumi.yaml" in result.stderr
    assert os.listdir(tmp_path) == []
