#!/usr/bin/env bash
# etcd backups on one control plane (create and update; stdin: the restore script): the snapshot
# script, its cron file and the restore script (/usr/local/sbin/gpu-cluster-etcd-restore, there for
# a restore without this program at hand) written only when they differ, the backup and textfile
# directories made, then one snapshot taken at once so that a broken setup fails the step, not a
# night later. stdout: the newest snapshot as one JSON line {node, path, time, sizeBytes} (the
# stack output etcdBackup).
# Filled in: __SNAPSHOT_SCRIPT__ (snapshot.sh, filled) and __CRON_FILE__ (placed as they are, in
# quoted here-documents), __BACKUP_DIR__, __TEXTFILE_DIR__, __NODE__.

if ! command -v cron >/dev/null 2>&1; then
  echo "no cron daemon on this host (Ubuntu's server images have it): apt-get install cron" >&2
  exit 1
fi
install -d -m 0700 __BACKUP_DIR__
install -d -m 0755 __TEXTFILE_DIR__
put_file /usr/local/sbin/gpu-cluster-etcd-snapshot 0700 >&2 <<'GPU_CLUSTER_ETCD_SNAPSHOT' || true
__SNAPSHOT_SCRIPT__
GPU_CLUSTER_ETCD_SNAPSHOT
put_file /etc/cron.d/gpu-cluster-etcd-backup 0644 >&2 <<'GPU_CLUSTER_ETCD_CRON' || true
__CRON_FILE__
GPU_CLUSTER_ETCD_CRON
put_file /usr/local/sbin/gpu-cluster-etcd-restore 0700 >&2 || true
/usr/local/sbin/gpu-cluster-etcd-snapshot >&2
newest=$(find __BACKUP_DIR__ -maxdepth 1 -type f -name 'etcd-'__NODE__'-*.db' -printf '%f\n' | sort | tail -n 1)
path=__BACKUP_DIR__/$newest
printf '{"node": "%s", "path": "%s", "time": "%s", "sizeBytes": %s}\n' __NODE__ "$path" \
  "$(date -u -d "@$(stat -c %Y "$path")" +%Y-%m-%dT%H:%M:%SZ)" "$(stat -c %s "$path")"
