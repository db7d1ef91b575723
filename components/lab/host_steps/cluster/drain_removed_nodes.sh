#!/usr/bin/env bash
# On the control plane, before any host joins or is reset: drain and delete from the cluster every
# node this program joined that is no longer in the member list, or whose address changed, then
# remember the list. One SSH session whatever the number of hosts; removed nodes drain in parallel.
# Filled in: __MEMBERS__ ('name address' words, sorted), __MEMBERS_FILE__ (scripts.MEMBERS_FILE).
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
for node in "${removed[@]}"; do
  echo "draining $node: it left the config or changed address"
  drain_node "$node" &
done
wait
put_file "$members" 0644 <<<"$(printf '%s\n' "${want[@]}")" || true
