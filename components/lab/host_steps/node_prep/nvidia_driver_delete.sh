#!/usr/bin/env bash
# nvidia_driver's delete: the driver stays installed (removing it needs a reboot and the host may
# use its GPUs outside Kubernetes); only the hold is released so the host's own updates apply.
# Filled in: __BRANCH__ (nvidiaDriver.branch).

if apt-mark showhold | grep -qx nvidia-driver-__BRANCH__-server; then
  apt-mark unhold nvidia-driver-__BRANCH__-server
fi
