#!/usr/bin/env bash
# A control plane's driver-ready step, updated: driver_ready's GPU check after the reboot, then the
# node uncordoned if its driver upgrade drained it (nvidia_driver_self_upgrade).
# Filled in: __NODE__, __GPUS__ (the host's gpus), __SPEC__ (nvidia-driver-<branch>-server[=<version>]).

node=__NODE__
# @include node_prep/driver_ready.sh
if [ -f /etc/kubernetes/admin.conf ]; then
  wait_api
  uncordon_node "$node"
fi
echo "$node: __SPEC__ ready"
