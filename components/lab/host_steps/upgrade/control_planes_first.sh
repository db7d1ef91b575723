#!/usr/bin/env bash
# Part of a worker's drain: a worker's kubelet must not be newer than any API server (kubeadm
# upgrades every control plane first): with other control planes joined, wait until each one's
# kubelet, upgraded right after its static pods, runs the new version.
# Filled in: __TRIES__ (upgrade.slotTries, 10 s each).
# shellcheck disable=SC2154  # node, have, want: set by drain_decide.sh

if [ "$(bare_version "$have")" != "$want" ]; then
  behind=
  for ((n = 0; n < __TRIES__; n++)); do
    behind=$(k get nodes -l node-role.kubernetes.io/control-plane \
      -o jsonpath='{range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}{"\n"}{end}' \
      | grep -v "=v$want\$" || true)
    if [ -z "$behind" ]; then
      break
    fi
    sleep 10
  done
  if [ -n "$behind" ]; then
    echo "$node waits for the control planes to run v$want first; still behind: $(tr '\n' ' ' <<<"$behind")" >&2
    exit 1
  fi
fi
