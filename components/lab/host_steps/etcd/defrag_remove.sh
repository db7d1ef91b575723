#!/usr/bin/env bash
# The scheduled etcd defragmentation off on one control plane (delete): its cron file, script and
# metrics file removed.
# Filled in: __TEXTFILE_DIR__.

rm -f /etc/cron.d/gpu-cluster-etcd-defrag /usr/local/sbin/gpu-cluster-etcd-defrag __TEXTFILE_DIR__/etcd_defrag.prom
echo "etcd defragmentation unscheduled"
