"""XID -> node action, from NVIDIA's published XID catalogue.

Source: NVIDIA, "Xid Errors" / "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and newer), column
"Resolution Bucket (Immediate Action)"; the bucket of each XID below is the catalogue's. Its
buckets and what this service does for each:

  IGNORE, RESTART_APP      nothing or the application is at fault: NONE (the GPU stays in service)
  RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR ("a GPU reset or node reboot is needed")
                           RESET_GPU: cordon, taint, drain GPU pods; a GPU reset is recommended
  RESTART_BM, RESTART_VM   REBOOT: cordon, taint, drain; a reboot of the machine is recommended
  anything else            (CONTACT_SUPPORT, XID_154, new buckets): the unknown-XID rule below

One departure from the buckets: 94 (contained ECC error, RESTART_APP: the application that hit it
is stopped, and the catalogue's investigatory action asks for a GPU reset when convenient) CORDONS
the node without a drain: running jobs go on, new ones land elsewhere, and the next passing
diagnostic (after the reset) brings it back. 63 (row remap recorded, applied at the next reset)
and 92 (high single-bit ECC rate) follow their IGNORE bucket: NVIDIA's A100/H100 memory error
guide ("Error Recovery and Response Flags") says that with a remap pending "unaffected
applications can continue running ... and new workloads can be launched". A remap that fails is
XID 64 and the GpuRowRemapFailure alert, which drain.

The alert rules' FATAL_XIDS (components/monitoring/alerts.py) are exactly the XIDs this table
drains for (a test keeps them equal).

This service never resets a GPU or reboots a node itself: RESET_GPU and REBOOT are recommendations,
written into the node annotation and Event, on top of the drain. Unknown XIDs (not in this table)
get CORDON: no new pods land on the node, running ones are not evicted (an unknown XID may be an
application fault, and killing a training job is the expensive mistake), and the node comes back
after a passing diagnostic like any other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.IntEnum):
    """Ordered by strength: a stronger action for a node already out of service escalates it."""

    NONE = 0
    CORDON = 1      # cordon + taint
    DRAIN = 2       # cordon + taint + evict GPU pods
    RESET_GPU = 3   # drain; GPU reset recommended
    REBOOT = 4      # drain; node reboot recommended

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @property
    def drains(self) -> bool:
        return self >= Action.DRAIN


@dataclass(frozen=True)
class XidEntry:
    xid: int
    mnemonic: str
    bucket: str          # the catalogue's immediate-action resolution bucket
    action: Action
    note: str = ""


_E = XidEntry
# The XIDs seen on data-centre GPUs in practice, and every XID in components/monitoring/alerts.py
# FATAL_XIDS (a test checks that those are exactly the ones drained for).
TABLE: dict[int, XidEntry] = {e.xid: e for e in (
    _E(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", Action.NONE, "GPU stopped processing"),
    _E(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", Action.NONE, "invalid or corrupted push buffer"),
    _E(13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", Action.NONE, "graphics engine exception (application)"),
    _E(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", Action.NONE, "GPU memory page fault (application)"),
    _E(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", Action.NONE, "GPU stopped processing (application)"),
    _E(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "IGNORE", Action.NONE, "channels torn down after another fault"),
    _E(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", Action.RESET_GPU, "double-bit ECC error"),
    _E(62, "PMU_HALT_ERROR", "RESET_GPU", Action.RESET_GPU, "internal micro-controller halt"),
    _E(63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", Action.NONE, "row remapping recorded: applied at next reset"),
    _E(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", Action.RESET_GPU, "row remapping failed (RMA if repeated)"),
    _E(74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", Action.RESET_GPU, "NVLink error"),
    _E(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", Action.REBOOT, "GPU fell off the bus"),
    _E(92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", Action.NONE, "high single-bit ECC error rate"),
    _E(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", Action.CORDON, "contained ECC error: reset when idle"),
    _E(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", Action.RESET_GPU, "uncontained ECC error"),
    _E(119, "GSP_RPC_TIMEOUT", "RESET_GPU", Action.RESET_GPU, "GSP firmware timeout"),
    _E(120, "GSP_ERROR", "RESET_GPU", Action.RESET_GPU, "GSP firmware error"),
    _E(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", Action.RESET_GPU, "ECC unrecovered error"),
)}

UNKNOWN_ACTION = Action.CORDON


def action_for(xid: int) -> tuple[Action, str]:
    """(action, short explanation) for an XID; 0 (no XID) is NONE, an unknown one UNKNOWN_ACTION."""
    if xid == 0:
        return Action.NONE, "no XID"
    entry = TABLE.get(xid)
    if entry is None:
        return UNKNOWN_ACTION, f"XID {xid} not in the table: cordoned without drain until a diagnostic passes"
    return entry.action, f"XID {xid} {entry.mnemonic} ({entry.bucket}): {entry.note}"
