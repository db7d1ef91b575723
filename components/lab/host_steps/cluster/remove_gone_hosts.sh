#!/usr/bin/env bash
# On a healthy control plane: forget the hosts marked `hosts[].gone` (dead, never coming back),
# without ever connecting to them. Each gone control plane's etcd member is removed by name, one at
# a time (etcd's runtime reconfiguration guide), through etcdctl of the member's own version run by
# containerd (etcd_tool: works whatever the API server does); etcd itself refuses a removal the
# started members left could not commit (--strict-reconfig-check), and the step then fails saying
# so. Then each gone host's Node is deleted, not drained: its pods cannot be evicted from a dead
# kubelet, and the pod garbage collector deletes them once their Node is gone.
# A rerun finds the members removed and the Nodes deleted and changes nothing.
# The ETCD_* variables point a rehearsal (and the tests) at other paths; the step sets none.
# Filled in: __GONE_MEMBERS__ (the gone control planes' node names, which kubeadm gives their
# members), __GONE_NODES__ (every gone host's node name), and etcd_tool's values.

manifest=${ETCD_MANIFEST:-/etc/kubernetes/manifests/etcd.yaml}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
gone_members=(__GONE_MEMBERS__)
gone_nodes=(__GONE_NODES__)

# @include etcd/etcd_tool.sh

version=$(etcd_version "$manifest")
ctl() {
  etcd_tool "$version" "$pki:ro" -- etcdctl --endpoints="$endpoint" --cacert="$pki/ca.crt" \
    --cert="$pki/server.crt" --key="$pki/server.key" --dial-timeout=5s --command-timeout="${ETCD_COMMAND_TIMEOUT:-30s}" "$@"
}
no_quorum="with more members down than its quorum allows, restore from a snapshot instead (docs/operations/etcd-backup.md)"

for name in "${gone_members[@]}"; do
  # member list: "ID, STATUS, NAME, PEER ADDRS, CLIENT ADDRS, IS LEARNER"
  if ! list=$(ctl member list 2>&1); then
    printf '%s\n' "$list" >&2
    echo "cannot list etcd's members to remove gone host $name: etcd did not answer (above); $no_quorum" >&2
    exit 1
  fi
  id=$(awk -F', ' -v n="$name" '$3 == n {print $1}' <<<"$list")
  if [ -z "$id" ]; then
    echo "etcd member $name: not in the cluster (already removed)"
    continue
  fi
  # etcd refuses ("unhealthy cluster") while a member it would keep has been connected for less
  # than its 5 s health interval, as just after the previous removal: try again, bounded.
  for try in $(seq "${ETCD_REMOVE_TRIES:-12}"); do
    if report=$(ctl member remove "$id" 2>&1); then
      break
    fi
    if [ "$try" -eq "${ETCD_REMOVE_TRIES:-12}" ]; then
      printf '%s\n' "$report" >&2
      echo "cannot remove the etcd member of gone host $name ($id): etcd refused (above); $no_quorum" >&2
      exit 1
    fi
    sleep 5
  done
  echo "removed the etcd member of gone host $name ($id)"
done
for node in "${gone_nodes[@]}"; do
  kubectl --kubeconfig "${GONE_KUBECONFIG:-/etc/kubernetes/admin.conf}" delete node "$node" --ignore-not-found --wait=false
done
