#!/usr/bin/env bash
# etcd backups off on one control plane (delete): the cron file, the snapshot and restore scripts
# and the metrics file removed. The snapshots themselves are kept.
# Filled in: __TEXTFILE_DIR__.

rm -f /etc/cron.d/gpu-cluster-etcd-backup /usr/local/sbin/gpu-cluster-etcd-snapshot \
  /usr/local/sbin/gpu-cluster-etcd-restore __TEXTFILE_DIR__/etcd_backup.prom
echo "etcd backups stopped; the snapshots are kept"
