"""kube-vip on the lab's control planes: the static pod that holds the API's virtual IP
(gpu-cluster:kubeVip, config/control_planes.py) on one control plane at a time.

The manifest is the one kube-vip's own generator writes for a kubeadm control plane
(kube-vip.io/docs/installation/static: `kube-vip manifest pod --arp --controlplane --address <vip>
--interface <if> --leaderElection`; pkg/kubevip/config_generator.go, generatePodSpec): ARP mode, the
control-plane VIP only (no Service load balancing), Kubernetes leader election on the Lease
plndr-cp-lock in kube-system, the host network, NET_ADMIN and NET_RAW to add the address and send
gratuitous ARP, and admin.conf mounted for the API (reached as `kubernetes`, mapped to 127.0.0.1,
so each instance talks to its own API server). The image is pinned in components/versions.py and
pulled only when missing.

When it is written (one step per control plane, stdin: the manifest):
  - the first control plane: BEFORE `kubeadm init`, which waits for the API at the VIP. Since
    Kubernetes 1.29 kubeadm's admin.conf is bound to cluster-admin by a ClusterRoleBinding that init
    creates only once the API answers, so kube-vip cannot take its Lease with it during init: the
    chicken-and-egg of kube-vip issue #684 (github.com/kube-vip/kube-vip/issues/684). The documented
    workaround, followed here: mount super-admin.conf (system:masters, written by init on the first
    control plane only) until init is done, then admin.conf again (host_steps/cluster/
    kube_vip_manifest.sh picks super-admin.conf while the host has no cluster yet;
    kubeadm_init.sh switches back after init).
  - a joining control plane: AFTER `kubeadm join`, whose preflight refuses a non-empty
    /etc/kubernetes/manifests (DirAvailable--etc-kubernetes-manifests); the VIP is already served
    by the first, and join writes this host's admin.conf.
Its delete removes the manifest (kubelet stops the pod); `kubeadm reset` empties the directory too.
"""

from __future__ import annotations

from typing import Any

import pulumi
import yaml
from pulumi_command import remote

from components import versions
from components.lab import scripts
from config.control_planes import API_SERVER_PORT, KubeVip

MANIFEST_PATH = scripts.KUBE_VIP_MANIFEST
ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"  # kubeadm >= 1.29, first control plane only
LEASE = "plndr-cp-lock"
# kube-vip's generator defaults for `manifest pod` (seconds): how fast the VIP moves when its
# holder dies, at one Lease write per second per control plane.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 5, 3, 1
NODE_NAME_ENV = "vip_nodename"

# Every environment variable kube-vip v1.0.3 (components/versions.py KUBE_VIP_IMAGE) reads, from its
# source at tag v1.0.3 (commit 28bec598): the names are the constants of pkg/kubevip/config_envvar.go
# that kubevip.ParseEnvironment passes to os.Getenv/os.LookupEnv (pkg/kubevip/config_environment.go:
# 19-707), plus vip_configmap (cmd/kube-vip.go:230). A name outside it is silently ignored: `vip_cidr`
# is gone (the VIP's mask is vip_subnet, defaulting to /32 for an IPv4 address, cmd/kube-vip.go:289-290).
# The Go module proxy does not serve github.com/kube-vip/kube-vip@v1.0.3, so this list is pinned
# here and must be read again from the source when the image is bumped.
KUBE_VIP_READS = frozenset({
    "address", "annotation", "backend_health_check_interval", "config_file", "dhcp_mode",
    "disable_service_updates", "dns_mode", "enable_endpoints", "enable_node_labeling",
    "enable_service_security", "enable_upnp", "health_check_port", "iptables_backend", "k8s_config_file",
    "kubernetes_addr", "mirror_dest_interface", "port", "prometheus_server",
    "bgp_as", "bgp_enable", "bgp_hold_time", "bgp_keepalive_interval", "bgp_multihop", "bgp_peeraddress",
    "bgp_peeras", "bgp_peerpass", "bgp_peers", "bgp_routerid", "bgp_routerinterface", "bgp_sourceif",
    "bgp_sourceip", "mpbgp_ipv4", "mpbgp_ipv6", "mpbgp_nexthop",
    "zebra_enable", "zebra_software_name", "zebra_url", "zebra_version",
    "cp_detect", "cp_enable", "cp_namespace",
    "egress_clean", "egress_podcidr", "egress_servicecidr", "egress_withnftables",
    "lb_class_legacy_handling", "lb_class_name", "lb_class_only", "lb_enable", "lb_fwdmethod", "lb_port",
    "svc_election", "svc_enable", "svc_leasename", "svc_namespace",
    "vip_address", "vip_arp", "vip_arpRate", "vip_cleanroutingtable", "vip_configmap", "vip_ddns",
    "vip_interface", "vip_interfaceloglobal", "vip_leaderelection", "vip_leaseannotations",
    "vip_leaseduration", "vip_leasename", "vip_loglevel", "vip_nodename", "vip_preserve_on_leadership_loss",
    "vip_renewdeadline", "vip_retryperiod", "vip_routingprotocol", "vip_routingtable", "vip_routingtableid",
    "vip_routingtabletype", "vip_servicesinterface", "vip_singlenode", "vip_startleader", "vip_subnet",
    "vip_wireguard",
})


def static_pod(vip: KubeVip, image: str = versions.KUBE_VIP_IMAGE) -> dict[str, Any]:
    """The kube-vip Pod for /etc/kubernetes/manifests (admin.conf mounted: see the module docstring)."""
    env = {
        "vip_arp": "true",
        "port": str(API_SERVER_PORT),
        "vip_interface": vip.interface,
        "cp_enable": "true",
        "cp_namespace": "kube-system",
        "vip_ddns": "false",
        "vip_leaderelection": "true",
        "vip_leasename": LEASE,
        "vip_leaseduration": str(LEASE_DURATION),
        "vip_renewdeadline": str(RENEW_DEADLINE),
        "vip_retryperiod": str(RETRY_PERIOD),
        "address": str(vip.address),
    }
    # The Lease holder's identity: the node's name, as kube-vip's generator writes it
    # (config_generator.go:195-201); unset, v1.0.3 falls back to the hostname with a warning
    # (pkg/manager/manager.go:85-92).
    node_name = {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "containers": [{
                "name": "kube-vip",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["manager"],
                "env": [*({"name": k, "value": v} for k, v in env.items()), node_name],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "volumeMounts": [{"name": "kubeconfig", "mountPath": ADMIN_CONF}],
            }],
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "hostNetwork": True,
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": ADMIN_CONF}}],
        },
    }


def manifest(vip: KubeVip) -> str:
    return yaml.safe_dump(static_pod(vip), sort_keys=False)


def kube_vip_step(name: str, connection: remote.ConnectionArgs, vip: KubeVip, parent: pulumi.Resource,
                  depends_on: list[pulumi.Resource]) -> remote.Command:
    """The step writing the manifest on one control plane (before init on the first, after join on
    the others: the caller's `depends_on`)."""
    return remote.Command(
        f"{name}-kube-vip",
        connection=connection,
        create=scripts.as_root(scripts.kube_vip_manifest()),
        delete=scripts.as_root(scripts.kube_vip_manifest_delete()),
        stdin=manifest(vip),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on, delete_before_replace=True),
    )
