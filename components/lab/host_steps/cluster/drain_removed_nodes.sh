#!/usr/bin/env bash
# On the control plane, before any host joins or is reset: drain and delete from the cluster every
# node this program joined that is no longer in the member list, or whose address changed, then
# remember the list. One SSH session whatever the number of hosts; removed nodes drain in parallel.
# A removed control plane's etcd member is removed here too, from this surviving member, one at a
# time (etcd's runtime reconfiguration guide: one membership change at a time), before the host's
# own `kubeadm reset` (which finds it gone) or for a host that is gone: etcd otherwise keeps counting
# it towards the quorum. etcd itself refuses a removal that would leave too few started members
# (--strict-reconfig-check, on by default).
# The list is on the entry point (the first control plane not gone), which may be new: the control
# planes the last `up` deployed that this one does not (stacks/lab.py, from the stack output
# `deployed`) are named too, in `former`, and removed the same way.
# Filled in: __MEMBERS__ ('name address' words, sorted), __MEMBERS_FILE__ (scripts.MEMBERS_FILE),
# __SELF__ (this control plane's node name: its etcd pod is etcd-<name>), __FORMER__ (node names).
# render/drain_guards.py reads the `want=(...)` and `members=` lines of the rendered script.

want=(__MEMBERS__)
members=__MEMBERS_FILE__
drain_node() {
  local node=$1
  if kubectl --kubeconfig /etc/kubernetes/admin.conf get node "$node" >/dev/null 2>&1; then
    kubectl --kubeconfig /etc/kubernetes/admin.conf drain "$node" --ignore-daemonsets --delete-emptydir-data --force --timeout=5m || true
    kubectl --kubeconfig /etc/kubernetes/admin.conf delete node "$node" --ignore-not-found
  fi
}
etcd_local() {
  kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system exec "etcd-$self" -- etcdctl \
    --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt \
    --cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key "$@"
}
# remove_etcd_member NODE: its member (kubeadm names members after their node), if it has one.
remove_etcd_member() {
  local node=$1 list id
  list=$(etcd_local member list)
  id=$(awk -F', ' -v n="$node" '$3 == n {print $1}' <<<"$list")
  if [ -n "$id" ]; then
    echo "removing $node's etcd member $id"
    # etcd refuses ("unhealthy cluster") while a member it would keep has been connected for less
    # than its 5 s health interval, as just after the previous removal: try again, bounded.
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do
      if etcd_local member remove "$id" >/dev/null; then
        return 0
      fi
      sleep 5
    done
    echo "etcd refused to remove $node's member $id for a minute: a member it would keep is down (etcdMembersDown); mark a dead host hosts[].gone (docs/runbook.md#a-control-plane-died)" >&2
    exit 1
  fi
}
self=__SELF__
removed=()
if [ -f "$members" ]; then
  while IFS= read -r member; do
    [ -n "$member" ] || continue
    keep=
    for w in "${want[@]}"; do
      if [ "$w" = "$member" ]; then
        keep=1
        break
      fi
    done
    if [ -z "$keep" ]; then
      removed+=("${member%% *}")
    fi
  done <"$members"
fi
former=(__FORMER__)
for node in "${former[@]}"; do
  case " ${removed[*]} " in
    *" $node "*) ;;
    *) removed+=("$node") ;;
  esac
done
for node in "${removed[@]}"; do
  echo "draining $node: it left the config or changed address"
  drain_node "$node" &
done
wait
for node in "${removed[@]}"; do
  remove_etcd_member "$node"
done
put_file "$members" 0644 <<<"$(printf '%s\n' "${want[@]}")" || true
