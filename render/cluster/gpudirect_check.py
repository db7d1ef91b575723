"""The whole-cluster check's GPUDirect part (gke): a multi-node job's pods on a machine with GPU NICs
(the machine table, through the Inventory: gpu_nics) but without its GPUDirect network would run
NCCL over the host NIC at a fraction of the machine's network: exit 3, naming the pool and the key.
A job counts when its pods talk to each other across nodes: a PyTorchJob, or pods under a headless
Service's subdomain (the Indexed training and NCCL acceptance Jobs' rendezvous); a Job whose pods each
work alone on their node (the GPU-ready gate) does not.

What counts as the network is what the plan holds, not the config's intent: the node pool's
additional node networks (networkConfig.additionalNodeNetworkConfigs) at least the machine's GPU
NICs, and the pod's networking.gke.io/interfaces annotation.

The networking.gke.io/v1 Network and GKENetworkParamSet objects are served by GKE on
multi-networking clusters, with no CRD in the plan: they are validated against Google's CRDs from
GoogleCloudPlatform/gke-networking-api (config/crds/networking.gke.io_networks.yaml and
_gkenetworkparamsets.yaml at 34c617f213240483385491398d7904e20d0b6adc, copied unchanged into
platform_crds/; Apache-2.0). The older copies in kubernetes/cloud-provider-gcp crd/config/crds allow
only type L2/L3 and deviceMode NetDevice/DPDK-VFIO, which Google's own GPUDirect manifests (type
Device, deviceMode RDMA) would fail: GKE's API moved to gke-networking-api.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from config import GkeStack, StackConfig
from render.cluster.admission import PLATFORM_SOURCE
from render.cluster.objects import Obj
from render.cluster.scheduling import Placement

CRD_DIR = Path(__file__).resolve().parent / "platform_crds"
CRD_ORIGIN = "GKE multi-networking (GoogleCloudPlatform/gke-networking-api@34c617f)"
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"


def gke_crds() -> list[Obj]:
    """The CRDs GKE serves for multi-networking, as platform CRDs of the check."""
    return [Obj(yaml.safe_load(path.read_text()), source=PLATFORM_SOURCE, origin=CRD_ORIGIN)
            for path in sorted(CRD_DIR.glob("networking.gke.io_*.yaml"))]


def _attached(plan_inputs: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Node pool name -> its additional node networks in the plan."""
    out: dict[str, int] = {}
    for pool in plan_inputs.get("gcp:container/nodePool:NodePool", []):
        extra = ((pool.get("networkConfig") or {}).get("additionalNodeNetworkConfigs")) or []
        out[str(pool.get("name"))] = len(extra)
    return out


def _talks_across_nodes(kind: str, pod_spec: dict[str, Any]) -> bool:
    return kind == "PyTorchJob" or bool(pod_spec.get("subdomain"))


def problems(cfg: StackConfig, plan_inputs: dict[str, list[dict[str, Any]]],
             placements: list[Placement], node_groups: dict[str, str]) -> list[str]:
    """`node_groups`: modelled node name -> its group (the gke pool)."""
    if not isinstance(cfg, GkeStack):
        return []
    nics = {g.name: (g.config_index, g.gpu_nics) for g in cfg.inventory.groups if g.gpu_nics}
    attached = _attached(plan_inputs)
    out: list[str] = []
    for p in placements:
        w = p.workload
        if w.daemon or w.pods < 2 or not p.nodes or not _talks_across_nodes(w.kind, w.spec):
            continue
        annotated = INTERFACES_ANNOTATION in ((w.metadata or {}).get("annotations") or {})
        for pool in sorted({node_groups.get(n, "") for n in p.nodes}):
            if pool not in nics:
                continue
            i, count = nics[pool]
            if attached.get(pool, 0) >= count and annotated:
                continue
            pool_cfg = cfg.gke.gpu_pools[i]
            # GPUDirect pods take the whole machine (config/gke_gpudirect.py jobs_gpudirect)
            whole = (f", or training.gpusPerNode {pool_cfg.accelerator.count} (GPUDirect pods take the whole "
                     "machine)" if cfg.training.gpus_per_node != pool_cfg.accelerator.count else "")
            out.append(f"{w.ref}: {w.pods} pods across nodes of gke.gpuPools[{i}] ({pool}, {pool_cfg.machine_type}, "
                       f"{count} GPU NICs) without its GPUDirect network (the pool has {attached.get(pool, 0)} "
                       f"additional node networks{'' if annotated else ', the pods no networking.gke.io/interfaces'}): "
                       f"NCCL would run over the host NIC; set gpu-cluster:gke.gpuPools[{i}].gpuDirect auto{whole}, "
                       "or training.nodes 1")
    return out
