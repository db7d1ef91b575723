#!/usr/bin/env bash
# Included by roce_host and roce_ready: shell functions over the NIC's sysfs entries. The PCI
# device directory is always visible; the netdev (net/) and the RDMA device (infiniband/) only in
# the network namespace that holds them. They read host, iface, pci, hca and driver, which the
# including step sets first. Filled in: nothing.
# shellcheck disable=SC2154  # host, iface, pci, hca, driver: set by the including step

# fail MESSAGE: exit 1 naming the host and the interface.
fail() {
  echo "$host: network.roce interface $iface: $*" >&2
  exit 1
}

# names DIR: the entries of DIR, space separated ('none' if it has none or does not exist).
names() {
  local out
  out=$(find "$1" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null || true)
  out=${out% }
  printf '%s\n' "${out:-none}"
}

# nic_ok: whether the NIC is what network.roce says; if not, `problem` says what was found.
nic_ok() {
  local dev=/sys/bus/pci/devices/$pci net=/sys/class/net/$iface have
  problem=
  if [ -e "$net" ]; then
    if [ ! -e "$net/device" ]; then
      problem="is not a PCI device's interface (network.roce.pciAddress is $pci)"
    elif have=$(basename "$(readlink -f "$net/device")") && [ "$have" != "$pci" ]; then
      problem="is PCI device $have, not $pci (network.roce.pciAddress)"
    fi
  elif [ ! -e "$dev" ]; then
    problem="not found, and there is no PCI device $pci (network.roce.pciAddress)"
  elif [ "$(names "$dev/net")" != none ]; then
    problem="not found; PCI device $pci has $(names "$dev/net") (network.roce.interface)"
  else
    problem="not in the host's network namespace, and PCI device $pci shows no interface: a training pod may hold it (host-device moves it in as net1); drain the node and run pulumi up again"
  fi
  if [ -n "$problem" ]; then
    return 1
  fi
  if [ ! -e "$dev/driver" ]; then
    problem="PCI device $pci has no driver bound (network.roce.driver is $driver)"
  elif have=$(basename "$(readlink -f "$dev/driver")") && [ "$have" != "$driver" ]; then
    problem="PCI device $pci is driven by $have, not $driver (network.roce.driver)"
  elif [ ! -d "$dev/infiniband/$hca" ]; then
    problem="PCI device $pci has no RDMA device $hca (network.roce.hca), it has: $(names "$dev/infiniband") (is its RDMA driver loaded? irdma for ice, mlx5_ib for mlx5_core)"
  elif [ "$(names "$dev/infiniband/$hca/ports")" = none ]; then
    problem="RDMA device $hca of PCI device $pci has no port"
  fi
  [ -z "$problem" ]
}

# netns_mode: the RDMA subsystem's network-namespace mode, shared or exclusive ('' if unknown).
netns_mode() {
  local out
  out=$(rdma system show 2>/dev/null || true)
  sed -n 's/^netns \([a-z]*\).*/\1/p' <<<"$out" | head -n 1
}
