"""GPUDirect-TCPX on the gke stack, evaluated by the real program under the recording mocks: an A3
High pool gets the four GPU VPCs of Cluster Toolkit's examples/gke-a3-highgpu blueprint, its
multi-node jobs the tcpx-daemon sidecar, Google's annotations and NCCL environment, and the whole
cluster comes up in the check and exit 3 without it (test_gke_gpudirect_stack, with the other families).
The pod side is held to Google's manifests in tests/components/gke/test_gke_tcpx.py.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

from components import versions
from render import cluster, program
from tests.conftest import stack_config_with
from tests.stacks.test_gke_gpudirect_stack import HIGH, MEGA, _job_pod, _of, _pool, plan


def test_a3_high_gets_four_tcpx_vpcs_as_the_toolkit_blueprint():
    p = plan(HIGH)
    nets = {n["name"]: n for n in _of(p, "gcp:compute/network:Network")}
    assert sorted(nets) == [f"gpu-cluster-gpunet-{i}" for i in range(4)]  # multivpc network_count 4
    assert {n["mtu"] for n in nets.values()} == {8244}
    subnets = {s["name"]: s for s in _of(p, "gcp:compute/subnetwork:Subnetwork")}
    ranges = [ipaddress.ip_network(subnets[f"gpu-cluster-gpunet-{i}-subnet"]["ipCidrRange"]) for i in range(4)]
    assert all(r.prefixlen == 20 for r in ranges) and len(set(ranges)) == 4
    assert len(_of(p, "gcp:compute/firewall:Firewall")) == 4
    h100 = _pool(p, "h100")
    extra = h100["networkConfig"]["additionalNodeNetworkConfigs"]
    assert [e["subnetwork"] for e in extra] == [f"gpu-cluster-gpunet-{i}-subnet" for i in range(4)]
    assert h100["nodeConfig"]["gvnic"] == {"enabled": True}
    params = {o["metadata"]["name"]: o["spec"]["deviceMode"] for o in _of(p, "kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    assert params == {f"vpc{i}": "NetDevice" for i in range(1, 5)}
    (c,) = _of(p, "gcp:container/cluster:Cluster")
    assert c["enableMultiNetworking"] is True


def test_both_jobs_carry_the_tcpx_daemon_and_the_four_networks():
    p = plan(HIGH)
    ds = {d["metadata"]["name"] for d in _of(p, "kubernetes:apps/v1:DaemonSet")}
    assert {"nccl-tcpx-installer", "device-injector"} <= ds
    for job in ("nccl-acceptance", "train"):
        pod = _job_pod(p, job)
        annotations = pod["metadata"]["annotations"]
        interfaces = json.loads(annotations["networking.gke.io/interfaces"])
        assert [(i["interfaceName"], i["network"]) for i in interfaces] == [
            ("eth0", "default"), *((f"eth{i}", f"vpc{i}") for i in range(1, 5))]
        assert "- path: /dev/nvidia7\n" in annotations["devices.gke.io/container.tcpx-daemon"]
        (daemon,) = pod["spec"]["initContainers"]
        assert (daemon["name"], daemon["image"], daemon["restartPolicy"]) == (
            "tcpx-daemon", versions.GKE_TCPX_DAEMON_IMAGE, "Always")
        (trainer,) = pod["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4" and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert {"name": "tcpx-socket", "mountPath": "/run/tcpx"} in trainer["volumeMounts"]
    script = _job_pod(p, "nccl-acceptance")["spec"]["containers"][0]["command"][2]
    assert "--link-gbps 800" in script  # 4 x 200 Gbps, Google's A3 High figure
    subprocess.run(["sh", "-n", "-c", script], check=True, timeout=30)


def test_tcpx_and_tcpxo_pools_in_one_stack_share_the_first_four_gpu_vpcs(upstream_dir: Path):
    """Both families name their VPCs <cluster>-gpunet-<i> and their networks vpc1.. (the blueprints):
    the A3 High pool attaches to the A3 Mega pool's first four, each made once, one device injector.
    Single-node jobs: a multi-node job over both families is refused (config/gke_gpudirect.py)."""
    gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
    gke["gpuPools"] = [MEGA, HIGH]
    p = program.run("gke", config=stack_config_with("gke", gke=gke))
    assert sorted(n["name"] for n in _of(p, "gcp:compute/network:Network")) == [f"gpu-cluster-gpunet-{i}" for i in range(8)]
    assert len(_of(p, "gcp:compute/firewall:Firewall")) == 8
    mega, high = (_pool(p, n)["networkConfig"]["additionalNodeNetworkConfigs"] for n in ("h100-mega", "h100"))
    assert high == mega[:4] and len(mega) == 8
    names = [o["metadata"]["name"] for o in _of(p, "kubernetes:networking.gke.io/v1:Network")]
    assert sorted(names) == [f"vpc{i}" for i in range(1, 9)]
    ds = [d["metadata"]["name"] for d in _of(p, "kubernetes:apps/v1:DaemonSet")]
    assert ds.count("device-injector") == 1 and {"nccl-tcpx-installer", "nccl-tcpxo-installer"} <= set(ds)
    report = cluster.check(p, p.config, upstream_dir)
    assert report.ok, report.problems
