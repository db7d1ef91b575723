"""The dev stack as `pulumi up` runs it in the e2e tier: the committed Pulumi.dev.yaml, pointed at
the e2e control plane instead of a local minikube.

Only what ties the stack to one machine changes: the kubeconfig (a secret of the stack, the e2e
admin's, in place of the `minikube` context), the GPU nodes (the KWOK nodes of the control plane's
node model, with their GPUs) and the service range the control plane was started with. Every other
value is the committed stack's, plus the features each variant turns on (VARIANTS), and the charts
come from a local folder (gpu-cluster:chartsDir: nothing is downloaded).

Left out, and why (docs/verification.md): Kueue queues and the PyTorchJob launcher. Their objects
are admitted by their operators' webhooks (Kueue's, the training operator's), whose servers would
be pods; KWOK's pods run nothing, so the API server's call fails and it refuses the object (and
Kueue's visibility APIService, unavailable, blocks namespace deletion). The RDMA network: Multus'
DaemonSet pods stay in KWOK's init-container stages past pulumi-kubernetes' await.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ControlPlane

PROJECT_DIR = Path(__file__).resolve().parent.parent
PREFIX = "gpu-cluster:"

# Two GPU nodes of one GPU each (the control plane's node model), so training, the NCCL acceptance
# Job and the NCCL pair check span two nodes; a node directory is not shared between nodes, so the
# shared claim is seed 003's static NFS volume.
COMMON: dict[str, Any] = {
    "storage": {"nfs": {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}, "size": "100Gi"},
    "network": {"linkGbps": 25, "rdma": False},
    "wandb": {"enabled": True, "entity": "ml-team", "queue": "gpu-queue", "project": "llm"},
}
# variant -> (its config on top of COMMON, one value to change for the update step)
VARIANTS: dict[str, tuple[dict[str, Any], tuple[str, Any]]] = {
    "device-plugin": (
        {"gpu": {"stack": "device-plugin"}, "acceptance": {"nccl": True},
         "training": {"nodes": 2, "gpusPerNode": 1, "launcher": "indexed-job"}},
        ("training.image", "registry.example.com/gpu-cluster/trainer:0.1.1"),
    ),
    "gpu-operator": (
        {"gpu": {"stack": "operator"}, "training": {"nodes": 2, "gpusPerNode": 1, "launcher": "indexed-job"}},
        ("monitoring.alerts.gpuTempCelsius", 80),
    ),
}


def committed(stack: str = "dev") -> dict[str, Any]:
    """The stack file's config, keys without the project prefix."""
    doc = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())
    return {k.removeprefix(PREFIX): v for k, v in (doc.get("config") or {}).items()}


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with each override merged in: objects key by key, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def with_value(cfg: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """`cfg` with one value changed, `dotted` as `pulumi config set --path` names it (a.b.c)."""
    head, *rest = dotted.split(".")
    nested: Any = value
    for key in reversed(rest):
        nested = {key: nested}
    return merged(cfg, {head: nested})


def config(plane: ControlPlane, charts_dir: Path, variant: str) -> dict[str, Any]:
    cfg = copy.deepcopy(committed())
    gpu_nodes = {n.name: n.gpus for n in plane.lab.nodes if n.is_gpu}
    cfg.pop("kubeContext", None)  # the kubeconfig secret takes its place (both set is refused)
    cfg.pop("storage", None)  # COMMON's NFS volume replaces the committed node directory
    cfg["gpuNodes"] = sorted(gpu_nodes)
    cfg["gpuNodeGpus"] = gpu_nodes
    cfg["serviceCidr"] = plane.lab.service_cidr
    cfg["chartsDir"] = str(charts_dir)
    return merged(merged(cfg, COMMON), VARIANTS[variant][0])


def admin_kubeconfig(plane: ControlPlane) -> str:
    """The admin's kubeconfig with the certificates inline: the stack's secret holds all of it."""
    assert plane.certs is not None
    path = plane.certs.kubeconfig("admin", plane.server, plane.folder)
    doc = yaml.safe_load(path.read_text())
    def inline(file: str) -> str:
        return base64.b64encode(Path(file).read_bytes()).decode()

    for cluster in doc["clusters"]:
        cluster["cluster"]["certificate-authority-data"] = inline(cluster["cluster"].pop("certificate-authority"))
    for user in doc["users"]:
        user["user"]["client-certificate-data"] = inline(user["user"].pop("client-certificate"))
        user["user"]["client-key-data"] = inline(user["user"].pop("client-key"))
    return yaml.safe_dump(doc, sort_keys=False)
