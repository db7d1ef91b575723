#!/usr/bin/env bash
# The scheduled etcd defragmentation on one control plane (create and update): the defrag script and
# its cron file written only when they differ. Nothing is defragmented here: the first run is the
# schedule's (the script refuses while a member is down, as one may be during an `up`).
# Filled in: __DEFRAG_SCRIPT__ (defrag.sh, filled) and __CRON_FILE__ (placed as they are, in quoted
# here-documents).

if ! command -v cron >/dev/null 2>&1; then
  echo "no cron daemon on this host (Ubuntu's server images have it): apt-get install cron" >&2
  exit 1
fi
put_file /usr/local/sbin/gpu-cluster-etcd-defrag 0700 >&2 <<'GPU_CLUSTER_ETCD_DEFRAG' || true
__DEFRAG_SCRIPT__
GPU_CLUSTER_ETCD_DEFRAG
put_file /etc/cron.d/gpu-cluster-etcd-defrag 0644 >&2 <<'GPU_CLUSTER_ETCD_DEFRAG_CRON' || true
__CRON_FILE__
GPU_CLUSTER_ETCD_DEFRAG_CRON
echo "etcd defragmentation scheduled"
