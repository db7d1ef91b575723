"""`render lab-ha --against OLD` on the HA example (Pulumi.lab-ha.yaml, storage.provision): the NFS
export stays on its host whatever happens to the entry point (issue 34, config/nfs_export_host.py).
The older side is the committed file as deployed (export on cp-1, the first control plane); the new
side an edited copy of it, both rendered as `pulumi up` would run them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from render import __main__ as render_main
from render import program
from tests.conftest import PROJECT_DIR

STACK_FILE = PROJECT_DIR / "Pulumi.lab-ha.yaml"
NFS_STEP = "shared-storage-nfs-server"


def _stack(tmp_path: Path, name: str, hosts: Any = None, server: str | None = None) -> Path:
    data = yaml.safe_load(STACK_FILE.read_text())
    config = data["config"]
    if hosts is not None:
        config["gpu-cluster:hosts"] = hosts(config["gpu-cluster:hosts"])
    if server is not None:
        config["gpu-cluster:storage"] = {**config["gpu-cluster:storage"], "server": server}
    path = tmp_path / f"{name}-Pulumi.lab-ha.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _against(tmp_path: Path, capsys: pytest.CaptureFixture[str], new: Path, old: Path) -> tuple[int, str]:
    """`render lab-ha --against old` with `new` as the stack's config (as test_ha_update.py does)."""
    real = program.stack_config
    new_config = real("lab-ha", stack_file=new)

    def stack_config(stack: str, *a: Any, **k: Any) -> Any:
        return new_config if stack == "lab-ha" and not k.get("stack_file") else real(stack, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(program, "stack_config", stack_config)
        rc = render_main.main(["lab-ha", "--out", str(tmp_path / "out"), "--no-check", "--against", str(old)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _nfs_rows(out: str) -> list[str]:
    """The preview's lines about the export step, each under its section (create, update, replace, delete)."""
    rows, section = [], ""
    for line in out.splitlines():
        if line and not line.startswith(" "):
            section = line.split(" (")[0]
        if NFS_STEP in line:
            rows.append(f"{section}: {line.strip()}")
    return rows


def _export_host(tmp_path: Path) -> str:
    """The address the new side's export step connects to (its plan.json)."""
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    (step,) = [e for e in plan["resources"] if str(e.get("urn", "")).endswith("::" + NFS_STEP)]
    return str(step["inputs"]["connection"]["host"])


CP4 = {"name": "cp-4", "address": "192.0.2.40"}
LEAVES = {
    "removed": lambda hosts: [h for h in hosts if h["name"] not in ("cp-1", "cp-2")],  # 3 -> 1 (2 is no count)
    "replaced": lambda hosts: [h for h in hosts if h["name"] != "cp-1"] + [{**hosts[0], **CP4}],
    "gone": lambda hosts: [{**h, "gone": True} if h["name"] == "cp-1" else h for h in hosts],
}


def test_a_new_first_control_plane_leaves_the_export_where_it_is(tmp_path, capsys):
    """cp-2 listed first (the entry point changes, nothing leaves): the export stays on cp-1, the host
    the deployed record names. It followed the entry point before: an update onto cp-2, empty there."""
    new = _stack(tmp_path, "new", hosts=lambda hosts: [hosts[1], hosts[0], *hosts[2:]])
    rc, out = _against(tmp_path, capsys, new, STACK_FILE)
    assert rc in (0, 4), out
    assert _export_host(tmp_path) == "192.0.2.10"  # cp-1, as deployed
    assert not [r for r in _nfs_rows(out) if r.startswith(("replace", "delete"))], _nfs_rows(out)
    assert "shared storage nfs://" not in out


@pytest.mark.parametrize("change", sorted(LEAVES))
def test_the_export_stays_on_its_host_when_the_first_control_plane_leaves(tmp_path, capsys, change):
    """storage.server: cp-3 on both sides: cp-1 (the entry point) removed, replaced or marked gone
    changes nothing of the export: no update (its host, clients stay), no replace, no delete."""
    old = _stack(tmp_path, "old", server="cp-3")
    new = _stack(tmp_path, "new", hosts=LEAVES[change], server="cp-3")
    rc, out = _against(tmp_path, capsys, new, old)
    assert rc == 4, out
    assert "REFUSED" not in out
    assert _export_host(tmp_path) == "192.0.2.30"  # cp-3, as deployed
    assert not [r for r in _nfs_rows(out) if r.startswith(("replace", "delete"))], _nfs_rows(out)
    assert "shared storage nfs://" not in out  # the claim's backend (the export's host) is the same


@pytest.mark.parametrize("change", sorted(LEAVES))
def test_the_export_host_leaving_is_refused_until_storage_server_names_the_new_one(tmp_path, capsys, change):
    """The committed side exports from cp-1; cp-1 leaving with no storage.server would move the
    export (empty) under running pods: refused, naming the key and the move. Before, exit 4 and an
    update that re-exported an empty directory from cp-2."""
    new = _stack(tmp_path, "new", hosts=LEAVES[change])
    rc, out = _against(tmp_path, capsys, new, STACK_FILE)
    assert rc == 2, out
    (refused,) = [line for line in out.splitlines() if "REFUSED" in line and "NFS export" in line]
    key = "gpu-cluster:hosts[0].gone" if change == "gone" else "gpu-cluster:storage.server"
    assert key in refused and "set gpu-cluster:storage.server to that host" in refused, refused
    assert ("lost unless restored" in refused) == (change == "gone"), refused


def test_an_explicit_move_is_an_update_shown_as_a_backend_change(tmp_path, capsys):
    """storage.server: cp-2 moves the export on purpose: the step is updated onto cp-2 (its create
    exports there; cp-1 keeps exporting until removed by hand), never replaced or deleted, and the
    claim's backend change is loud."""
    new = _stack(tmp_path, "new", server="cp-2")
    rc, out = _against(tmp_path, capsys, new, STACK_FILE)
    assert rc == 4, out
    assert _export_host(tmp_path) == "192.0.2.20"
    rows = _nfs_rows(out)
    assert rows and all(r.startswith("update") for r in rows), rows
    assert "!! shared storage nfs://192.0.2.10/srv/gpu-cluster/shared -> nfs://192.0.2.20/srv/gpu-cluster/shared" in out
