"""kube-vip's static pod sets only settings the pinned kube-vip reads, and names its Lease holder
after the node.

Held to kube-vip's source at the pinned tag (v1.0.3), read into kube_vip.KUBE_VIP_READS with its
citations: the Go module proxy does not serve github.com/kube-vip/kube-vip@v1.0.3, so CI cannot read
the module itself. A name kube-vip does not read is silently ignored (`vip_cidr`, which older
manifests set, is one), so the setting the operator thought was made is not.
"""

from __future__ import annotations

import kubernetes_validate
import yaml

from components import versions
from components.lab import kube_vip
from config.control_planes import KubeVip

VIP = KubeVip(address="192.0.2.100", interface="ens18")


def container_env() -> list[dict]:
    pod = yaml.safe_load(kube_vip.manifest(VIP))
    assert kubernetes_validate.validate(pod, "1.34", strict=True) == "1.34"
    (container,) = pod["spec"]["containers"]
    return list(container["env"])


def test_the_reads_list_is_for_the_pinned_image():
    # bumping the image means reading its source again (kube_vip.KUBE_VIP_READS' comment says where)
    assert versions.KUBE_VIP_IMAGE == "ghcr.io/kube-vip/kube-vip:v1.0.3"


def test_every_setting_is_one_kube_vip_reads():
    names = [entry["name"] for entry in container_env()]
    assert len(names) == len(set(names)), names
    assert set(names) - kube_vip.KUBE_VIP_READS == set()


def test_the_lease_holder_is_the_node_name_from_the_downward_api():
    (entry,) = [e for e in container_env() if e["name"] == "vip_nodename"]
    assert entry == {"name": "vip_nodename", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def test_the_control_plane_vip_settings_are_all_there():
    env = {e["name"]: e.get("value") for e in container_env()}
    assert env["address"] == "192.0.2.100"
    assert env["vip_interface"] == "ens18"
    assert env["port"] == "6443"
    assert (env["vip_arp"], env["cp_enable"], env["vip_leaderelection"]) == ("true", "true", "true")
    assert env["vip_leasename"] == kube_vip.LEASE
