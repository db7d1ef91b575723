"""What gke.maintenance and gke.gpuPools[].upgrade set on GKE (config/gke_upgrades.py says why), and
the control plane's minor from kubernetesVersion.

kubernetesVersion reaches GKE as the cluster's min_master_version, its minor only ("1.34"): GKE takes
a version alias 1.X as "the highest valid patch of 1.X" (Google, "GKE versioning and support",
cloud.google.com/kubernetes-engine/versioning), and a patch of this program's kubernetesVersion
(1.34.2) names no GKE release (1.34.x-gke.N). With release channel C, GKE creates the cluster only
when C offers that minor (`gcloud container get-server-config --flatten=channels
--filter=channels.channel=C`), else it refuses at create. The default exclusion (no minor or node
upgrades until the end of support) keeps the minor there, so the offline check, which validates
every object against kubernetesVersion's minor, checks what GKE runs. Raising kubernetesVersion's
minor raises min_master_version: GKE upgrades the control plane; the nodes follow when the exclusion
allows (auto-upgrade), within Kubernetes' skew of the kubelet.
"""

from __future__ import annotations

import pulumi_gcp as gcp

from config.gke import GkeConfig
from config.gke_upgrades import GkeMaintenance, GkePoolUpgrade, UpgradeStrategy


def control_plane_minor(kubernetes_version: str) -> str:
    return ".".join(kubernetes_version.split(".")[:2])


def maintenance_policy(m: GkeMaintenance) -> gcp.container.ClusterMaintenancePolicyArgs:
    return gcp.container.ClusterMaintenancePolicyArgs(
        recurring_window=gcp.container.ClusterMaintenancePolicyRecurringWindowArgs(
            start_time=m.window.start, end_time=m.window.end, recurrence=m.window.recurrence),
        maintenance_exclusions=[
            gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name=e.name, start_time=e.start, end_time=e.end,
                exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                    scope=e.scope.value, end_time_behavior="UNTIL_END_OF_SUPPORT" if e.until_end_of_support else None),
            )
            for e in m.exclusions
        ] or None,
    )


def upgrade_settings(u: GkePoolUpgrade) -> gcp.container.NodePoolUpgradeSettingsArgs:
    if u.strategy is UpgradeStrategy.BLUE_GREEN:
        return gcp.container.NodePoolUpgradeSettingsArgs(
            strategy=u.strategy.gke,
            blue_green_settings=gcp.container.NodePoolUpgradeSettingsBlueGreenSettingsArgs(
                node_pool_soak_duration=u.soak,
                standard_rollout_policy=gcp.container.NodePoolUpgradeSettingsBlueGreenSettingsStandardRolloutPolicyArgs(
                    batch_node_count=1),
            ),
        )
    return gcp.container.NodePoolUpgradeSettingsArgs(strategy=u.strategy.gke, max_surge=u.max_surge,
                                                     max_unavailable=u.max_unavailable)


def upgrades_output(gke: GkeConfig, kubernetes_version: str) -> dict[str, object]:
    """The stack output `upgrades`: what GKE may upgrade and when, as the plan's summary shows it."""
    w = gke.maintenance.window
    return {
        "controlPlaneMinor": control_plane_minor(kubernetes_version),
        "releaseChannel": f"{gke.release_channel.value} (GKE creates the cluster only if it offers this minor: "
                          "`gcloud container get-server-config`)",
        "window": f"{w.recurrence}, {w.start[11:16]}-{w.end[11:16]} UTC",
        "exclusions": [f"{e.name}: {e.scope.value} from {e.start} "
                       f"{'until end of support' if e.until_end_of_support else f'to {e.end}'}"
                       for e in gke.maintenance.exclusions],
        "gpuPools": {p.name: (f"surge (maxSurge {p.upgrade.max_surge}, maxUnavailable {p.upgrade.max_unavailable})"
                              if p.upgrade.strategy is UpgradeStrategy.SURGE else f"blueGreen (soak {p.upgrade.soak})")
                     for p in gke.gpu_pools},
    }
