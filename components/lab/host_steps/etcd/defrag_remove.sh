#!/usr/bin/env bash
# The scheduled etcd defragmentation off on one control plane (delete): its cron file and script removed.
# Filled in: nothing.

rm -f /etc/cron.d/gpu-cluster-etcd-defrag /usr/local/sbin/gpu-cluster-etcd-defrag
echo "etcd defragmentation unscheduled"
