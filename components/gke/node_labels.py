"""Node labels this program sets on GKE GPU pools itself; a pool's own `labels` may not use them.

Imports nothing of the project, so the config model can refuse them before anything is registered.
"""

from __future__ import annotations

POOL_LABEL = "gpu-cluster/pool"
# Which driver-installer DaemonSet (if any) serves the node: driver_installer.py selects on it.
DRIVER_LABEL = "gpu-cluster/gke-driver"
# NVIDIA's GPU Operator on GKE: this label keeps GKE's device plugin DaemonSet off the node.
NO_GKE_DEVICE_PLUGIN_LABEL = "gke-no-default-nvidia-gpu-device-plugin"

# The GPU Operator's MIG manager partitions a node by this label (set from gpu.sharing.migProfile).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"

OWN_LABELS = (POOL_LABEL, DRIVER_LABEL, NO_GKE_DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL)
