#!/usr/bin/env bash
# A worker's nvidia-driver step, updated: nothing yet. The new branch is installed once the node has
# drained itself, by its join step's update (node_self_upgrade), and it reboots there.
# Filled in: __NODE__, __SPEC__ (nvidia-driver-<branch>-server[=<version>]).

echo "__NODE__: __SPEC__ is installed when the node is drained for it (__NODE__-join), then it reboots"
