#!/usr/bin/env bash
# Node prep, GPU hosts with network.roce: the NIC checked against network.roce, the host-device CNI
# plugin found, the RDMA userspace pinned, and the RDMA subsystem in exclusive network-namespace
# mode (the rdma CNI can move a device only then): now if the kernel allows, else at a reboot, as
# the driver step reboots (roce_ready waits for it). A host that has joined a cluster is never
# rebooted here: it may run pods; the step fails saying how to reboot it drained.
# Filled in: __HOST__, __IFACE__, __PCI__, __HCA__, __DRIVER__ (the host and network.roce),
# __HOST_DEVICE_CNI__ (scripts.HOST_DEVICE_CNI), __PACKAGE_NAMES__ and __PACKAGES__ (the RDMA
# userspace, versions.ROCE_HOST_PACKAGES, as names and PKG=VERSION words),
# __ROCE_MODPROBE__ (scripts.ROCE_MODPROBE).
# shellcheck disable=SC2154  # problem: set by nic_ok (lib/roce_nic.sh)
# shellcheck disable=SC2043  # the loop's list is a placeholder filled with several words

host=__HOST__
iface=__IFACE__
pci=__PCI__
hca=__HCA__
driver=__DRIVER__
# @include lib/roce_nic.sh
nic_ok || fail "$problem"
echo "$host: $iface is PCI device $pci ($driver) with RDMA device $hca"
# Multus hands the pods' network to host-device: kubernetes-cni, which the kubelet package
# depends on, puts it in /opt/cni/bin.
cni=__HOST_DEVICE_CNI__
if [ ! -x "$cni" ]; then
  echo "$host: $cni is missing; it comes with the kubernetes-cni package, which the kubelet package (kube-packages step) depends on" >&2
  exit 1
fi
owner=$(dpkg -S "$cni" 2>/dev/null || true)
owner=${owner%%:*}
if [ -n "$owner" ]; then
  echo "$host: $cni from $owner $(dpkg-query -W -f='${Version}' "$owner" 2>/dev/null || true)"
else
  echo "$host: $cni is not from a package"
fi
# Packages absent before the first run are noted: the delete purges only those.
new=()
for pkg in __PACKAGE_NAMES__; do
  if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != "install ok installed" ]; then
    new+=("$pkg")
  fi
done
if [ "${#new[@]}" -gt 0 ]; then
  mine=$({ cat "$STATE_DIR/rdma-packages.installed-by-gpu-cluster" 2>/dev/null || true; printf '%s\n' "${new[@]}"; } | sort -u)
  put_file "$STATE_DIR/rdma-packages.installed-by-gpu-cluster" 0644 <<<"$mine" || true
fi
apt_pin __PACKAGES__
# ib_core reads netns_mode when it loads, possibly from the initramfs: 0 is exclusive.
if put_file __ROCE_MODPROBE__ 0644 <<'EOF'; then
# gpu-cluster (network.roce): RDMA devices in exclusive network-namespace mode, so that the
# rdma CNI can move one into a training pod's namespace
options ib_core netns_mode=0
EOF
  update-initramfs -u
fi
if [ "$(netns_mode)" = exclusive ]; then
  echo "$host: RDMA subsystem in exclusive mode"
  exit 0
fi
# The kernel refuses (EBUSY) while any network namespace besides the host's exists.
if err=$(rdma system set netns exclusive 2>&1); then
  echo "$host: RDMA subsystem switched to exclusive mode"
  exit 0
fi
if [ -f /etc/kubernetes/kubelet.conf ]; then
  echo "$host: the kernel refuses exclusive RDMA mode now (${err:-busy}) and this node has joined the cluster: drain it (kubectl drain $host --ignore-daemonsets --delete-emptydir-data), reboot it, uncordon it and run pulumi up again (__ROCE_MODPROBE__ sets the mode at boot)" >&2
  exit 1
fi
# Reboot as the driver step does: refuse new SSH sessions first, so the next step cannot
# connect before the reboot, then reboot in a few seconds (once per boot).
boot=$(cat /proc/sys/kernel/random/boot_id)
if [ "$(cat "$STATE_DIR/reboot-requested" 2>/dev/null || true)" != "$boot" ]; then
  printf '%s\n' "$boot" >"$STATE_DIR/reboot-requested"
  systemctl stop ssh.socket ssh.service 2>/dev/null || true
  systemd-run --on-active=5 --unit=gpu-cluster-reboot systemctl reboot
fi
echo "$host: rebooting for exclusive RDMA mode (the kernel refuses it now: ${err:-busy})"
