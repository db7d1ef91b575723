"""Which host the provisioned NFS export (storage.provision) lives on, and what is refused when that
host leaves (issue 34). The export's host is a fact of its own, not the entry point's: storage.server
when set, else the host the last `up` recorded in its `deployed` output (read the way the init
identity is), else, for a new export, the entry point. So a control plane removed, replaced or marked
gone never moves the share under running training pods; a move is explicit (storage.server), after
the data is copied (docs/operations/nodes.md#the-exports-host)."""

from __future__ import annotations

from collections.abc import Sequence

from config.errors import Problems
from config.lab_hosts import Host

MOVE = ("{verb} the new host's storage.exportPath ({path}), then set gpu-cluster:storage.server to that host "
        "(one of: {names}); `--against` then shows the backend change (docs/operations/nodes.md#the-exports-host)")


def recorded_export_host(nfs_server: str | None, control_planes: Sequence[str]) -> str | None:
    """The host name the deployed export runs on, from the `deployed` record: its nfsServer ("name
    address"; "": no provisioned export then), or for a record written before that key, the first
    deployed control plane (where that version served it; `control_planes`: "name address" each)."""
    if nfs_server is None:
        return control_planes[0].split(" ")[0] if control_planes else None
    return nfs_server.split(" ")[0] or None


def export_host(hosts: Sequence[Host], server: str | None, recorded: str | None, entry: Host) -> Host | None:
    """storage.server's host, else the recorded one (None when it left or is gone: refused by
    export_host_problems), else `entry` (a new export)."""
    name = server or recorded
    if name is None:
        return entry
    return next((h for h in hosts if h.name == name and not h.gone), None)


def server_problems(hosts: Sequence[Host], server: str | None, provision: bool) -> Problems:
    """storage.server names a host of `hosts` that is not gone (without storage.provision it does
    nothing: config/inert_keys.py says so)."""
    if server is None or not provision:
        return []
    names = [h.name for h in hosts if not h.gone]
    if server not in names:
        why = "is marked gone" if any(h.name == server for h in hosts) else "is not a host"
        return [("storage.server", f"{server!r} {why}: name a host of gpu-cluster:hosts that is not gone "
                                   f"(one of: {', '.join(names) or 'none'})")]
    return []


def export_host_problems(hosts: Sequence[Host], server: str | None, recorded: str | None, export_path: str) -> Problems:
    """The recorded export host left `hosts` or is marked gone, and storage.server names no host to
    take over: refused, since the export would otherwise move (empty) under running training pods."""
    if server is not None or recorded is None:
        return []
    names = ", ".join(h.name for h in hosts if not h.gone) or "none"
    for i, h in enumerate(hosts):
        if h.name == recorded and h.gone:
            return [(f"hosts[{i}].gone", f"{recorded} serves the NFS export (storage.provision) and is marked gone: the "
                                         "training data on it is lost unless restored from a copy: "
                                         + MOVE.format(verb="restore it into", path=export_path, names=names))]
        if h.name == recorded:
            return []
    return [("storage.server", f"the NFS export (storage.provision) is on {recorded}, which is no longer in "
                               f"gpu-cluster:hosts; the export does not move by itself (training pods mount it): "
                               + MOVE.format(verb="copy the data to", path=export_path, names=names))]
