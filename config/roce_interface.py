"""network.roce.interface against the node's own network. The host-device CNI moves the named netdev
out of the node into the training pod (docs/rdma.md): naming the interface the node is reached on
takes the node off the network (SSH, the kubelet's link to the API, its pods' traffic) until the
pod ends. Refused where the program knows the node's primary interface, said loudly in the plan
(a render warning) where it cannot:

- dev: minikube's node (docker and podman drivers: the node container, whose one interface is eth0
  on minikube's network, 192.168.49.0/24, where `minikube ip` answers; kvm2: the VM's eth0 on its
  private network) and kind's nodes (docker containers, eth0) are reached on eth0: eth0 is refused.
  Another cluster's node may use any name: warned.
- lab: hosts[] do not name their interfaces; kubeVip.interface is the control planes' interface on
  the node network, so it is refused where a GPU host is a control plane. Otherwise warned.
- gke: network.roce is refused altogether (config/training.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from config.control_planes import KubeVip
from config.errors import Problems
from config.lab_hosts import Host
from config.training import RoceConfig

# The interface minikube's and kind's nodes are reached on (see above).
DEV_PRIMARY_INTERFACE = "eth0"
_MOVED = "the host-device CNI moves it into the training pod and the node drops off the network until the pod ends"


def dev_roce_interface_problems(roce: RoceConfig | None) -> Problems:
    """DevStack's part: eth0 is the node's own interface on minikube and kind."""
    if roce is None or roce.interface != DEV_PRIMARY_INTERFACE:
        return []
    return [("network.roce.interface", f"{DEV_PRIMARY_INTERFACE} is the node's own interface on minikube "
                                       f"(docker, podman and kvm2 drivers) and kind: {_MOVED}; name the RoCE "
                                       "NIC's own netdev as the node sees it, e.g. 'ens192' (docs/rdma.md)")]


def lab_roce_interface_problems(roce: RoceConfig | None, kube_vip: KubeVip | None,
                                control_planes: Sequence[Host]) -> Problems:
    """LabStack's part: kubeVip.interface is the control planes' own network, refused where a GPU
    control plane would hand it over."""
    if roce is None or kube_vip is None or roce.interface != kube_vip.interface:
        return []
    gpu_cps = [h.name for h in control_planes if h.is_gpu]
    if not gpu_cps:
        return []
    return [("network.roce.interface", f"{roce.interface} is kubeVip.interface, the control planes' own "
                                       f"network, and GPU control plane {', '.join(gpu_cps)} would hand it "
                                       f"over: {_MOVED} (and the API's virtual IP with it); name the RoCE "
                                       "NIC's own netdev (docs/rdma.md)")]


def unknown_interface_warning(roce: RoceConfig, why_unknown: str, check: str) -> str:
    """render's warning where the plan cannot tell whether network.roce.interface is a node's own."""
    return (f"gpu-cluster:network.roce.interface {roce.interface}: {why_unknown}, so the plan cannot tell whether "
            f"it is a node's own network interface; if it is, {_MOVED}: {check} (docs/rdma.md)")
