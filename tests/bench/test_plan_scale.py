"""bench/plan_scale.py's ./plan table renders the config it says: the Pulumi.lab.yaml it writes
for N workers is read by render (program.stack_config, as `pulumi up` reads a stack) back to the
generated config, secrets as secrets; and its smallest run prints the ./plan row with a ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench import _configs, plan_scale
from render import program
from tests.conftest import PROJECT_DIR


def test_the_stack_file_reads_back_as_the_generated_config(tmp_path) -> None:
    values, secrets = _configs.lab_config(5, **_configs.lab_layers())
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.lab.yaml").write_text(plan_scale._stack_file((values, secrets)))
    read, read_secrets = program.stack_config("lab", project_dir=tmp_path)
    assert read_secrets == secrets
    for key, value in values.items():
        if key in secrets:
            assert read[key] == program.SECRET_MARKER
        elif value.startswith(("[", "{")):  # objects travel as JSON text
            assert json.loads(read[key]) == json.loads(value), key
        else:
            assert read[key] == value, key
    assert len(json.loads(read[_configs.PREFIX + "hosts"])) == 6


@pytest.mark.skipif(not (PROJECT_DIR.parent / "shared" / "upstream" / "charts").is_dir()
                    and "GPU_CLUSTER_UPSTREAM" not in os.environ, reason="no upstream charts")
def test_one_plan_row_at_two_workers() -> None:
    proc = subprocess.run([sys.executable, "bench/plan_scale.py", "--plan-points", "2", "--points", "none",
                           "--gke-points", "none", "--repeats", "1"], cwd=PROJECT_DIR, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[1]) > 50 and int(cells[2]) > 50  # resources, files written
    assert float(cells[8]) > 1  # ./plan does more than the SDK floor
    assert float(cells[13]) > 1  # and more than the SDK registering its own plan.json again


def test_the_replay_floor_registers_the_plan_it_reads(tmp_path) -> None:
    """bench/floor_replay registers every recorded resource again: same type, name, parent, provider and
    inputs (so it costs the SDK what this very plan costs it), and nothing else."""
    plan = program.run("lab", config=_configs.lab_config(2, **_configs.lab_layers()))
    recorded = [r.entry() for r in plan.resources]
    plan_json = tmp_path / "plan.json"
    plan_json.write_text(json.dumps({"resources": recorded}))
    values = {_configs.PREFIX + "floorPlan": str(plan_json), _configs.SECRET_KEY: "x"}
    replayed = program.run("floor", project_dir=plan_scale.REPLAY_FLOOR_DIR,
                           config=(values, [_configs.SECRET_KEY]))

    def key(urn: str) -> str:  # the project and stack differ (gpu-cluster/lab vs the floor)
        return urn.split("::", 2)[2]

    original = {key(r["urn"]): r for r in recorded}
    again = {key(r.urn): r for r in replayed.resources}
    assert set(again) == set(original)
    for urn, entry in again.items():
        source = original[urn]
        assert entry.custom == source["custom"], urn
        stack_parent = source["parent"].split("::")[-2] == "pulumi:pulumi:Stack"
        assert (entry.parent.split("::")[-2] == "pulumi:pulumi:Stack") if stack_parent \
            else key(entry.parent) == key(source["parent"]), urn
        if entry.custom and not entry.type.startswith("pulumi:providers:"):
            assert entry.inputs == source["inputs"], urn
        # The same explicit provider: under the real engine, one whose config is unknown in a
        # preview skips its Check of every resource it manages (bench/engine_scale.py).
        provider = entry.provider.rsplit("::", 1)[0]
        assert (key(provider) if provider else "") == (key(source["provider"].rsplit("::", 1)[0])
                                                       if source["provider"] else ""), urn
    providers = [urn for urn, r in original.items() if r["type"] == "pulumi:providers:kubernetes"]
    assert providers and any(original[urn]["propertyDependencies"] for urn in providers)
    for urn in providers:  # an input taken from an output waits on it (unknown in a preview), same value here
        assert again[urn].inputs == original[urn]["inputs"], urn
        for prop, sources in original[urn]["propertyDependencies"].items():
            assert {key(u) for u in again[urn].property_dependencies.get(prop, [])} >= {key(u) for u in sources}, prop
