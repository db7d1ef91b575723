#!/usr/bin/env bash
# On a joined node, drained (its join step, updated): `kubeadm upgrade node`, kubelet and kubectl;
# then, on a worker whose driver node prep installs, node_driver_upgrade.sh. stdout is the ready
# step's stdin: only the reboot line goes there.
# Filled in: __NODE__, __VERSION__ (kubernetesVersion), __REVISION__ (the package revision).

node=__NODE__
want=__VERSION__
have=$(installed kubelet)
if [ -z "$have" ]; then
  echo "$node: kubelet is not installed" >&2
  exit 1
fi
refuse_skew "$have" "$want" "$node's kubelet"
# stdout is the ready step's stdin: only the reboot line goes there.
if [ "$have" != "$want-__REVISION__" ] || [ "$(installed kubectl)" != "$want-__REVISION__" ]; then
  apt_pin kubeadm=$want-__REVISION__ >&2
  log=/var/log/gpu-cluster/kubeadm-upgrade.log
  install -d -m 0700 /var/log/gpu-cluster
  if ! kubeadm upgrade node >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  apt_pin kubelet=$want-__REVISION__ kubectl=$want-__REVISION__ >&2
  systemctl daemon-reload
  systemctl restart kubelet
  echo "$node: kubelet v$want" >&2
fi
