#!/usr/bin/env bash
# roce_host undone: the modprobe option removed, the RDMA subsystem back in shared mode (now if the
# kernel allows, else from the next boot on: the host is not rebooted), the holds released and the
# packages that roce_host installed purged (ones the host had before stay).
# Filled in: __ROCE_MODPROBE__ (scripts.ROCE_MODPROBE), __PACKAGE_NAMES__ (the RDMA userspace,
# in reverse order).
# shellcheck disable=SC2043  # the loop's list is a placeholder filled with several words

if [ -f __ROCE_MODPROBE__ ]; then
  rm -f __ROCE_MODPROBE__
  update-initramfs -u
fi
out=$(rdma system show 2>/dev/null || true)
if grep -q '^netns exclusive' <<<"$out"; then
  if rdma system set netns shared >/dev/null 2>&1; then
    echo "RDMA subsystem back in shared mode"
  else
    echo "RDMA subsystem stays in exclusive mode until the next boot (the kernel refuses to switch while other network namespaces exist)"
  fi
fi
for pkg in __PACKAGE_NAMES__; do
  if grep -qx "$pkg" "$STATE_DIR/rdma-packages.installed-by-gpu-cluster" 2>/dev/null; then
    apt_unpin_purge "$pkg"
  elif apt-mark showhold | grep -qx "$pkg"; then
    apt-mark unhold "$pkg" >/dev/null
  fi
done
rm -f "$STATE_DIR/rdma-packages.installed-by-gpu-cluster"
