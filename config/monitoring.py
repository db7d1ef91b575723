"""monitoring: kube-prometheus-stack, the GPU dashboards and alert rules (every platform)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, check_dns_subdomain, empty_to_none


class MonitoringAlerts(Model):
    """Thresholds of the GPU alert rules (components/monitoring/alerts.py)."""

    gpu_temp_celsius: int = Field(default=85, ge=60, le=110, description="GpuTemperatureHigh above this, 10 min.")
    idle_minutes: int = Field(default=30, ge=5, le=1440, description="GpuAllocatedButIdle after this long at 0%.")
    # The error-rate thresholds below are this program's choices, not NVIDIA's (it publishes none
    # for them); each alert says its threshold, and a stack sets its own after seeing its fleet.
    ecc_sbe_per_hour: int = Field(default=100, ge=1, le=1_000_000,
                                  description="GpuEccSingleBitErrorRate: corrected ECC errors per hour, for 1 h.")
    nvlink_errors_per_minute: int = Field(default=10, ge=1, le=1_000_000,
                                          description="GpuNvlinkErrorRate: NVLink CRC/replay/recovery errors per minute.")
    pcie_replays_per_minute: int = Field(default=10, ge=1, le=1_000_000,
                                         description="GpuPcieReplayRate: PCIe replays per minute, for 10 min.")
    throttle_percent: int = Field(default=10, ge=1, le=100,
                                  description="GpuPowerThrottled / GpuThermalThrottled: % of the time, for 15 min.")


class MonitoringConfig(Model):
    """kube-prometheus-stack (Prometheus, Alertmanager, Grafana), GPU dashboards and alert rules."""

    enabled: bool = Field(default=True, description="Deploy Prometheus, Alertmanager, Grafana, the GPU dashboards and alert rules.")
    retention: str = Field(default="15d", description="How long Prometheus keeps data, e.g. 15d, 72h (h, d, w, y; at least a day); by size: 85% of storageSize.")
    storage_size: str = Field(default="50Gi", description="Prometheus volume (Gi or Ti): the PVC size, or the emptyDir's size limit.")
    storage_class: str | None = Field(default=None, description="StorageClass of the PVC; unset or empty: an emptyDir (data lost when the pod moves).")
    alerts: MonitoringAlerts = Field(default_factory=MonitoringAlerts, description="Thresholds of the GPU alert rules.")

    _optional = field_validator("storage_class", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _class = field_validator("storage_class")(classmethod(lambda cls, v: v if v is None else check_dns_subdomain(v)))

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(h|d|w|y)", v):
            raise ValueError("must be a Prometheus duration in h, d, w or y, e.g. '15d'")
        return v

    @field_validator("storage_size")
    @classmethod
    def _storage_size(cls, v: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(Gi|Ti)", v):
            raise ValueError("must be a size in Gi or Ti, e.g. '50Gi'")
        return v


def monitoring_problems(m: MonitoringConfig) -> Problems:
    hours = int(m.retention[:-1]) * {"h": 1, "d": 24, "w": 24 * 7, "y": 24 * 365}[m.retention[-1]]
    # The idle alert needs its whole window in the TSDB (and dashboards a day of history).
    if hours * 60 < max(m.alerts.idle_minutes, 24 * 60):
        return [("monitoring.retention", f"{m.retention} is shorter than a day (or alerts.idleMinutes); use e.g. 15d")]
    return []
