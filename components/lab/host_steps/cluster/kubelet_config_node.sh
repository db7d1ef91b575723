#!/usr/bin/env bash
# On one node, after kubelet_config_merge.sh: write the kubelet's configuration from the cluster's
# kubelet-config ConfigMap (`kubeadm upgrade node phase kubelet-config`, kubeadm's "Reconfiguring a
# kubeadm cluster"), and only if the file changed restart the kubelet, one node at a time (it holds
# upgrade slot 0 meanwhile: the slots of lib/upgrade_helpers.sh, so also never beside a node that
# upgrades), and wait until it is healthy and its Node Ready (bounded). Before anything: the kernel
# settings protectKernelDefaults makes the kubelet check (it refuses to start when one differs),
# which node prep set (/etc/sysctl.d/99-gpu-cluster-k8s.conf). A kubelet that does not come back
# gets its old file again, and the step fails. Credentials: admin.conf on a control plane that has
# it, else the node upgrader's token on stdin (as the node's upgrade steps).
# Filled in: __NODE__, __TUNABLES__ ('name=value' words), __SLOT_TRIES__, __TRIES__, __INTERVAL__.

config=/var/lib/kubelet/config.yaml
if [ ! -f /etc/kubernetes/kubelet.conf ]; then
  echo "__NODE__ has not joined: no /etc/kubernetes/kubelet.conf" >&2
  exit 1
fi
tunables=(__TUNABLES__)
wrong=()
for tunable in "${tunables[@]}"; do
  name=${tunable%%=*}
  have=$(sysctl -n "$name" 2>/dev/null || true)
  if [ "$have" != "${tunable#*=}" ]; then
    wrong+=("$name is '$have', not ${tunable#*=}")
  fi
done
if [ ${#wrong[@]} -gt 0 ]; then
  printf '%s\n' "kernel settings the kubelet checks (protectKernelDefaults) differ on __NODE__; it would not start:" "${wrong[@]}" \
    "node prep writes them to /etc/sysctl.d/99-gpu-cluster-k8s.conf: a file read after it sets another value (sysctl --system shows the order)" >&2
  exit 1
fi
before=$(mktemp)
wanted=$(mktemp)
trap 'rm -f "$before" "$wanted"' EXIT
cp "$config" "$before" 2>/dev/null || : >"$before"
kubeadm upgrade node phase kubelet-config
if cmp -s "$before" "$config"; then
  echo "__NODE__: kubelet configuration unchanged"
  exit 0
fi
# The old file stays in place until this node holds the slot: a step that stops before the restart
# (no slot, no credential) must leave a file that differs, or the next run would find it "unchanged"
# while the kubelet still runs the old configuration.
cp "$config" "$wanted"
cp "$before" "$config"
if [ ! -f /etc/kubernetes/admin.conf ]; then
  use_upgrader_credential
  # Its EXIT trap (the kubeconfig holding the token) replaced this script's: remove all three.
  trap 'rm -f "$before" "$wanted"; rm -rf "${KUBE_CREDENTIAL%/*}"' EXIT
fi
acquire_slot __NODE__ 1 __SLOT_TRIES__
cp "$wanted" "$config"
systemctl restart kubelet
up=
for _ in $(seq 1 __TRIES__); do
  sleep __INTERVAL__
  if systemctl is-active --quiet kubelet && curl -fsS --max-time 5 http://127.0.0.1:10248/healthz >/dev/null 2>&1; then
    up=1
    break
  fi
done
if [ -z "$up" ] || ! kubectl --kubeconfig /etc/kubernetes/kubelet.conf wait --for=condition=Ready "node/__NODE__" --timeout=5m; then
  echo "__NODE__: the kubelet did not come back with the cluster's configuration; its old file is back (journalctl -u kubelet says why)" >&2
  cp "$before" "$config"
  systemctl restart kubelet
  release_slots __NODE__
  exit 1
fi
release_slots __NODE__
echo "__NODE__: kubelet restarted with the cluster's configuration, Node Ready"
