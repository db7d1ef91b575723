#!/usr/bin/env bash
# nfs_server's delete: stop exporting; remove nfs-kernel-server only if this program installed it
# and nothing else is exported. The directory and its data (checkpoints, datasets) are kept.
# Filled in: __EXPORT_PATH__ (storage.exportPath, as printed).

rm -f /etc/exports.d/gpu-cluster.exports
if command -v exportfs >/dev/null 2>&1; then
  exportfs -ra
fi
if [ -f "$STATE_DIR/nfs-server.installed-by-gpu-cluster" ]; then
  others=$(cat /etc/exports /etc/exports.d/*.exports 2>/dev/null | grep -Ev '^[[:space:]]*(#|$)' || true)
  if [ -z "$others" ]; then
    systemctl disable --now nfs-server >/dev/null 2>&1 || true
    apt_get purge -y -q nfs-kernel-server
  fi
  rm -f "$STATE_DIR/nfs-server.installed-by-gpu-cluster"
fi
echo "kept __EXPORT_PATH__ and its data"
