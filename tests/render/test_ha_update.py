"""`render lab-ha --against OLD` on the HA example (Pulumi.lab-ha.yaml): a control plane added or
removed is shown (`!!`, exit 4, etcd's membership and how many failures it survives), 3 -> 1 too
(issue 34: etcd itself refuses a removal that cannot commit, config/control_planes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from render import __main__ as render_main
from render import program
from tests.conftest import PROJECT_DIR, stack_config_with

STACK_FILE = PROJECT_DIR / "Pulumi.lab-ha.yaml"


def _hosts() -> list[dict[str, Any]]:
    return list(yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:hosts"])


def _control_plane(name: str, address: str) -> dict[str, Any]:
    return {**_hosts()[0], "name": name, "address": address}


def _older(tmp_path: Path, hosts: list[dict[str, Any]]) -> Path:
    data = yaml.safe_load(STACK_FILE.read_text())
    data["config"]["gpu-cluster:hosts"] = hosts
    path = tmp_path / "old-Pulumi.lab-ha.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _against(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: Path) -> tuple[int, str, str]:
    rc = render_main.main(["lab-ha", "--out", str(tmp_path / "out"), "--no-check", "--against", str(old)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _update_to(tmp_path: Path, capsys: pytest.CaptureFixture[str], hosts: list[dict[str, Any]],
               export_on: str | None = None) -> tuple[int, str, str]:
    """The committed lab-ha as deployed, updated to `hosts`; `export_on`: storage.server on both sides."""
    older = STACK_FILE
    path = tmp_path / "new-Pulumi.lab-ha.yaml"
    data = yaml.safe_load(STACK_FILE.read_text())
    if export_on:
        data["config"]["gpu-cluster:storage"]["server"] = export_on
        older = tmp_path / "old-Pulumi.lab-ha.yaml"
        older.write_text(yaml.safe_dump(data))
    data["config"]["gpu-cluster:hosts"] = hosts
    path.write_text(yaml.safe_dump(data))
    real = program.stack_config
    new_config = real("lab-ha", stack_file=path)

    def stack_config(stack, *a, **k):
        return new_config if stack == "lab-ha" and not k.get("stack_file") else real(stack, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(program, "stack_config", stack_config)
        return _against(tmp_path, capsys, older)


def test_a_replaced_control_plane_is_shown_as_one_removal_and_one_addition(tmp_path, capsys):
    # the older side ran cp-4 where the committed file has cp-3
    hosts = [h if h["name"] != "cp-3" else _control_plane("cp-4", "192.0.2.40") for h in _hosts()]
    rc, out, err = _against(tmp_path, capsys, _older(tmp_path, hosts))
    assert rc == 4, err
    loud = [line for line in out.splitlines() if line.startswith("!! control planes")]
    assert loud == [
        "!! control planes removed (gpu-cluster:hosts): cp-4 192.0.2.40: drained, their etcd members removed one at "
        "a time from the first control plane, then kubeadm reset; 3 control planes (etcd survives 1 down) -> "
        "3 control planes (etcd survives 1 down)",
        "!! control planes added (gpu-cluster:hosts): cp-3 192.0.2.30: each joins etcd as a new member, one after "
        "another (kubeadm join --control-plane); 3 control planes (etcd survives 1 down) -> 3 control planes "
        "(etcd survives 1 down)",
    ], out
    assert "REFUSED" not in out


def test_five_to_three_is_shown_and_allowed(tmp_path, capsys):
    five = [*_hosts(), _control_plane("cp-4", "192.0.2.40"), _control_plane("cp-5", "192.0.2.50")]
    rc, out, err = _against(tmp_path, capsys, _older(tmp_path, five))
    assert rc == 4, err
    (line,) = [line for line in out.splitlines() if line.startswith("!! control planes")]
    assert "removed (gpu-cluster:hosts): cp-4 192.0.2.40, cp-5 192.0.2.50" in line
    assert line.endswith("5 control planes (etcd survives 2 down) -> 3 control planes (etcd survives 1 down)")
    assert "REFUSED" not in out


def test_three_to_one_is_a_control_plane_change(tmp_path, capsys, monkeypatch):
    """Issue 34: 3 -> 1 in one `up` (2 is no allowed count) is a control-plane change, exit 4:
    the drain step removes cp-2's and cp-3's members one at a time from cp-1 (etcd refuses one that
    cannot commit: test_gone_hosts_real.py), then each host is reset. The new side: the committed
    HA stack shrunk to its first control plane; the older side: the committed file as deployed."""
    shrunk = stack_config_with("lab-ha", hosts=[h for h in _hosts() if h["name"] not in ("cp-2", "cp-3")])
    real = program.stack_config
    monkeypatch.setattr(program, "stack_config",
                        lambda stack, *a, **k: shrunk if stack == "lab-ha" and not k.get("stack_file")
                        else real(stack, *a, **k))
    rc, out, err = _against(tmp_path, capsys, STACK_FILE)
    assert rc == 4, err
    assert "REFUSED" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("!! control planes")]
    assert line.startswith("!! control planes removed (gpu-cluster:hosts): cp-2 192.0.2.20, cp-3 192.0.2.30: "
                           "drained, their etcd members removed one at a time"), line
    assert line.endswith("3 control planes (etcd survives 1 down) -> 1 control plane (etcd survives 0 down)"), line
    assert "!! UPDATE membership-drain" in out
    for h in ("cp-2", "cp-3"):
        assert f"!! DELETE {h}-join: its delete resets a node (kubeadm reset) on" in out, out


def test_a_replaced_control_plane_leaves_the_nfs_export_in_place(tmp_path, capsys):
    """Issue 34: the export's client list changes (cp-4 out, cp-3 in); the export is updated in
    place (its create run again, one exports file rewritten), never deleted or replaced."""
    hosts = [h if h["name"] != "cp-3" else _control_plane("cp-4", "192.0.2.40") for h in _hosts()]
    rc, out, err = _against(tmp_path, capsys, _older(tmp_path, hosts))
    assert rc == 4, err
    (row,) = [line.split() for line in out.splitlines() if line.split()[:1] == ["shared-storage-nfs-server"]]
    assert row[1] == "update", out
    section = ""
    for line in out.splitlines():
        if line and not line.startswith(" "):
            section = line.split(" (")[0]
        assert not (section in ("replace", "delete") and "nfs-server" in line), line


@pytest.mark.parametrize("change", ["removed", "replaced", "gone"])
def test_the_first_control_plane_leaves_in_one_up_without_a_rebuild(tmp_path, capsys, change):
    """Issue 34, no special first server: cp-1 (where kubeadm init ran) removed (with cp-2: 3 -> 1),
    replaced by cp-4, or marked gone is a control-plane change (exit 4), not a rebuild (exit 2): the
    init keeps its triggers (the recorded identity) and moves to the next control plane, which
    keeps its own join; nothing of the cluster is replaced, and no host that stays is reset or drained."""
    cp4 = _control_plane("cp-4", "192.0.2.40")
    newer = {"removed": [h for h in _hosts() if h["name"] not in ("cp-1", "cp-2")],  # 3 -> 1: cp-3 alone
             "replaced": [h for h in _hosts() if h["name"] != "cp-1"] + [cp4],
             "gone": [{**h, "gone": True} if h["name"] == "cp-1" else h for h in _hosts()]}[change]
    # The export on cp-3 on both sides: cp-1 serving it could not leave without storage.server
    # naming its next host (tests/render/test_nfs_export_update.py).
    rc, out, err = _update_to(tmp_path, capsys, newer, export_on="cp-3")
    assert rc == 4, out + err
    assert "REFUSED" not in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()
            if line.startswith("  ") and len(line.split()) > 2 and not line.split()[0].startswith(("runs", "changed"))}
    assert rows.get("control-plane-init") == "update", out  # its connection moves to cp-2: no reset, no init
    stay = ("cp-3",) if change == "removed" else ("cp-2", "cp-3")
    assert not [h for h in stay if f"{h}-join" in rows], out  # untouched
    assert not any(v.startswith("replace") for k, v in rows.items() if k.startswith(("control-plane", *stay)))
    assert "!! UPDATE control-plane-init" not in out  # the update script finds the version in place
    loud = [line for line in out.splitlines() if line.startswith("!! ")]
    assert not [line for line in loud if any(h in line.split(":")[0] for h in stay)], loud
    if change != "gone":
        assert any(line.startswith("!! control planes removed (gpu-cluster:hosts): cp-1 192.0.2.10") for line in loud)
        # Removed alive, cp-1 is reset like any other control plane (its init step moved; this step's
        # delete, components/lab/control_plane.py init_host_reset), after the drain step's etcd removal.
        assert rows.get("control-plane-init-host-reset") == "delete", out
        assert "!! DELETE control-plane-init-host-reset: its delete resets a node (kubeadm reset) on 192.0.2.10" in loud
    else:
        assert "control-plane-init-host-reset" not in rows, out  # gone: retained, nothing connects to it


def _rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in out.splitlines()
            if line.startswith("  ") and len(line.split()) > 2 and not line.split()[0].startswith(("runs", "changed"))}


def test_the_init_host_at_a_new_address_joins_and_its_old_address_is_reset(tmp_path, capsys):
    """cp-1 (where kubeadm init ran) at another address is another machine, or a renumbered one whose
    certificates and etcd peer URL name the old address: like any control plane whose address
    changes, the old one is drained and reset and the new one joins. It used to be taken for the
    init host by its name alone: no join, and the reset step replaced (kubeadm reset on the old
    address, nothing rejoining)."""
    hosts = _hosts()
    moved = [{**hosts[0], "address": "192.0.2.40"}]
    rc, out, err = _update_to(tmp_path, capsys, [hosts[1], *moved, *hosts[2:]])  # cp-2 first: deployed
    assert rc == 4, out + err
    assert "REFUSED" not in out
    rows = _rows(out)
    assert rows.get("cp-1-join") == "create", out
    assert rows.get("control-plane-init-host-reset") == "delete", out
    assert "!! DELETE control-plane-init-host-reset: its delete resets a node (kubeadm reset) on 192.0.2.10" in out


def test_a_first_control_plane_not_yet_in_the_cluster_is_refused(tmp_path, capsys):
    """The entry point's steps (the init step's update, the kubeconfig) run before any join: a host
    listed first that was no control plane of the cluster would find no admin.conf there."""
    hosts = _hosts()
    rc, out, err = _update_to(tmp_path, capsys, [{**hosts[0], "address": "192.0.2.40"}, *hosts[1:]])
    assert rc == 2, out + err
    assert "REFUSED gpu-cluster:hosts[0]: cp-1 192.0.2.40 would be the first control plane" in out, out
    assert "list a deployed control plane first" in out
