"""GPUs per node as the config declares them (lab: hosts[].gpus; dev: gpuNodes[].gpus), held to what
a server carries, and the training job held to what the nodes have.

The most GPUs one node carries: 16. NVIDIA's densest servers (DGX-2 and HGX-2: 16 V100 over NVSwitch)
and Compute Engine's a2-megagpu-16g (16 A100, config/gcp/accelerators.py) carry 16; today's HGX/DGX
B200, H200 and H100 boards carry 8. training.gpusPerNode and gke.gpuPools[].accelerator.count stop at
16 too, so a larger count is a typo (1000000) that would only make the checks below pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from config.errors import Problems

MAX_GPUS_PER_NODE = 16


def check_gpu_count(v: int) -> int:
    """A node's GPU count: 0 (a CPU node) to MAX_GPUS_PER_NODE."""
    if v < 0:
        raise ValueError("must be 0 or more")
    if v > MAX_GPUS_PER_NODE:
        raise ValueError(f"must be at most {MAX_GPUS_PER_NODE}, the most GPUs one server carries (DGX-2/HGX-2 "
                         f"and a2-megagpu-16g have 16; got {v})")
    return v


def fit_problems(counts: Sequence[int], nodes: int, gpus_per_node: int, noun: str, source: str) -> Problems:
    """training.nodes pods of training.gpusPerNode GPUs each, one pod per node, on GPU nodes with
    `counts` GPUs (every GPU node, each count known); `noun` names a node as the platform does (host,
    GPU node), `source` the key its count comes from."""
    gpu_nodes = sorted((c for c in counts if c > 0), reverse=True)
    if not gpu_nodes:
        return [("training.enabled", f"no GPU node is configured ({source})")]
    problems: Problems = []
    if nodes > len(gpu_nodes):
        problems.append(("training.nodes", f"{nodes} pods (one per node) but only {len(gpu_nodes)} {noun}s with "
                                           f"gpus > 0 ({source})"))
    if gpus_per_node > gpu_nodes[0]:
        problems.append(("training.gpusPerNode",
                         f"{gpus_per_node} GPUs per pod but no {noun} has more than {gpu_nodes[0]} ({source})"))
    elif nodes <= len(gpu_nodes) and gpu_nodes[nodes - 1] < gpus_per_node:
        problems.append(
            ("training.gpusPerNode",
             f"{nodes} x {gpus_per_node} GPUs do not fit: only {sum(g >= gpus_per_node for g in gpu_nodes)} "
             f"{noun}(s) have {gpus_per_node} or more GPUs ({source})")
        )
    return problems
