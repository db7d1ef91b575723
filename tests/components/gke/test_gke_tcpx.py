"""GPUDirect-TCPX (a3-highgpu-8g) held to Google's own manifests (tests/components/gke/upstream/
gpudirect-tcpx/, copied from container-engine-accelerators at 992db81): the NCCL plugin installer
DaemonSet, the tcpx-daemon sidecar and the annotations of Google's NCCL test pods, NCCL's TCPX
environment of Google's run-nccl.sh. What differs from Google on purpose is named in each test."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

import config
from components import versions
from components.gke.gpudirect_installers import daemonsets
from components.training import gpudirect_pod
from config.gcp.gpudirect import GpuDirectKind
from stacks.gke_gpudirect import pod_gpudirect
from tests.config.test_gke_config import gke_raw
from tests.config.test_gke_gpudirect_config import HIGH, MEGA, jobs

UPSTREAM = Path(__file__).resolve().parent / "upstream" / "gpudirect-tcpx"
MINOR = versions.KUBERNETES_DEFAULT.rsplit(".", 1)[0]
H100 = ("nvidia-h100-80gb",)


def _google(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((UPSTREAM / name).read_text()) if d]


def _google_pod() -> dict[str, Any]:
    return next(d for d in _google("nccl-test-latest.yaml") if d["kind"] == "Pod")


def _tcpx() -> gpudirect_pod.PodGpuDirect:
    """What the gke stack hands its multi-node jobs on an A3 High pool (gpuDirect auto by default)."""
    g = pod_gpudirect(config.parse(jobs(gke_raw(HIGH))))
    assert g is not None and g.kind is GpuDirectKind.TCPX
    return g


def test_the_tcpx_installer_is_googles_daemonset():
    (ours, injector) = daemonsets({GpuDirectKind.TCPX: H100})
    (theirs,) = _google("nccl-tcpx-installer.yaml")
    kubernetes_validate.validate(ours, MINOR, strict=True)
    assert ours["metadata"] == theirs["metadata"]
    assert ours["spec"]["selector"] == theirs["spec"]["selector"]
    assert ours["spec"]["template"]["metadata"] == theirs["spec"]["template"]["metadata"]
    pod, up = ours["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    assert pod == up  # Google's manifest selects nvidia-h100-80gb too
    assert pod["initContainers"][0]["image"] == versions.GKE_TCPX_NCCL_PLUGIN_IMAGE
    assert injector["metadata"]["name"] == "device-injector"  # the tcpx-daemon's devices (gpu_direct.tf)


def test_one_device_injector_serves_tcpx_and_tcpxo_pools():
    """A stack with an A3 High and an A3 Mega pool (single-node jobs, each its own network): one
    injector DaemonSet on both accelerators, not two of the same name."""
    names = [d["metadata"]["name"] for d in daemonsets({GpuDirectKind.TCPX: H100,
                                                        GpuDirectKind.TCPXO: ("nvidia-h100-mega-80gb",)})]
    assert names == ["nccl-tcpx-installer", "nccl-tcpxo-installer", "device-injector"]
    (injector,) = [d for d in daemonsets({GpuDirectKind.TCPX: H100, GpuDirectKind.TCPXO: ("nvidia-h100-mega-80gb",)})
                   if d["metadata"]["name"] == "device-injector"]
    (term,) = injector["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["nvidia-h100-80gb", "nvidia-h100-mega-80gb"]
    assert "device-injector" not in [d["metadata"]["name"] for d in daemonsets({GpuDirectKind.RDMA: ("nvidia-b200",)})]


def test_the_pod_annotations_are_googles():
    ours = gpudirect_pod.pod_annotations(_tcpx())
    theirs = _google_pod()["metadata"]["annotations"]
    assert ours[gpudirect_pod.DEFAULT_INTERFACE_ANNOTATION] == theirs["networking.gke.io/default-interface"]
    interfaces = "networking.gke.io/interfaces"
    assert json.loads(ours[interfaces]) == json.loads(theirs[interfaces])
    devices = "devices.gke.io/container.tcpx-daemon"
    assert ours[devices] == theirs[devices]  # no /dev/dmabuf_import_helper: that is TCPXO's
    assert set(ours) == set(theirs)


def _mount_sources(container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """mountPath -> what is mounted there (the volume without its name)."""
    by_name = {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in volumes}
    return {m["mountPath"]: by_name[m["name"]] for m in container["volumeMounts"]}


def test_the_tcpx_daemon_is_googles_as_a_native_sidecar():
    g = _tcpx()
    (ours,) = gpudirect_pod.sidecars(g)
    google = _google_pod()
    theirs = next(c for c in google["spec"]["containers"] if c["name"] == "tcpx-daemon")
    for key in ("name", "command", "securityContext", "env"):
        assert ours[key] == theirs[key], key  # NET_ADMIN only, no privileged
    assert ours["image"] == theirs["image"] == versions.GKE_TCPX_DAEMON_IMAGE
    assert ours["restartPolicy"] == "Always"  # before the trainer, and the Job completes when it exits
    mine = _mount_sources(ours, gpudirect_pod.volumes(g))
    google_mounts = _mount_sources(theirs, google["spec"]["volumes"])
    # The socket directory: an emptyDir shared with the trainer (the Toolkit's enable-tcpx-in-workload.py),
    # not Google's hostPath /run/tcpx; the libraries: the host's nvidia dir whose lib64 Google mounts.
    assert mine.pop("/run/tcpx") == {"emptyDir": {}} and google_mounts.pop("/run/tcpx") == {"hostPath": {"path": "/run/tcpx"}}
    assert mine.pop("/usr/local/nvidia") == {"hostPath": {"path": "/home/kubernetes/bin/nvidia"}}
    assert google_mounts.pop("/usr/local/nvidia/lib64") == {"hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64"}}
    assert mine == google_mounts  # /sys and /proc/sys of the host


def _run_nccl_env() -> dict[str, str]:
    """The NCCL_* variables Google's run-nccl.sh exports to every rank (mpirun -x NAME=value)."""
    (config_map,) = _google("nccl-config.yaml")
    script = config_map["data"]["run-nccl.sh"]
    return {m[1]: m[3] for m in re.finditer(r'-x (NCCL_\w+)=("?)([^"\s]*)\2', script)}


def test_the_trainer_gets_googles_nccl_environment_and_the_daemons_socket():
    g = _tcpx()
    env = dict(gpudirect_pod.trainer_env(g))
    google = _run_nccl_env()
    assert len(google) >= 18 and google["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert {k: env.get(k) for k in google} == google
    # The one addition: the daemon's socket directory, mounted at /run/tcpx instead of over /tmp.
    assert set(env) - set(google) == {"NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"}
    assert env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == "/run/tcpx"
    mounts = _mount_sources({"volumeMounts": gpudirect_pod.trainer_mounts(g)}, gpudirect_pod.volumes(g))
    assert mounts["/run/tcpx"] == {"emptyDir": {}}
    assert mounts["/usr/local/nvidia"] == {"hostPath": {"path": "/home/kubernetes/bin/nvidia"}}
    assert gpudirect_pod.prelude(g) == ('export LD_LIBRARY_PATH="/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"',)


def test_tcpxo_pods_keep_their_own_daemon():
    g = pod_gpudirect(config.parse(jobs(gke_raw(MEGA))))
    assert g is not None and g.daemon_image == versions.GKE_TCPXO_DAEMON_IMAGE
    assert [c["name"] for c in gpudirect_pod.sidecars(g)] == ["tcpxo-daemon"]
    assert "devices.gke.io/container.tcpxo-daemon" in gpudirect_pod.pod_annotations(g)
