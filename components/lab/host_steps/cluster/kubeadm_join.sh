#!/usr/bin/env bash
# A host's join step. stdin: the complete JoinConfiguration (kubeadm.join_config): endpoint,
# bootstrap token, CA hash and, for a control plane, the certificate key (and a line with the node
# upgrader's token, dropped here). It is checked before kubeadm reads it, so a missing token or CA
# pin fails here, without the token reaching a log. Filled in: nothing.

install -d -m 0700 /etc/gpu-cluster /var/log/gpu-cluster
# The node upgrader's token line is for the step's update (node_self_upgrade), not kubeadm.
config_text=$(grep -v '^upgrader-token: ' || true)
if [ -f /etc/kubernetes/kubelet.conf ]; then
  echo "node already joined"
  exit 0
fi
# Never join without a bootstrap token and a pinned CA (kubeadm would refuse the unpinned
# file anyway; this says why without echoing it).
if ! grep -Eq '^ +token: [a-z0-9]{6}\.[a-z0-9]{16}$' <<<"$config_text" \
   || ! grep -Eq '^ *- sha256:[0-9a-f]{64}$' <<<"$config_text"; then
  echo "no join token or CA hash on stdin" >&2
  exit 1
fi
if grep -q '^controlPlane:' <<<"$config_text" \
   && ! grep -Eq '^ +certificateKey: [0-9a-f]{64}$' <<<"$config_text"; then
  echo "no certificate key on stdin for a control-plane join" >&2
  exit 1
fi
umask 077
config=/etc/gpu-cluster/kubeadm-join.yaml
printf '%s\n' "$config_text" >"$config"
status=0
kubeadm join --config "$config" >/var/log/gpu-cluster/kubeadm-join.log 2>&1 || status=$?
rm -f "$config"  # it holds the token
if [ "$status" -ne 0 ]; then
  tail -n 30 /var/log/gpu-cluster/kubeadm-join.log | grep -v -i token >&2 || true
  exit "$status"
fi
echo "node joined"
