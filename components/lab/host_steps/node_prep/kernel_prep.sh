#!/usr/bin/env bash
# Node prep, every host: the kernel modules and sysctls Kubernetes networking needs, the kernel
# settings the kubelet checks with protectKernelDefaults, and swap off.
# Filled in: __KUBELET_SYSCTLS__ ("name = value" lines of kubeadm.KUBELET_KERNEL_TUNABLES).

# Kernel modules and sysctls Kubernetes networking needs, now and after every boot.
put_file /etc/modules-load.d/gpu-cluster-k8s.conf 0644 <<'EOF' || true
overlay
br_netfilter
EOF
modprobe overlay
modprobe br_netfilter
if put_file /etc/sysctl.d/99-gpu-cluster-k8s.conf 0644 <<'EOF'; then
net.bridge.bridge-nf-call-iptables  = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward                 = 1
# The kubelet refuses to start while one of these differs (protectKernelDefaults).
__KUBELET_SYSCTLS__
EOF
  sysctl --system >/dev/null
fi
# kubelet refuses to run with swap on: off now, and commented out (marked) in fstab.
swapoff -a
if grep -Eq '^[^#[:space:]][^#]*[[:space:]]swap[[:space:]]' /etc/fstab; then
  fstab=$(sed -E 's/^([^#[:space:]][^#]*[[:space:]]swap[[:space:]].*)$/#gpu-cluster# \1/' /etc/fstab)
  put_file /etc/fstab 0644 <<<"$fstab" || true
fi
