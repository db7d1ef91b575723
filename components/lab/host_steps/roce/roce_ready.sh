#!/usr/bin/env bash
# After roce_host, over a connection that survives its reboot: the RDMA subsystem is in exclusive
# mode and the NIC and its RDMA device are back (the driver loads during boot).
# Filled in: __HOST__, __IFACE__, __PCI__, __HCA__, __DRIVER__ (the host and network.roce),
# __TRIES__ (scripts.ROCE_READY_TRIES, 5 s each), __ROCE_MODPROBE__ (scripts.ROCE_MODPROBE).
# shellcheck disable=SC2034  # pci, driver: read by nic_ok (lib/roce_nic.sh)

host=__HOST__
iface=__IFACE__
pci=__PCI__
hca=__HCA__
driver=__DRIVER__
# @include lib/roce_nic.sh
mode=
problem=
for _ in $(seq 1 __TRIES__); do
  mode=$(netns_mode)
  if [ "$mode" = exclusive ] && nic_ok; then
    break
  fi
  sleep 5
done
rm -f "$STATE_DIR/reboot-requested"
if [ "$mode" != exclusive ]; then
  echo "$host: rdma system show says netns ${mode:-unknown}, not exclusive; is __ROCE_MODPROBE__ overridden by another options line for ib_core?" >&2
  exit 1
fi
nic_ok || fail "$problem"
echo "$host: RDMA subsystem exclusive; $iface and $hca ready"
