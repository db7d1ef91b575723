"""GPUDirect on the gke stack, evaluated by the real program under the recording mocks, its pods
checked by the whole-cluster check (and, for the shell, by `sh -n`): A3 Mega with TCPXO and A3 Ultra
with RDMA over gIB, each as Google's Cluster Toolkit blueprint builds it (config/gcp/gpudirect.py
cites them), and a pool with gpuDirect off under a multi-node job: exit 3 material.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components import versions
from render import cluster, program
from tests.conftest import stack_config_with

MEGA = {"name": "h100-mega", "machineType": "a3-megagpu-8g", "accelerator": {"type": "nvidia-h100-mega-80gb", "count": 8},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}
ULTRA = {"name": "h200", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
         "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}
HIGH = {"name": "h100", "machineType": "a3-highgpu-8g", "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}


@functools.cache
def _plan(pool_json: str, network_json: str = "{}", gpus: int = 8, keep: str = "l4-spot") -> program.Plan:
    gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
    gke["gpuPools"] = [p for p in gke["gpuPools"] if p["name"] == keep] + [json.loads(pool_json)]
    extra = {"network": json.loads(network_json)} if network_json != "{}" else {}
    return program.run("gke", config=stack_config_with(
        "gke", gke=gke, training={"nodes": 2, "gpusPerNode": gpus, "cpuRequest": "8", "cpuLimit": "16",
                                  "memoryRequest": "64Gi", "memoryLimit": "96Gi"},
        acceptance={"nccl": True}, **extra))


def plan(pool: dict[str, Any], gpus: int = 8, keep: str = "l4-spot", **network: Any) -> program.Plan:
    return _plan(json.dumps(pool, sort_keys=True), json.dumps(network, sort_keys=True), gpus, keep)


def _of(p: program.Plan, t: str) -> list[dict[str, Any]]:
    return [r.inputs for r in p.resources if r.type == t]


def _pool(p: program.Plan, name: str) -> dict[str, Any]:
    (pool,) = [i for i in _of(p, "gcp:container/nodePool:NodePool") if i["name"] == name]
    return pool


def _job_pod(p: program.Plan, name: str) -> dict[str, Any]:
    (job,) = [i for i in _of(p, "kubernetes:batch/v1:Job") if i["metadata"]["name"] == name]
    return job["spec"]["template"]


def test_a3_mega_gets_eight_tcpxo_vpcs_as_the_toolkit_blueprint():
    p = plan(MEGA)
    nets = {n["name"]: n for n in _of(p, "gcp:compute/network:Network")}
    assert sorted(nets) == [f"gpu-cluster-gpunet-{i}" for i in range(8)]
    assert {n["mtu"] for n in nets.values()} == {8244} and not any(n["autoCreateSubnetworks"] for n in nets.values())
    subnets = {s["name"]: s for s in _of(p, "gcp:compute/subnetwork:Subnetwork")}
    ranges = [ipaddress.ip_network(subnets[f"gpu-cluster-gpunet-{i}-subnet"]["ipCidrRange"]) for i in range(8)]
    assert all(r.prefixlen == 20 and r.subnet_of(ipaddress.ip_network("192.168.0.0/16")) for r in ranges)
    assert len(set(ranges)) == 8 and {s["region"] for s in subnets.values()} == {"us-central1"}
    rules = _of(p, "gcp:compute/firewall:Firewall")
    assert len(rules) == 8 and all(r["sourceRanges"] == ["192.168.0.0/16"] for r in rules)
    extra = _pool(p, "h100-mega")["networkConfig"]["additionalNodeNetworkConfigs"]
    assert [e["subnetwork"] for e in extra] == [f"gpu-cluster-gpunet-{i}-subnet" for i in range(8)]
    assert _pool(p, "h100-mega")["nodeConfig"]["gvnic"] == {"enabled": True}
    assert "networkConfig" not in _pool(p, "l4-spot") and "gvnic" not in _pool(p, "l4-spot")["nodeConfig"]
    (c,) = _of(p, "gcp:container/cluster:Cluster")
    assert c["enableMultiNetworking"] is True and c["datapathProvider"] == "ADVANCED_DATAPATH"


def test_each_k8s_network_points_at_its_vpc_and_the_pods_name_only_those():
    p = plan(MEGA)
    params = {o["metadata"]["name"]: o["spec"] for o in _of(p, "kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    networks = {o["metadata"]["name"]: o["spec"] for o in _of(p, "kubernetes:networking.gke.io/v1:Network")}
    subnets = {s["name"]: s for s in _of(p, "gcp:compute/subnetwork:Subnetwork")}
    assert set(params) == set(networks) == {f"vpc{i}" for i in range(1, 9)}
    for name, spec in params.items():
        assert spec["deviceMode"] == "NetDevice" and spec["vpcSubnet"] in subnets
        assert networks[name] == {"parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet",
                                                    "name": name}, "type": "Device"}
    for job in ("nccl-acceptance", "train"):
        pod = _job_pod(p, job)
        interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
        assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
        assert [i["network"] for i in interfaces[1:]] == [f"vpc{i}" for i in range(1, 9)]
        assert {i["network"] for i in interfaces[1:]} <= set(networks)


def test_the_tcpxo_installer_the_device_injector_and_the_daemon_are_pinned_and_placed():
    p = plan(MEGA)
    ds = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in _of(p, "kubernetes:apps/v1:DaemonSet")}
    images = {c["image"] for n in ("nccl-tcpxo-installer", "device-injector")
              for c in ds[n].get("initContainers", []) + ds[n]["containers"]}
    assert {versions.GKE_TCPXO_NCCL_PLUGIN_IMAGE, versions.GKE_NRI_DEVICE_INJECTOR_IMAGE} <= images
    pod = _job_pod(p, "nccl-acceptance")
    (daemon,) = pod["spec"]["initContainers"]
    assert daemon["name"] == "tcpxo-daemon" and daemon["restartPolicy"] == "Always"  # the Job still completes
    assert daemon["image"] == versions.GKE_TCPXO_DAEMON_IMAGE
    devices = pod["metadata"]["annotations"]["devices.gke.io/container.tcpxo-daemon"]
    assert "- path: /dev/nvidia7\n" in devices and "/dev/dmabuf_import_helper" in devices
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all({"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h100-mega-80gb"]}
               in t["matchExpressions"] for t in terms)
    script = pod["spec"]["containers"][0]["command"][2]
    assert '. "/usr/local/nvidia/lib64/nccl-env-profile.sh"' in script.splitlines()
    assert "--link-gbps 1600" in script  # 8 x 200 Gbps, Google's A3 Mega figure
    subprocess.run(["sh", "-n", "-c", script], check=True, timeout=30)  # the pod's shell parses it


def test_a3_ultra_gets_a_gvnic_vpc_and_one_roce_vpc_with_eight_rdma_subnets():
    p = plan(ULTRA)
    nets = {n["name"]: n for n in _of(p, "gcp:compute/network:Network")}
    assert set(nets) == {"gpu-cluster-net-1", "gpu-cluster-rdma-net"}
    roce = nets["gpu-cluster-rdma-net"]
    assert roce["networkProfile"] == "projects/my-gpu-project/global/networkProfiles/us-central1-b-vpc-roce"
    assert roce["mtu"] == 8896 and roce["routingMode"] == "REGIONAL"
    extra = _pool(p, "h200")["networkConfig"]["additionalNodeNetworkConfigs"]
    assert [e["subnetwork"] for e in extra] == ["gpu-cluster-sub-1", *(f"gpu-cluster-rdma-sub-{i}" for i in range(8))]
    params = {o["metadata"]["name"]: o["spec"]["deviceMode"] for o in _of(p, "kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    assert params == {"gvnic-1": "NetDevice", **{f"rdma-{i}": "RDMA" for i in range(8)}}
    (gib,) = [d for d in _of(p, "kubernetes:apps/v1:DaemonSet") if d["metadata"]["name"] == "nccl-rdma-installer"]
    assert gib["spec"]["template"]["spec"]["initContainers"][0]["image"] == versions.GKE_GIB_NCCL_PLUGIN_IMAGE
    pod = _job_pod(p, "nccl-acceptance")
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [(i["interfaceName"], i["network"]) for i in interfaces[1:]] == [(f"eth{i + 2}", f"rdma-{i}") for i in range(8)]
    script = pod["spec"]["containers"][0]["command"][2]
    assert ". /usr/local/gib/scripts/set_nccl_env.sh" in script and "--link-gbps 3200" in script
    assert {"name": "NCCL_NET", "value": "gIB"} in pod["spec"]["containers"][0]["env"]


def test_every_family_comes_up_in_the_check(upstream_dir: Path):
    """TCPXO, RDMA over gIB and TCPX (the installer DaemonSets, the Jobs with their native sidecar
    strictly valid, the Network objects against Google's CRDs): no GPUDirect problem."""
    for pool in (MEGA, ULTRA, HIGH):
        p = plan(pool)
        report = cluster.check(p, p.config, upstream_dir)
        assert report.ok, report.problems
        (ns,) = [n for n in _of(p, "kubernetes:core/v1:Namespace") if n["metadata"]["name"] == "training"]
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.would_not_come_up
@pytest.mark.parametrize(("pool", "says"), [(MEGA, ("gke.gpuPools[1]", "8 GPU NICs")),
                                            (HIGH, ("a3-highgpu-8g, 4 GPU NICs",))], ids=["tcpxo", "tcpx"])
def test_a_multi_node_job_on_a_gpu_nic_pool_without_gpudirect_exits_3(upstream_dir: Path, pool, says):
    p = plan({**pool, "gpuDirect": "off"}, linkGbps=200)
    assert not _of(p, "gcp:compute/network:Network") and "networkConfig" not in _pool(p, pool["name"])
    problems = cluster.check(p, p.config, upstream_dir).problems
    for job in ("Job training/nccl-acceptance", "Job training/train"):
        assert any(x.startswith(job) and all(s in x for s in says) and "gpuDirect auto" in x
                   for x in problems), problems


def test_the_network_objects_are_validated_against_googles_crds(upstream_dir: Path):
    """GKE serves the CRDs (no plan resource installs them); the check holds the objects to Google's
    schema (render/cluster/platform_crds/, from gke-networking-api): a deviceMode GKE does not know fails."""
    broken = copy.deepcopy(plan(ULTRA))
    (param,) = [r for r in broken.resources if r.type.endswith(":GKENetworkParamSet") and r.inputs["metadata"]["name"] == "rdma-0"]
    param.inputs["spec"]["deviceMode"] = "RoCE"
    (net,) = [r for r in broken.resources if r.type == "kubernetes:networking.gke.io/v1:Network" and r.inputs["metadata"]["name"] == "rdma-1"]
    net.inputs["spec"]["type"] = "L4"
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    assert any(p.startswith("GKENetworkParamSet rdma-0: not valid against CRD gkenetworkparamsets.networking.gke.io")
               and "deviceMode" in p for p in problems), problems
    assert any(p.startswith("Network rdma-1: not valid against CRD networks.networking.gke.io") for p in problems), problems


@pytest.mark.would_not_come_up
def test_pods_that_take_part_of_an_a3_mega_across_nodes_exit_3_with_the_whole_machine_hint(upstream_dir: Path):
    """The pool has its GPU networks, but 4-GPU pods do not attach to them (Google's GPUDirect pods
    take the whole machine): they would run NCCL over the host NIC."""
    p = plan(MEGA, gpus=4, keep="none", linkGbps=200)
    assert len(_pool(p, "h100-mega")["networkConfig"]["additionalNodeNetworkConfigs"]) == 8
    assert "networking.gke.io/interfaces" not in (_job_pod(p, "train")["metadata"].get("annotations") or {})
    problems = cluster.check(p, p.config, upstream_dir).problems
    assert any(x.startswith("Job training/train") and "the pods no networking.gke.io/interfaces" in x
               and "training.gpusPerNode 8" in x for x in problems), problems



def test_a_job_whose_pods_work_alone_on_each_node_needs_no_gpudirect(upstream_dir: Path):
    """The GPU-ready gate runs one pod on each of the pool's two nodes, none talking to another: on a
    GPU-NIC pool without GPUDirect it is no NCCL job (training on one node, no acceptance: nothing
    here talks across nodes). Failed before: the gate's two pods were taken for a multi-node job."""
    gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
    gke["gpuPools"] = [{**MEGA, "gpuDirect": "off", "autoscaling": {"minNodes": 2, "maxNodes": 2}}]
    p = program.run("gke", config=stack_config_with(
        "gke", gke=gke, training={"nodes": 1, "gpusPerNode": 8, "cpuRequest": "8", "cpuLimit": "16",
                                  "memoryRequest": "64Gi", "memoryLimit": "96Gi"}))
    gate = [j for j in _of(p, "kubernetes:batch/v1:Job") if j["metadata"]["name"] == "gpu-ready"]
    assert gate and gate[0]["spec"]["parallelism"] == 2  # two pods, one per node
    report = cluster.check(p, p.config, upstream_dir)
    assert report.ok, report.problems
