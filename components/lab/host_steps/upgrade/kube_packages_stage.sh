#!/usr/bin/env bash
# kube-packages' update: the minor's apt repository and kubeadm of the new version; kubelet and
# kubectl stay where they are until the node itself is upgraded (after the control plane, drained).
# Filled in: __VERSION__ (kubernetesVersion), __MINOR__, __REVISION__ (the package revision).

want=__VERSION__
have=$(installed kubelet)
if [ -n "$have" ]; then
  refuse_skew "$have" "$want" "this host's kubelet"
fi
# @include lib/kube_repo.sh
if [ -z "$have" ]; then
  # Not installed (removed by hand): install all three, as the create step does.
  apt_pin kubelet=$want-__REVISION__ kubeadm=$want-__REVISION__ kubectl=$want-__REVISION__
  systemctl enable kubelet >/dev/null 2>&1 || true
else
  apt_pin kubeadm=$want-__REVISION__
  echo "kubeadm $want staged; kubelet $have stays until this node's upgrade"
fi
