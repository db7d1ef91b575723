"""Node labels this program sets on GKE GPU pools itself; a pool's own `labels` may not use them.

Imports only the scheduling contract (which imports nothing of the project), so the config model
can refuse them before anything is registered. Two of them belong to the contract and are defined
there (components/scheduling_contract.py); the config model reads NO_GKE_DEVICE_PLUGIN_LABEL here.
"""

from __future__ import annotations

from components.scheduling_contract import MIG_CONFIG_LABEL, NO_GKE_DEVICE_PLUGIN_LABEL

POOL_LABEL = "gpu-cluster/pool"
# Which driver-installer DaemonSet (if any) serves the node: driver_installer.py selects on it.
DRIVER_LABEL = "gpu-cluster/gke-driver"

OWN_LABELS = (POOL_LABEL, DRIVER_LABEL, NO_GKE_DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL)
