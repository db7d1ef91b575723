#!/usr/bin/env bash
# A control plane's nvidia-driver step, updated: a control plane drains itself (it has the admin
# kubeconfig), one at a time, installs the new branch and reboots; driver_ready_uncordon, the next
# step, waits for it and uncordons it.
# Filled in: __NODE__, __BRANCH__ (nvidiaDriver.branch), __VERSION__ (nvidiaDriver.version, ''
# for any), __SLOT_TRIES__ (10 s each).

node=__NODE__
pkg=nvidia-driver-__BRANCH__-server
want_driver=__VERSION__
if driver_current "$pkg" "$want_driver"; then
  echo "$node: $pkg${want_driver:+=$want_driver} is installed"
  exit 0
fi
wait_api
acquire_slot "$node" 1 __SLOT_TRIES__
drain_node "$node"
driver_switch "$pkg" "$want_driver"
echo "$node: $pkg${want_driver:+=$want_driver} installed; rebooting" >&2
reboot_soon
