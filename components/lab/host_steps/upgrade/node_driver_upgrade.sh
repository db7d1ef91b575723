#!/usr/bin/env bash
# After node_upgrade.sh on a worker whose driver node prep installs: the driver branch switched and
# a reboot asked for (stdout: `gpu-cluster: reboot boot-id=<id>`, the ready step waits for it).
# Filled in: __BRANCH__ (nvidiaDriver.branch), __VERSION__ (nvidiaDriver.version, '' for any).
# shellcheck disable=SC2154  # node: set by node_upgrade.sh

pkg=nvidia-driver-__BRANCH__-server
want_driver=__VERSION__
if ! driver_current "$pkg" "$want_driver"; then
  # The drain (_drain_body) ran first; should it not have drained the node (it read the
  # running driver from node labels), a node with work on it is not rebooted.
  cordoned=$(kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node "$node" -o jsonpath='{.spec.unschedulable}' || true)
  if [ "$cordoned" != true ]; then
    echo "$node: the NVIDIA driver must change to $pkg${want_driver:+=$want_driver} but the node is not drained; drain it (kubectl drain $node --ignore-daemonsets --delete-emptydir-data) and run pulumi up again" >&2
    exit 1
  fi
  driver_switch "$pkg" "$want_driver" >&2
  echo "$node: $pkg${want_driver:+=$want_driver} installed; rebooting" >&2
  reboot_soon
elif reboot_pending; then
  echo "gpu-cluster: reboot boot-id=$(cat /proc/sys/kernel/random/boot_id)"
fi
