"""The configuration reference (docs/reference/config.md) and Pulumi.yaml's descriptions are what the
config models say (config/reference.py): a key without a description, a stale page or a Pulumi.yaml
text that differs from its model fails here, with the command that regenerates them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import config
from config import reference
from config.lab import LabStack
from config.walk import walk

ROOT = Path(reference.__file__).resolve().parent.parent
REGENERATE = f"run `{reference.COMMAND}`"


def _every_key():
    for platform, stack_type in config.STACK_TYPES.items():
        for key in walk(stack_type):
            yield platform, key


def test_every_model_key_carries_a_description():
    missing = [f"{platform.value}: {key.name}" for platform, key in _every_key() if not (key.info.description or "").strip()]
    assert missing == [], "keys without a Field description (the reference and Pulumi.yaml show it)"


def test_committed_reference_is_what_the_models_generate():
    committed = (ROOT / reference.REFERENCE).read_text()
    assert committed == reference.reference(), f"{reference.REFERENCE} differs from the config models: {REGENERATE}"


def test_reference_lists_every_key_of_every_platform_once_per_reading():
    rows = reference.rows()
    shown = {(row.key, platform) for keyed in rows.values() for row, platforms in keyed.items() for platform in platforms}
    expected = {(reference._shown_path(key), platform) for platform, key in _every_key()}
    assert shown == expected
    # A key the platforms read alike is one row naming them all; storage.nfs differs, so two rows.
    text = reference.reference()
    assert text.count("| `gpu-cluster:gpuTaint` |") == 1
    assert "| `gpu-cluster:gpu.sharing.mode` | string | `none` | `none`, `time-slicing`, `mig` | lab, dev, gke |" in text
    assert text.count("| `gpu-cluster:storage.nfs` |") == 2
    assert "| `gpu-cluster:hosts[].sshPort` | integer | `22` | 1–65535 | lab |" in text
    assert "| `gcp:project` | string | required |  | gke |" in text


def test_reference_tables_keep_their_columns(monkeypatch):
    """Every row has as many cells as its header (a `|` in a description is escaped, not a new column)."""
    monkeypatch.setattr(LabStack.model_fields["gpu_taint"], "description", "true | false, as YAML reads it.")
    header = None
    for line in reference.reference().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = len(re.split(r"(?<!\\)\|", line)) - 2
        header = header or cells
        assert cells == header, line
    assert "| true \\| false, as YAML reads it. |" in reference.reference()


def test_reference_follows_a_changed_description(monkeypatch):
    monkeypatch.setattr(LabStack.model_fields["gpu_taint"], "description", "Another text the model now carries.")
    text = reference.reference()
    assert "| lab | Another text the model now carries. |" in text
    assert text != (ROOT / reference.REFERENCE).read_text()
    assert reference.project_descriptions()["gpuTaint"] == "lab: another text the model now carries."


def test_secrets_table_names_every_secret_key_and_its_platform():
    assert tuple(reference.SECRETS) == config.SECRET_KEYS
    for key, (platforms, _) in reference.SECRETS.items():
        owner = config._SECRET_PLATFORM.get(key)
        assert platforms == ((owner,) if owner else tuple(config.Platform)), key


# --- Pulumi.yaml ------------------------------------------------------------------------------


def _declared() -> dict:
    return yaml.safe_load((ROOT / reference.PROJECT).read_text())["config"]


def test_pulumi_yaml_descriptions_are_the_models():
    wanted = reference.project_descriptions()
    declared = _declared()
    assert set(declared) == set(wanted), "Pulumi.yaml's keys and the models' top-level keys differ"
    differ = {key: decl.get("description") for key, decl in declared.items() if decl.get("description") != wanted[key]}
    assert differ == {}, f"Pulumi.yaml descriptions differ from the config models: {REGENERATE}"
    # As the generator writes them: a platform's own key says whose it is, a shared key does not.
    assert declared["gpuTaint"]["description"].startswith("lab: taint GPU workers")
    assert declared["serviceCidr"]["description"].startswith("lab and dev: ")
    assert not declared["training"]["description"].startswith(("lab", "dev", "gke"))


def test_pulumi_yaml_key_without_description_is_refused():
    text = (ROOT / reference.PROJECT).read_text()
    line = f"    description: {json.dumps(reference.project_descriptions()['gpuTaint'], ensure_ascii=False)}\n"
    assert line in text
    with pytest.raises(ValueError, match="no description line for gpuTaint"):
        reference.project_file(text.replace(line, ""))


def test_pulumi_yaml_key_no_model_has_is_refused():
    text = (ROOT / reference.PROJECT).read_text().replace(
        "\n  gpuTaint:\n", '\n  gpuTaints:\n    type: boolean\n    default: true\n    description: "x"\n  gpuTaint:\n')
    with pytest.raises(ValueError, match="declares gpuTaints, which no platform's model has"):
        reference.project_file(text)


def test_pulumi_yaml_model_key_missing_is_refused():
    text = (ROOT / reference.PROJECT).read_text()
    start = text.index("\n  gpuTaint:\n")
    end = text.index("\n  bastion:\n")
    with pytest.raises(ValueError, match="no description line for gpuTaint"):
        reference.project_file(text[:start] + text[end:])


def test_platforms_describing_a_key_differently_is_refused(monkeypatch):
    from config.dev import DevStack

    monkeypatch.setattr(DevStack.model_fields["service_cidr"], "description", "The dev text.")
    with pytest.raises(ValueError, match="serviceCidr: the platforms' models describe it differently"):
        reference.project_descriptions()


# --- the command --------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for path in (reference.REFERENCE, reference.PROJECT):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


def test_check_passes_on_the_committed_files(project, capsys):
    assert reference.main(["--check", "--root", str(project)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("path, old, new", [
    (reference.REFERENCE, "| lab | Taint GPU workers", "| lab | Taint the GPU workers"),
    (reference.PROJECT, '"lab: taint GPU workers', '"lab: taint the GPU workers'),
], ids=["reference", "Pulumi.yaml"])
def test_check_exits_1_on_a_stale_file_and_write_mends_it(project, capsys, path, old, new):
    target = project / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    assert reference.main(["--check", "--root", str(project)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and reference.COMMAND in err
    assert reference.main(["--write", "--root", str(project)]) == 0
    assert target.read_text() == text
    assert reference.main(["--check", "--root", str(project)]) == 0


def test_check_exits_1_when_the_reference_is_missing(project, capsys):
    (project / reference.REFERENCE).unlink()
    assert reference.main(["--check", "--root", str(project)]) == 1
    assert str(reference.REFERENCE) in capsys.readouterr().err
