#!/usr/bin/env bash
# Node prep undone (kernel_prep's delete): the module and sysctl files removed, swap lines that
# kernel_prep marked in fstab restored and swap turned on again. Filled in: nothing.

rm -f /etc/modules-load.d/gpu-cluster-k8s.conf /etc/sysctl.d/99-gpu-cluster-k8s.conf
sysctl --system >/dev/null
if grep -q '^#gpu-cluster# ' /etc/fstab; then
  fstab=$(sed 's/^#gpu-cluster# //' /etc/fstab)
  put_file /etc/fstab 0644 <<<"$fstab" || true
  swapon -a || true
fi
