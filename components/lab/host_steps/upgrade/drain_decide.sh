#!/usr/bin/env bash
# A joined node's upgrade, first part (node_upgrade_drain on the control plane, node_self_upgrade on
# the node): what must change on the node; exit 0 when nothing must. Then, for a worker,
# control_planes_first.sh, and drain_take_slot.sh.
# Filled in: __NODE__, __VERSION__ (kubernetesVersion), __DRIVER_NEED__ (drain_driver_need.sh,
# filled, on a worker whose driver node prep installs; else nothing, a blank line).

node=__NODE__
want=__VERSION__
wait_api
have=$(k get node "$node" -o jsonpath='{.status.nodeInfo.kubeletVersion}')
if [ -z "$have" ]; then
  echo "node $node is not in the cluster" >&2
  exit 1
fi
refuse_skew "$have" "$want" "node $node"
need=
if [ "$(bare_version "$have")" != "$want" ]; then
  need="kubelet $have -> v$want"
fi
__DRIVER_NEED__
if [ -z "$need" ]; then
  echo "$node: nothing to upgrade" >&2
  exit 0
fi
