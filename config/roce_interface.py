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

from typing import Any

from config.errors import Problems

# The interface minikube's and kind's nodes are reached on (see above).
DEV_PRIMARY_INTERFACE = "eth0"
_MOVED = "the host-device CNI moves it into the training pod and the node drops off the network until the pod ends"


def roce_interface_problems(stack: Any) -> Problems:
    """network.roce.interface that is a node's primary interface, where the config tells."""
    roce, platform = stack.network.roce, str(stack.platform)
    if roce is None:
        return []
    if platform == "dev" and roce.interface == DEV_PRIMARY_INTERFACE:
        return [("network.roce.interface", f"{DEV_PRIMARY_INTERFACE} is the node's own interface on minikube "
                                           f"(docker, podman and kvm2 drivers) and kind: {_MOVED}; name the RoCE "
                                           "NIC's own netdev as the node sees it, e.g. 'ens192' (docs/rdma.md)")]
    if platform == "lab" and stack.kube_vip is not None and roce.interface == stack.kube_vip.interface:
        gpu_cps = [h.name for h in stack.control_planes if h.is_gpu]
        if gpu_cps:
            return [("network.roce.interface", f"{roce.interface} is kubeVip.interface, the control planes' own "
                                               f"network, and GPU control plane {', '.join(gpu_cps)} would hand it "
                                               f"over: {_MOVED} (and the API's virtual IP with it); name the RoCE "
                                               "NIC's own netdev (docs/rdma.md)")]
    return []


def roce_interface_warnings(stack: Any) -> list[str]:
    """render's warning where the plan cannot tell whether network.roce.interface is a node's own."""
    roce, platform = stack.network.roce, str(stack.platform)
    if roce is None or platform not in ("lab", "dev") or roce_interface_problems(stack):
        return []
    if platform == "lab":
        where, check = ("hosts[] do not name their interfaces",
                        f"`ip -br -4 addr show {roce.interface}` on each GPU host must show none of hosts[].address")
    else:
        where, check = ("the existing cluster's nodes are not known offline",
                        f"`ip -br -4 addr show {roce.interface}` on each of gpuNodes must not show the node's "
                        "InternalIP (`kubectl get nodes -o wide`)")
    return [f"gpu-cluster:network.roce.interface {roce.interface}: {where}, so the plan cannot tell whether it is "
            f"a node's own network interface; if it is, {_MOVED}: {check} (docs/rdma.md)"]
