#!/usr/bin/env bash
# Last part of a joined node's drain: take an upgrade slot (one for a control plane, so they go one
# at a time) and drain the node.
# Filled in: __SLOTS__ (maxUnavailable, 1 for a control plane), __SLOT_TRIES__ (10 s each).
# shellcheck disable=SC2154  # node, need: set by drain_decide.sh

acquire_slot "$node" __SLOTS__ __SLOT_TRIES__
drain_node "$node"
echo "$node drained for: ${need#, }" >&2
