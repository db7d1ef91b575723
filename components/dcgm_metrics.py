"""The DCGM fields the exporter publishes: its default list plus the GPU health signals.

The DCGM exporter's default list (the chart's exporter-metrics-config-map and the image's
default-counters.csv) leaves out, commented, the fields that tell a failing GPU from a busy one:
volatile ECC error counts, NVLink CRC / replay / recovery errors, and the time the GPU spent
throttled by power or thermal limits. Both GPU-stack paths get this list instead (a list replaces
the default whole, so the defaults are repeated):

* device-plugin stack: the dcgm-exporter chart's `customMetrics` (its ConfigMap, mounted where
  the exporter's `-f` reads it);
* GPU Operator: `dcgmExporter.config` {name, create, data} (the chart's ConfigMap under key
  dcgm-metrics.csv, named in the ClusterPolicy).

Every field here is one the exporter's own list names (commented or not), and every default field
stays: a test holds both against ../shared/upstream/dcgm-exporter/default-counters.csv. The alert
rules (components/monitoring/alerts.py) use these fields and no others.
"""

from __future__ import annotations

# (DCGM field, Prometheus type, help): the exporter's defaults, in its order.
DEFAULT_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus in bytes per second."),
)

# The GPU health signals the defaults leave out (components/monitoring/alerts.py alerts on them).
HEALTH_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
    # Nanoseconds (DCGM's field docs and dcgm_fields.h; dcgm-exporter's CSV said "us" until its PR
    # #589): components/monitoring/alerts.py divides their rate by 1e9 for a share of the time.
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns)."),
)

FIELDS = DEFAULT_FIELDS + HEALTH_FIELDS
# The GPU Operator's ConfigMap of them (created by its chart; dcgmExporter.config.name).
OPERATOR_CONFIGMAP = "gpu-cluster-dcgm-metrics"


def metrics_csv() -> str:
    """The exporter's metrics file: `field, type, help` a line, as its default-counters.csv."""
    lines = ["# DCGM FIELD, Prometheus metric type, help message (gpu-cluster: components/dcgm_metrics.py)"]
    lines += [f"{field}, {kind}, {text}" for field, kind, text in FIELDS]
    return "\n".join(lines) + "\n"
