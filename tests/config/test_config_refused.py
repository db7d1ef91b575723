"""Refused stack config, one row per bad input: the ConfigError names the key and what is allowed,
before anything is registered. The committed stack files still parse."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

import config
from components.training import launch
from config.fields import check_host_key, host_dir_problem
from render import program
from tests.conftest import ED25519, PROJECT_DIR, SEED_002_ROCE, host, lab_raw

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
GCP = {"gcp:project": "my-gpu-project", "gcp:region": "us-central1"}


def wire(*fields: bytes) -> str:
    """base64 of an SSH public key blob made of these length-prefixed strings."""
    return base64.b64encode(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).decode()


# --- base configs and mutations ----------------------------------------------------------------


def lab(**overrides: Any) -> dict[str, Any]:
    return lab_raw(**overrides)


def lab_host(i: int, **changes: Any) -> dict[str, Any]:
    raw = lab_raw()
    raw["hosts"][i].update(changes)
    return raw


def lab_training(hosts: list[dict[str, Any]] | None = None, **training: Any) -> dict[str, Any]:
    raw = lab_raw(training={"enabled": True, "image": IMAGE, **training}, storage={"provision": True})
    if hosts is not None:
        raw["hosts"] = hosts
    return raw


def roce(**changes: Any) -> dict[str, Any]:
    """network with rdma and seed 002's NIC, keys of network.roce changed."""
    return {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, **changes}}


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"], **overrides}


L4 = {
    "name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
    "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 4},
}
A100 = {
    "name": "a100", "machineType": "a2-highgpu-1g", "accelerator": {"type": "nvidia-tesla-a100", "count": 1},
    "zones": ["us-central1-a", "us-central1-b"], "autoscaling": {"minNodes": 1, "maxNodes": 2},
}


def gke(gpu: dict[str, Any] | None = None, gcp: dict[str, str] | None = None, top: dict[str, Any] | None = None,
        **gke_keys: Any) -> dict[str, Any]:
    """A valid gke config (GPU pools L4 and A100) with gke.* keys changed; gcp: keys ride along."""
    raw: dict[str, Any] = {
        "platform": "gke",
        "gke": {"zone": "us-central1-a", "gpuPools": copy.deepcopy([L4, A100]), **gke_keys},
        **GCP, **(gcp or {}), **(top or {}),
    }
    if gpu is not None:
        raw["gpu"] = gpu
    return raw


def gke_pool(i: int = 0, gpu: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    raw = gke(gpu=gpu)
    raw["gke"]["gpuPools"][i].update(changes)
    return raw


def gke_operator(labels: dict[str, str]) -> dict[str, Any]:
    """gpu.stack operator (drivers from Google's installer) with labels on the first pool."""
    raw = gke(gpu={"stack": "operator"})
    for pool in raw["gke"]["gpuPools"]:
        pool["driver"] = "installer-cos"
    raw["gke"]["gpuPools"][0]["labels"] = labels
    return raw


def gke_training(**training: Any) -> dict[str, Any]:
    return gke(top={"training": {"enabled": True, "image": IMAGE, **training}})


def refusal(raw: dict[str, Any]) -> config.ConfigError:
    """The ConfigError config.parse raises for `raw` (gcp: keys included, as load() hands them over)."""
    secret_keys = {"sshPrivateKey"} if raw.get("platform") == "lab" else set()
    with pytest.raises(config.ConfigError) as info:
        config.parse(copy.deepcopy(raw), secret_keys)
    return info.value


def without(raw: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != key}


# --- the table -------------------------------------------------------------------------------

Row = tuple[str, Callable[[], dict[str, Any]], str, str]

ROWS: list[Row] = [
    # 1. a trailing newline passes no pattern check; a host key is not stripped into shape
    ("host name + newline", lambda: lab_host(0, name="cp-1\n"), "hosts[0].name", "RFC 1123"),
    ("kubernetesVersion + newline", lambda: lab(kubernetesVersion="1.34.2\n"), "kubernetesVersion", "full version"),
    ("containerdVersion + newline", lambda: lab(containerdVersion="1.7.27-1\n"), "containerdVersion", "Debian"),
    ("driver version + newline", lambda: lab(nvidiaDriver={"version": "570.172.08-0ubuntu1\n"}),
     "nvidiaDriver.version", "Debian package version"),
    ("image tag + newline", lambda: lab(training={"image": IMAGE + "\n"}), "training.image", "not a valid image tag"),
    ("quantity + newline", lambda: lab(training={"cpuLimit": "8\n"}), "training.cpuLimit", "Kubernetes quantity"),
    ("socketIfname + newline", lambda: lab(training={"nccl": {"socketIfname": "eth0\n"}}),
     "training.nccl.socketIfname", "interface names"),
    ("migProfile + newline", lambda: lab(gpu={"sharing": {"migProfile": "all-1g.10gb\n"}}),
     "gpu.sharing.migProfile", "MIG manager profile"),
    ("retention + newline", lambda: lab(monitoring={"retention": "15d\n"}), "monitoring.retention", "duration"),
    ("cluster name + newline", lambda: gke(clusterName="gpu-cluster\n"), "gke.clusterName", "at most 40"),
    ("zone + newline", lambda: gke(zone="us-central1-a\n"), "gke.zone", "not a Compute Engine zone"),
    ("gcp:project + newline", lambda: gke(gcp={"gcp:project": "my-gpu-project\n"}), "gcp:project", "project id"),
    ("gcp:region + newline", lambda: gke(gcp={"gcp:region": "us-central1\n"}), "gcp:region", "known Compute Engine region"),
    ("host key + newline", lambda: lab_host(0, hostKey=ED25519 + "\n"), "hosts[0].hostKey", "ssh-keyscan"),
    ("host key, newline inside", lambda: lab_host(0, hostKey=ED25519.replace(" ", "\n")), "hosts[0].hostKey",
     "'<type> <base64>'"),
    ("host key, leading space", lambda: lab_host(0, hostKey=" " + ED25519), "hosts[0].hostKey", "ssh-keyscan"),
    # 2. host directories: normalised, safe characters, not a system directory
    ("exportPath /", lambda: lab(storage={"provision": True, "exportPath": "/"}), "storage.exportPath", "absolute"),
    ("exportPath /etc", lambda: lab(storage={"provision": True, "exportPath": "/etc"}), "storage.exportPath",
     "/etc, a system directory"),
    ("exportPath under /etc", lambda: lab(storage={"provision": True, "exportPath": "/etc/exports.d"}),
     "storage.exportPath", "under /etc"),
    ("exportPath /root", lambda: lab(storage={"provision": True, "exportPath": "/root"}), "storage.exportPath",
     "system directory"),
    ("exportPath under /usr", lambda: lab(storage={"provision": True, "exportPath": "/usr/local/share"}),
     "storage.exportPath", "under /usr"),
    ("exportPath under /lib64", lambda: lab(storage={"provision": True, "exportPath": "/lib64/x"}),
     "storage.exportPath", "under /lib64"),
    ("exportPath /boot", lambda: lab(storage={"provision": True, "exportPath": "/boot"}), "storage.exportPath",
     "system directory"),
    ("exportPath /var", lambda: lab(storage={"provision": True, "exportPath": "/var"}), "storage.exportPath",
     "two or more levels deep"),
    ("exportPath /var/lib", lambda: lab(storage={"provision": True, "exportPath": "/var/lib"}), "storage.exportPath",
     "shared system directory"),
    ("exportPath /var/lib/kubelet", lambda: lab(storage={"provision": True, "exportPath": "/var/lib/kubelet"}),
     "storage.exportPath", "/var/lib/kubelet"),
    ("exportPath under /var/lib/etcd", lambda: lab(storage={"provision": True, "exportPath": "/var/lib/etcd/member"}),
     "storage.exportPath", "under /var/lib/etcd"),
    ("exportPath /home", lambda: lab(storage={"provision": True, "exportPath": "/home"}), "storage.exportPath",
     "top-level"),
    ("exportPath /tmp", lambda: lab(storage={"provision": True, "exportPath": "/tmp"}), "storage.exportPath",
     "emptied at every boot"),
    ("exportPath with ..", lambda: lab(storage={"provision": True, "exportPath": "/srv/../etc"}),
     "storage.exportPath", "no '.', '..'"),
    ("exportPath with //", lambda: lab(storage={"provision": True, "exportPath": "/srv//shared"}),
     "storage.exportPath", "normalised"),
    ("exportPath with trailing /", lambda: lab(storage={"provision": True, "exportPath": "/srv/shared/"}),
     "storage.exportPath", "trailing '/'"),
    ("exportPath with a space", lambda: lab(storage={"provision": True, "exportPath": "/srv/my share"}),
     "storage.exportPath", "A-Z a-z 0-9 . _ -"),
    ("exportPath with $()", lambda: lab(storage={"provision": True, "exportPath": "/srv/$(reboot)"}),
     "storage.exportPath", "A-Z a-z 0-9 . _ -"),
    ("hostPath /etc", lambda: dev(storage={"hostPath": "/etc"}), "storage.hostPath", "system directory"),
    ("hostPath under /proc", lambda: dev(storage={"hostPath": "/proc/1"}), "storage.hostPath", "under /proc"),
    ("hostPath /run/containerd", lambda: dev(storage={"hostPath": "/run/containerd"}), "storage.hostPath",
     "under /run"),
    ("hostPath kubelet pods", lambda: dev(storage={"hostPath": "/var/lib/kubelet/pods"}), "storage.hostPath",
     "under /var/lib/kubelet"),
    ("hostPath with ..", lambda: dev(storage={"hostPath": "/data/../etc"}), "storage.hostPath", "no '.', '..'"),
    ("hostPath relative", lambda: dev(storage={"hostPath": "data/shared"}), "storage.hostPath", "absolute"),
    ("nfs.path with ..", lambda: lab(storage={"nfs": {"server": "nas.lab.example", "path": "/export/../etc"}}),
     "storage.nfs.path", "no '.', '..'"),
    ("nfs.path trailing /", lambda: lab(storage={"nfs": {"server": "nas.lab.example", "path": "/export/gpu/"}}),
     "storage.nfs.path", "trailing '/'"),
    ("nfs.path with a quote", lambda: lab(storage={"nfs": {"server": "nas.lab.example", "path": "/export/'x"}}),
     "storage.nfs.path", "A-Z a-z 0-9 . _ -"),
    # 3. pod and service ranges
    ("podCidr overlaps serviceCidr", lambda: lab(podCidr="10.96.0.0/16"), "podCidr", "overlaps serviceCidr"),
    ("serviceCidr larger than /12", lambda: lab(serviceCidr="10.0.0.0/11"), "serviceCidr",
     "larger than kube-apiserver allows"),
    ("serviceCidr /8", lambda: lab(serviceCidr="172.0.0.0/8"), "serviceCidr", "/12 to /28"),
    ("serviceCidr /29", lambda: lab(serviceCidr="10.96.0.0/29"), "serviceCidr", "10th address"),
    ("serviceCidr /32", lambda: lab(serviceCidr="10.96.0.1/32"), "serviceCidr", "too small"),
    ("podCidr for 2 of 3 hosts", lambda: lab(podCidr="10.244.0.0/23"), "podCidr", "holds 2 node /24s"),
    ("podCidr /25", lambda: lab(podCidr="10.244.0.0/25"), "podCidr", "/24 or larger"),
    ("podCidr /7", lambda: lab(podCidr="10.0.0.0/7", serviceCidr="172.16.0.0/12"), "podCidr",
     "kube-controller-manager"),
    ("podCidr contains a host", lambda: lab(podCidr="192.0.2.0/24"), "podCidr", "hosts[0].address"),
    ("podCidr contains the endpoint", lambda: lab(controlPlaneEndpoint="10.244.3.1:6443"), "podCidr",
     "controlPlaneEndpoint 10.244.3.1"),
    ("serviceCidr contains the endpoint", lambda: lab(controlPlaneEndpoint="10.96.0.1:6443"), "serviceCidr",
     "controlPlaneEndpoint 10.96.0.1"),
    ("serviceCidr contains the NFS server",
     lambda: lab(storage={"nfs": {"server": "10.100.0.5", "path": "/export"}}), "serviceCidr",
     "storage.nfs.server 10.100.0.5"),
    # 4. ports
    ("sshPort 0", lambda: lab_host(0, sshPort=0), "hosts[0].sshPort", "greater than or equal to 1"),
    ("sshPort 65536", lambda: lab_host(1, sshPort=65536), "hosts[1].sshPort", "less than or equal to 65535"),
    ("bastion sshPort 70000", lambda: lab(bastion={"host": "jump.lab.example", "sshPort": 70000, "hostKey": ED25519}),
     "bastion.sshPort", "65535"),
    ("endpoint port 0", lambda: lab(controlPlaneEndpoint="k8s-api.lab.example:0"), "controlPlaneEndpoint",
     "1 to 65535"),
    ("endpoint port 65536", lambda: lab(controlPlaneEndpoint="k8s-api.lab.example:65536"), "controlPlaneEndpoint",
     "1 to 65535"),
    ("endpoint port 6 digits", lambda: lab(controlPlaneEndpoint="k8s-api.lab.example:644300"),
     "controlPlaneEndpoint", "host:port"),
    # 5. addresses and names of hosts
    ("loopback host", lambda: lab_host(1, address="127.0.0.1"), "hosts[1].address", "loopback"),
    ("loopback host /8", lambda: lab_host(1, address="127.1.2.3"), "hosts[1].address", "loopback"),
    ("unspecified host", lambda: lab_host(0, address="0.0.0.0"), "hosts[0].address", "unspecified"),
    ("multicast host", lambda: lab_host(2, address="224.0.0.1"), "hosts[2].address", "multicast"),
    ("link-local host", lambda: lab_host(2, address="169.254.10.1"), "hosts[2].address", "link-local"),
    ("broadcast host", lambda: lab_host(2, address="255.255.255.255"), "hosts[2].address", "broadcast"),
    ("IPv6 loopback host", lambda: lab_host(0, address="::1"), "hosts[0].address", "IPv4"),
    ("duplicate address", lambda: lab_host(2, address="192.0.2.11"), "hosts[2].address", "duplicates hosts[1]"),
    ("endpoint loopback", lambda: lab(controlPlaneEndpoint="127.0.0.1:6443"), "controlPlaneEndpoint", "loopback"),
    ("endpoint bad DNS name", lambda: lab(controlPlaneEndpoint="k8s_api.lab:6443"), "controlPlaneEndpoint",
     "DNS name"),
    ("bastion bad DNS name", lambda: lab(bastion={"host": "jump..lab.example", "hostKey": ED25519}), "bastion.host",
     "DNS name"),
    ("bastion unspecified", lambda: lab(bastion={"host": "0.0.0.0", "hostKey": ED25519}), "bastion.host",
     "unspecified"),
    ("bastion bad address", lambda: lab(bastion={"host": "192.0.2.300", "hostKey": ED25519}), "bastion.host",
     "not a valid IPv4 address"),
    ("NFS server loopback", lambda: lab(storage={"nfs": {"server": "127.0.0.1", "path": "/export"}}),
     "storage.nfs.server", "loopback"),
    ("NFS server localhost", lambda: lab(storage={"nfs": {"server": "localhost", "path": "/export"}}),
     "storage.nfs.server", "localhost"),
    ("NFS server with a shell character", lambda: lab(storage={"nfs": {"server": "nas;reboot", "path": "/export"}}),
     "storage.nfs.server", "DNS name"),
    # 6. SSH users
    ("sshUser with ;", lambda: lab_host(0, sshUser="ubuntu;reboot"), "hosts[0].sshUser", "POSIX user name"),
    ("sshUser with $()", lambda: lab_host(1, sshUser="$(id)"), "hosts[1].sshUser", "[a-z_][a-z0-9_-]*"),
    ("sshUser with a space", lambda: lab_host(1, sshUser="ubuntu -oProxyCommand=x"), "hosts[1].sshUser", "POSIX"),
    ("sshUser uppercase", lambda: lab_host(0, sshUser="Ubuntu"), "hosts[0].sshUser", "POSIX user name"),
    ("sshUser leading -", lambda: lab_host(0, sshUser="-oops"), "hosts[0].sshUser", "POSIX user name"),
    ("sshUser of 33 characters", lambda: lab_host(0, sshUser="u" * 33), "hosts[0].sshUser", "at most 32"),
    ("bastion sshUser", lambda: lab(bastion={"host": "jump.lab.example", "sshUser": "jump`id`", "hostKey": ED25519}),
     "bastion.sshUser", "POSIX user name"),
    # 7. host keys that do not decode to the declared key
    ("rsa type, ed25519 blob", lambda: lab_host(0, hostKey="ssh-rsa " + ED25519.split()[1]), "hosts[0].hostKey",
     "holds a 'ssh-ed25519' key, not ssh-rsa"),
    ("ed25519 type, rsa blob", lambda: lab_host(0, hostKey="ssh-ed25519 " + wire(b"ssh-rsa", b"\x01\x00\x01", b"\x00" * 257)),
     "hosts[0].hostKey", "not ssh-ed25519"),
    ("ed25519 key of 31 bytes", lambda: lab_host(0, hostKey="ssh-ed25519 " + wire(b"ssh-ed25519", b"\x01" * 31)),
     "hosts[0].hostKey", "not a well-formed ssh-ed25519 key"),
    ("ed25519 key with trailing data",
     lambda: lab_host(0, hostKey="ssh-ed25519 " + wire(b"ssh-ed25519", b"\x01" * 32, b"x")),
     "hosts[0].hostKey", "not a well-formed"),
    ("truncated blob", lambda: lab_host(0, hostKey="ssh-ed25519 " + wire(b"ssh-ed25519", b"\x01" * 32)[:-8]),
     "hosts[0].hostKey", "does not decode"),
    ("blob of zeros", lambda: lab_host(0, hostKey="ssh-ed25519 " + "A" * 64), "hosts[0].hostKey", "not ssh-ed25519"),
    ("ecdsa on the wrong curve",
     lambda: lab_host(0, hostKey="ecdsa-sha2-nistp256 " + wire(b"ecdsa-sha2-nistp256", b"nistp384", b"\x04" * 97)),
     "hosts[0].hostKey", "not a well-formed ecdsa-sha2-nistp256 key"),
    ("bastion key mismatch",
     lambda: lab(bastion={"host": "jump.lab.example", "hostKey": "ecdsa-sha2-nistp256 " + ED25519.split()[1]}),
     "bastion.hostKey", "not ecdsa-sha2-nistp256"),
    # 8. Kubernetes labels and names, GCP names
    ("label key with !", lambda: gke_pool(0, labels={"team!": "ml"}), "gke.gpuPools[0].labels", "label key 'team!'"),
    ("label key with two /", lambda: gke_pool(0, labels={"a/b/c": "x"}), "gke.gpuPools[0].labels", "[<DNS subdomain>/]"),
    ("label key prefix uppercase", lambda: gke_pool(0, labels={"Example.com/team": "x"}), "gke.gpuPools[0].labels",
     "label key"),
    ("label key name of 64", lambda: gke_pool(1, labels={"a" * 64: "x"}), "gke.gpuPools[1].labels", "at most 63"),
    ("label key prefix of 254", lambda: gke_pool(0, labels={"a" * 254 + "/x": "y"}), "gke.gpuPools[0].labels",
     "label key"),
    ("label value of 64", lambda: gke_pool(0, labels={"team": "v" * 64}), "gke.gpuPools[0].labels", "label value"),
    ("label value starting with -", lambda: gke_pool(0, labels={"team": "-ml"}), "gke.gpuPools[0].labels",
     "label value"),
    ("label key kubernetes.io/", lambda: gke_pool(0, labels={"node-role.kubernetes.io/gpu": ""}),
     "gke.gpuPools[0].labels", "reserved"),
    ("label key this program sets", lambda: gke_pool(0, labels={"gpu-cluster/pool": "other"}),
     "gke.gpuPools[0].labels", "set by this program"),
    ("gpuNodes ../x", lambda: dev(gpuNodes=["../x"]), "gpuNodes[0]", "DNS subdomain"),
    ("gpuNodes with /", lambda: dev(gpuNodes=["minikube", "a/b"]), "gpuNodes[1]", "DNS subdomain"),
    ("gpuNodes uppercase", lambda: dev(gpuNodes=["Node_1"]), "gpuNodes[0]", "lowercase"),
    ("gpuNodes twice", lambda: dev(gpuNodes=["minikube", "minikube"]), "gpuNodes", "twice"),
    ("storageClass with a space", lambda: lab(monitoring={"storageClass": "fast ssd"}), "monitoring.storageClass",
     "DNS subdomain"),
    ("storageClass uppercase", lambda: dev(monitoring={"storageClass": "Fast"}), "monitoring.storageClass",
     "DNS subdomain"),
    ("cluster name uppercase", lambda: gke(clusterName="GPU"), "gke.clusterName", "start with a letter"),
    ("cluster name of 41", lambda: gke(clusterName="g" * 41), "gke.clusterName", "at most 40"),
    ("pool name with _", lambda: gke_pool(0, name="l4_spot"), "gke.gpuPools[0].name", "a-z, 0-9 and '-'"),
    ("network with a space", lambda: gke(network="my vpc"), "gke.network", "network name"),
    ("network of 64", lambda: gke(network="n" * 64), "gke.network", "at most 63"),
    ("network path with ..", lambda: gke(network="projects/host-project/global/networks/../x"), "gke.network",
     "projects/<host-project>/global/networks/<name>"),
    ("subnetwork uppercase", lambda: gke(subnetwork="Subnet"), "gke.subnetwork", "subnetwork name"),
    # 9. zones, regions and machine types GCP does not have
    ("zone us-central1-z", lambda: gke(zone="us-central1-z"), "gke.zone", "us-central1 has us-central1-a"),
    ("zone us-east1-a", lambda: gke(zone="us-east1-a", gcp={"gcp:region": "us-east1"}), "gke.zone",
     "us-east1-b, us-east1-c, us-east1-d"),
    ("zone of an unknown region", lambda: gke(zone="mars-north1-a"), "gke.zone", "known region"),
    ("pool zone unknown", lambda: gke_pool(1, zones=["us-central1-a", "us-central1-e"]), "gke.gpuPools[1].zones",
     "not a Compute Engine zone"),
    ("filestore zone unknown", lambda: gke(filestore={"zone": "us-central1-z"}), "gke.filestore.zone",
     "us-central1 has"),
    ("gcp:region unknown", lambda: gke(gcp={"gcp:region": "mars-north1"}), "gcp:region",
     "not a known Compute Engine region"),
    ("gcp:region plausible but unknown", lambda: gke(gcp={"gcp:region": "us-central9"}), "gcp:region",
     "known: us-central1"),
    ("system pool e2-standard-5", lambda: gke(systemPool={"machineType": "e2-standard-5"}),
     "gke.systemPool.machineType", "e2-standard comes with 2, 4, 8, 16, 32 vCPUs"),
    ("system pool misspelt shape", lambda: gke(systemPool={"machineType": "n2-hignmem-8"}),
     "gke.systemPool.machineType", "no 'hignmem' shape"),
    ("system pool unknown family", lambda: gke(systemPool={"machineType": "z9-standard-4"}),
     "gke.systemPool.machineType", "general-purpose machine type"),
    ("system pool GPU machine", lambda: gke(systemPool={"machineType": "a2-highgpu-1g"}),
     "gke.systemPool.machineType", "general-purpose"),
    ("GPU pool n1 with 5 vCPUs", lambda: gke_pool(0, machineType="n1-standard-5", accelerator={"type": "nvidia-tesla-t4", "count": 1}),
     "gke.gpuPools[0].machineType", "n1-standard comes with"),
    # 10. training and the acceptance Job larger than the nodes can ever be
    ("lab: more GPUs per pod than any host", lambda: lab_training(gpusPerNode=4), "training.gpusPerNode",
     "no host has more than 2"),
    ("lab: more pods than GPU hosts", lambda: lab_training(nodes=2), "training.nodes", "only 1 hosts with gpus > 0"),
    ("lab: several MIG slices per pod", lambda: {**lab_training(gpusPerNode=2, nodes=1),
                                                 "gpu": {"stack": "operator", "sharing": {
                                                     "mode": "mig", "migProfile": "all-1g.10gb"}}},
     "training.gpusPerNode", "one MIG slice"),
    ("lab: pods x GPUs do not fit",
     lambda: lab_training(hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("g-1", "192.0.2.11", gpus=2),
                                 host("g-2", "192.0.2.12", gpus=1)], nodes=2, gpusPerNode=2),
     "training.gpusPerNode", "2 x 2 GPUs do not fit"),
    ("lab: acceptance Job too large",
     lambda: lab(training={"image": IMAGE, "nodes": 3}, acceptance={"nccl": True}, network={"linkGbps": 25},
                 storage={"provision": True}),
     "training.nodes", "3 pods"),
    ("dev: more pods than gpuNodes",
     lambda: dev(training={"enabled": True, "image": IMAGE, "nodes": 2}, storage={"useDefaultClass": True}),
     "training.nodes", "only 1 gpuNodes"),
    ("gke: more GPUs per pod than any pool", lambda: gke_training(gpusPerNode=2), "training.gpusPerNode",
     "no pool's node has more than 1"),
    ("gke: more pods than pools scale to", lambda: gke_training(nodes=9), "training.nodes", "at most 8 nodes"),
    ("gke: acceptance Job beyond the pools",
     lambda: gke(top={"training": {"image": IMAGE, "nodes": 9}, "acceptance": {"nccl": True},
                      "network": {"linkGbps": 100}}),
     "training.nodes", "autoscaling.maxNodes x zones"),
    # 11. platform: missing or unknown; a key of another platform set (Pulumi hands every stack
    #     the project defaults of every key: those, and empty values, are ignored)
    ("platform missing", lambda: without(lab(), "platform"), "platform", "is required"),
    ("platform unknown", lambda: lab(platform="eks"), "platform", "must be one of 'lab', 'dev' or 'gke' (got 'eks')"),
    ("platform gke but gcp:project unset", lambda: without(gke(), "gcp:project"), "gcp:project",
     "is required: `pulumi config set gcp:project"),
    ("lab: gpuNodes set", lambda: lab(gpuNodes=["gpu-1"]), "gpuNodes",
     "is a dev key; this stack's platform is lab (lab GPU nodes come from hosts[].gpus)"),
    ("lab: kubeContext set", lambda: lab(kubeContext="minikube"), "kubeContext", "is a dev key; this stack's platform is lab"),
    ("lab: gke set", lambda: lab(gke={"zone": "us-central1-a"}), "gke", "is a gke key; this stack's platform is lab"),
    ("lab: storage.hostPath set", lambda: lab(storage={"hostPath": "/data"}), "storage", "hostPath and useDefaultClass are dev keys"),
    ("dev: hosts set", lambda: dev(hosts=[host("cp-1", "192.0.2.10", "control-plane")]), "hosts",
     "is a lab key; this stack's platform is dev"),
    ("dev: cni set (flannel: calico is the declared default every stack receives)", lambda: dev(cni="flannel"), "cni", "is a lab key; this stack's platform is dev"),
    ("dev: nvidiaDriver set", lambda: dev(nvidiaDriver={"branch": "550"}), "nvidiaDriver", "is a lab key"),
    ("dev: gke set", lambda: dev(gke={"gpuPools": [L4]}), "gke", "is a gke key; this stack's platform is dev"),
    ("dev: storage.provision set", lambda: dev(storage={"provision": True}), "storage", "provision and exportPath are lab keys"),
    ("gke: hosts set", lambda: gke(top={"hosts": [host("cp-1", "192.0.2.10", "control-plane")]}), "hosts",
     "is a lab key; this stack's platform is gke (GPU nodes come from gke.gpuPools)"),
    ("gke: podCidr set", lambda: gke(top={"podCidr": "10.32.0.0/16"}), "podCidr", "is a lab key; this stack's platform is gke"),
    ("gke: kubeContext set", lambda: gke(top={"kubeContext": "minikube"}), "kubeContext",
     "is a dev key; this stack's platform is gke"),
    ("gke: storage set", lambda: gke(top={"storage": {"size": "1Ti"}}), "storage",
     "is a lab/dev key; this stack's platform is gke (gke's shared volume is a Filestore instance: gke.filestore)"),
    ("gke: storage.hostPath set", lambda: gke(top={"storage": {"hostPath": "/data"}}), "storage", "gke.filestore"),
    # 12. GKE's device plugin switched off while the program relies on it
    ("gke: device plugin off under device-plugin",
     lambda: gke_pool(1, labels={"gke-no-default-nvidia-gpu-device-plugin": "true"}), "gke.gpuPools[1].labels",
     "relies on"),
    ("gke: device plugin label under operator",
     lambda: gke_operator(labels={"gke-no-default-nvidia-gpu-device-plugin": "false"}), "gke.gpuPools[0].labels",
     "set by this program"),
    # 13. upgrades: nodes drained at once (the change checks against the deployed cluster are
    # tests/stacks/test_upgrades.py)
    ("maxUnavailable 0", lambda: lab(maxUnavailable=0), "maxUnavailable", "greater than or equal to 1"),
    ("maxUnavailable not a number", lambda: lab(maxUnavailable="all"), "maxUnavailable", "valid integer"),
    ("gke: maxUnavailable set", lambda: gke(top={"maxUnavailable": 3}), "maxUnavailable",
     "is a lab key; this stack's platform is gke"),
    ("dev: allowRebuild set", lambda: dev(allowRebuild=True), "allowRebuild", "is a lab key; this stack's platform is dev"),
    # 14. network.rdma / network.roce (issue 14)
    ("gke: network.rdma", lambda: gke(top={"network": {"rdma": True}}), "network.rdma", "GPUDirect comes with the machine family"),
    ("gke: network.roce", lambda: gke(top={"network": {"roce": SEED_002_ROCE}}), "network.roce", "GPUDirect comes with the machine family"),
    ("lab: rdma without roce", lambda: lab(network={"rdma": True}), "network.roce", "interface, pciAddress, hca"),
    ("dev: rdma without roce", lambda: dev(network={"rdma": True}), "network.roce", "interface, pciAddress, hca"),
    ("roce without rdma", lambda: lab(network={"roce": SEED_002_ROCE}), "network.roce", "set network.rdma true"),
    ("roce range in serviceCidr", lambda: lab(network=roce(range="10.100.100.0/24")), "network.roce.range",
     "overlaps serviceCidr 10.96.0.0/12"),
    ("roce range in podCidr", lambda: lab(network=roce(range="10.244.8.0/24")), "network.roce.range", "overlaps podCidr"),
    ("roce range holds a host", lambda: lab(network=roce(range="192.0.2.0/24")), "network.roce.range",
     "contains hosts[0].address 192.0.2.10"),
    ("roce range host bits", lambda: lab(network=roce(range="192.168.100.1/24")), "network.roce.range", "host bits zero"),
    ("roce range too small", lambda: lab(network=roce(range="192.168.100.0/30")), "network.roce.range", "/29 or larger"),
    ("roce range < pods", lambda: lab(network=roce(range="192.168.100.0/29"), storage={"provision": True},
                                      training={"enabled": True, "image": IMAGE, "nodes": 7}),
     "network.roce.range", "has 6 host addresses for training.nodes 7"),
    ("roce interface net1", lambda: lab(network=roce(interface="net1")), "network.roce.interface", "name the host's NIC"),
    ("roce interface too long", lambda: lab(network=roce(interface="a" * 16)), "network.roce.interface", "1-15 characters"),
    ("roce interface + newline", lambda: lab(network=roce(interface="ens192\n")), "network.roce.interface", "Linux interface"),
    ("roce PCI without domain", lambda: lab(network=roce(pciAddress="3b:00.0")), "network.roce.pciAddress", "domain included"),
    ("roce hca with space", lambda: lab(network=roce(hca="irdma 0")), "network.roce.hca", "RDMA device name"),
    ("roce driver upper case", lambda: lab(network=roce(driver="ICE")), "network.roce.driver", "kernel driver name"),
    ("roce gidIndex negative", lambda: lab(network=roce(gidIndex=-1)), "network.roce.gidIndex", "greater than or equal to 0"),
    ("roce ncclEnv not NCCL_", lambda: lab(network=roce(ncclEnv={"LD_PRELOAD": "/x.so"})), "network.roce.ncclEnv",
     "is not an NCCL variable"),
    ("roce ncclEnv managed", lambda: lab(network=roce(ncclEnv={"NCCL_IB_HCA": "mlx5_1"})), "network.roce.ncclEnv",
     "set network.roce.hca"),
    ("roce ncclEnv number", lambda: lab(network=roce(ncclEnv={"NCCL_IB_TC": 106})), "network.roce.ncclEnv", "valid string"),
    ("roce minLinkFraction > 1", lambda: lab(network=roce(minLinkFraction=1.5)), "network.roce.minLinkFraction",
     "less than or equal to 1"),
    ("roce with socketIfname", lambda: lab(network=roce(), training={"image": IMAGE, "nccl": {"socketIfname": "eth0"}}),
     "training.nccl.socketIfname", "uses net1"),
    ("roce without image", lambda: lab(network=roce()), "training.image", "RDMA exporter and link test"),
]


@pytest.mark.parametrize(("description", "make", "key", "message"), ROWS, ids=[r[0] for r in ROWS])
def test_refused(description: str, make: Callable[[], dict[str, Any]], key: str, message: str) -> None:
    err = refusal(make())
    found = [(err.qualified_key(k), m) for k, m in err.problems]
    assert any(key in k and message in m for k, m in found), f"{description}: want {key} / {message!r}; got {found}"
    # Shown as Pulumi names the key: gpu-cluster:<key> (gcp: keys as they are).
    shown = key if key.startswith("gcp:") else f"{config.NAMESPACE}:{key}"
    assert shown in str(err)


def test_every_base_config_is_accepted() -> None:
    """The rows' bases are valid: each refusal comes from its own change."""
    config.parse(lab(), {"sshPrivateKey"})
    config.parse(lab_training(), {"sshPrivateKey"})
    config.parse(dev())
    for raw in (gke(), gke_training(nodes=8), gke_operator(labels={"team": "ml"})):
        config.parse(raw)


# What Pulumi.yaml declares for each key, as every stack receives it when its file does not set it.
_PROJECT_DEFAULTS = {key: decl["default"] for key, decl in yaml.safe_load(
    (PROJECT_DIR / "Pulumi.yaml").read_text())["config"].items()}


@pytest.mark.parametrize("make", [lab, dev, gke], ids=["lab", "dev", "gke"])
def test_other_platforms_keys_at_their_project_defaults_are_ignored(make: Callable[[], dict[str, Any]]) -> None:
    """The rows above refuse a key of another platform once set; unset (the declared default) it passes."""
    raw = {**_PROJECT_DEFAULTS, **make()}
    cfg = config.parse(raw, {"sshPrivateKey"} if raw["platform"] == "lab" else set())
    assert cfg.platform.value == raw["platform"]


@pytest.mark.parametrize("accepted", [
    "/srv/gpu-cluster/shared", "/data/gpu-cluster-shared", "/var/lib/gpu-cluster", "/home/ubuntu/shared",
    "/mnt/nvme0/shared", "/opt/gpu-cluster/data",
])
def test_host_directories_accepted(accepted: str) -> None:
    cfg = config.parse(dev(storage={"hostPath": accepted}))
    assert isinstance(cfg, config.DevStack) and cfg.storage.host_path == accepted
    assert host_dir_problem(accepted) is None


def test_launch_spec_refuses_a_trailing_newline() -> None:
    good = {"job": "train", "service": "train-hosts", "namespace": "training", "nodes": 1, "gpus_per_node": 1}
    launch.LaunchSpec(**good)  # type: ignore[arg-type]
    for field, bad in (("job", "train\n"), ("service", "train-hosts\n"), ("module", "trainer.train\n")):
        with pytest.raises(ValueError, match=field):
            launch.LaunchSpec(**{**good, field: bad})  # type: ignore[arg-type]


# --- a refused config registers nothing --------------------------------------------------------


def _with(stack: str, **overrides: Any) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config(stack)
    values = dict(values)
    for key, value in overrides.items():
        full = key if ":" in key else f"{config.NAMESPACE}:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    return values, secret_keys


def _lab_hosts(**changes: Any) -> list[dict[str, Any]]:
    values, _ = program.stack_config("lab")
    hosts = json.loads(values[f"{config.NAMESPACE}:hosts"])
    hosts[0].update(changes)
    return hosts


@pytest.mark.parametrize(("stack", "overrides", "key"), [
    ("lab", {"hosts": _lab_hosts(sshUser="ubuntu;reboot")}, "hosts[0].sshUser"),
    ("lab", {"storage": {"provision": True, "exportPath": "/etc"}}, "storage.exportPath"),
    ("dev", {"storage": {"hostPath": "/var/lib/kubelet"}}, "storage.hostPath"),
    ("gke", {"gcp:region": "mars-north1"}, "gcp:region"),
    ("gke", {"gke": {"zone": "us-central1-z", "gpuPools": [L4]}}, "gke.zone"),
], ids=["lab-sshUser", "lab-exportPath", "dev-hostPath", "gke-region", "gke-zone"])
def test_refused_config_registers_nothing(monkeypatch, stack: str, overrides: dict[str, Any], key: str) -> None:
    plans: list[program.Plan] = []
    real = program.Plan

    def recording(*args: Any, **kwargs: Any) -> program.Plan:
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(program, "Plan", recording)
    with pytest.raises(config.ConfigError) as info:
        program.run(stack, config=_with(stack, **overrides))
    assert key in [k for k, _ in info.value.problems]
    assert len(plans) == 1 and plans[0].resources == []


# --- the committed stack files still parse ------------------------------------------------------


@pytest.mark.parametrize("stack", ["lab", "dev", "gke"])
def test_committed_stack_file_parses(stack: str) -> None:
    values, secret_full_keys = program.stack_config(stack)
    prefix = f"{config.NAMESPACE}:"
    secret_keys = {k[len(prefix):] for k in secret_full_keys if k.startswith(prefix)}
    raw: dict[str, Any] = {k: v for k, v in values.items() if k.startswith("gcp:")}
    for full_key, value in values.items():
        key = full_key[len(prefix):]
        if not full_key.startswith(prefix) or key in secret_keys:
            continue
        try:
            raw[key] = json.loads(value)
        except ValueError:
            raw[key] = value
    cfg = config.parse(raw, secret_keys)
    assert cfg.platform.value == stack
    if isinstance(cfg, config.GkeStack):
        assert (cfg.project, cfg.region) == (values["gcp:project"], values["gcp:region"])
    if isinstance(cfg, config.LabStack):
        for h in cfg.hosts:  # the example host keys decode to ed25519 keys
            assert h.host_key.startswith("ssh-ed25519 ") and check_host_key(h.host_key) == h.host_key
