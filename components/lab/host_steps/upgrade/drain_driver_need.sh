#!/usr/bin/env bash
# Part of drain_decide.sh, on a worker whose driver node prep installs: whether its NVIDIA driver
# must change, read from GPU Feature Discovery's node label (the running driver's version, e.g.
# 570.172.08); a node without the label is drained.
# Filled in: __BRANCH__ (nvidiaDriver.branch), __VERSION__ (nvidiaDriver.version, '' for any).
# shellcheck disable=SC2154  # node, need: set by drain_decide.sh

branch=__BRANCH__
pkg=nvidia-driver-__BRANCH__-server
want_driver=__VERSION__
seen=$(k get node "$node" -o jsonpath='{.metadata.labels.nvidia\.com/cuda\.driver-version\.full}')
if [ -n "$want_driver" ]; then
  upstream=${want_driver#*:}
  [ "$seen" = "${upstream%%-*}" ] || need="$need, driver ${seen:-unknown} -> $want_driver"
elif [ "${seen%%.*}" != "$branch" ]; then
  need="$need, driver ${seen:-unknown} -> $pkg"
fi
