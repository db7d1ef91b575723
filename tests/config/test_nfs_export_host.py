"""storage.server and the provisioned NFS export's host (config/nfs_export_host.py, issue 34): the
export stays on the host the deployed record names whatever happens to the entry point; its host
leaving or gone is refused before anything registers, naming the key and the explicit move."""

from __future__ import annotations

from typing import Any

import pytest

from config.lab import DeployedLab
from tests.config.refusals import accepted, reported
from tests.conftest import host, lab_raw

VIP = {"address": "192.0.2.100", "interface": "ens18"}
PROVISION = {"provision": True, "exportPath": "/srv/gpu-cluster/shared"}


def _planes(*names: str, gone: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [host(n, f"192.0.2.{10 * int(n[3:])}", "control-plane", gone=n in gone) for n in names]


def _raw(planes: list[dict[str, Any]], **storage: Any) -> dict[str, Any]:
    return lab_raw(hosts=[*planes, host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP, storage={**PROVISION, **storage})


def _deployed(nfs_server: str | None = "cp-1 192.0.2.10") -> DeployedLab:
    record = {"kubernetesVersion": "1.34.2", "podCidr": "10.244.0.0/16", "serviceCidr": "10.96.0.0/12",
              "controlPlaneEndpoint": "192.0.2.100:6443", "controlPlane": "cp-1 192.0.2.10",
              "controlPlanes": "cp-1 192.0.2.10, cp-2 192.0.2.20, cp-3 192.0.2.30"}
    return DeployedLab.model_validate(record if nfs_server is None else {**record, "nfsServer": nfs_server})


def test_a_new_export_is_on_the_entry_point_and_recorded():
    cfg = accepted(_raw(_planes("cp-1", "cp-2", "cp-3")))
    assert cfg.export_host(None).name == "cp-1"
    assert cfg.deployed_record(None)["nfsServer"] == "cp-1 192.0.2.10"


def test_any_host_may_serve_it_a_worker_too():
    cfg = accepted(_raw(_planes("cp-1", "cp-2", "cp-3"), server="gpu-1"))
    assert cfg.export_host(_deployed()).name == "gpu-1"  # an explicit move
    assert not cfg.change_problems(_deployed())


@pytest.mark.parametrize(("server", "why"), [("cp-9", "is not a host"), ("cp-3", "is marked gone")])
def test_storage_server_names_a_host_not_gone(server, why):
    reported(_raw(_planes("cp-1", "cp-2", "cp-3", gone=("cp-3",)), server=server), "storage.server", why,
             "one of: cp-1, cp-2, gpu-1")


def test_storage_server_needs_provision():
    raw = lab_raw(storage={"nfs": {"server": "192.0.2.50", "path": "/export"}, "server": "cp-1"})
    reported(raw, "storage.server", "storage.provision: true")


def test_the_export_stays_on_its_recorded_host_when_the_entry_point_changes():
    cfg = accepted(_raw(_planes("cp-1", "cp-2", "cp-3", gone=("cp-1",))))
    assert cfg.entry_point.name == "cp-2"
    assert cfg.export_host(_deployed("cp-3 192.0.2.30")).name == "cp-3"  # not cp-2
    assert not cfg.change_problems(_deployed("cp-3 192.0.2.30"))


def test_its_host_removed_is_refused_naming_storage_server_and_the_copy():
    cfg = accepted(_raw(_planes("cp-2", "cp-3", "cp-4")))
    problems = dict(cfg.change_problems(_deployed()))
    assert "no longer in gpu-cluster:hosts" in problems["storage.server"]
    assert "copy the data to the new host's storage.exportPath (/srv/gpu-cluster/shared)" in problems["storage.server"]
    assert "one of: cp-2, cp-3, cp-4, gpu-1" in problems["storage.server"]
    assert cfg.export_host(_deployed()) is None


def test_its_host_gone_is_refused_saying_the_data_is_lost_unless_restored():
    cfg = accepted(_raw(_planes("cp-1", "cp-2", "cp-3", gone=("cp-1",))))
    problems = dict(cfg.change_problems(_deployed()))
    assert "lost unless restored" in problems["hosts[0].gone"]
    assert "set gpu-cluster:storage.server to that host" in problems["hosts[0].gone"]


def test_refused_with_allow_rebuild_too():
    cfg = accepted({**_raw(_planes("cp-2", "cp-3", "cp-4")), "allowRebuild": True})
    assert "storage.server" in dict(cfg.change_problems(_deployed()))


def test_an_older_record_without_nfs_server_means_the_first_deployed_control_plane():
    cfg = accepted(_raw(_planes("cp-2", "cp-3", "cp-4")))
    assert "storage.server" in dict(cfg.change_problems(_deployed(None)))  # cp-1 served it, and left
    kept = accepted(_raw(_planes("cp-1", "cp-2", "cp-3")))
    assert kept.export_host(_deployed(None)).name == "cp-1"


def test_no_provisioned_export_last_time_starts_on_the_entry_point():
    cfg = accepted(_raw(_planes("cp-2", "cp-3", "cp-4")))
    assert not cfg.change_problems(_deployed(""))
    assert cfg.export_host(_deployed("")).name == "cp-2"
