#!/usr/bin/env bash
# The scheduled etcd defragmentation, installed on every control plane as
# /usr/local/sbin/gpu-cluster-etcd-defrag and run by /etc/cron.d/gpu-cluster-etcd-defrag at the same
# time everywhere. Defragmenting blocks a member's reads and writes while it rewrites its database,
# so the cluster is defragmented one member at a time, by one host only, and never while a member
# is down (one member busy and one down can leave a three-member cluster without a quorum):
#   1. `etcdctl endpoint health --cluster`: any member unhealthy or unreachable -> refused, exit 1,
#      nothing defragmented;
#   2. only the member whose name sorts first acts (every member is healthy here, so every host
#      agrees which one that is, with no lock to leave behind); the others log that and exit 0;
#   3. each member in turn, the leader last (its pause would otherwise start an election early),
#      the cluster's health checked again before each; a member unhealthy then stops the run, exit 1.
# Each run ends by writing node-exporter textfile metrics (etcd_defrag_last_run_*: when, and whether
# it succeeded; refused is 0, "not this member's turn" is 1): EtcdDefragFailed alerts on a 0.
# The ETCD_* variables point a rehearsal (and the tests) at other paths; cron sets none of them.
# Filled in: __NODE__, __TEXTFILE_DIR__, and etcd_tool's values.

set -euo pipefail
umask 077
node=__NODE__
manifest=${ETCD_MANIFEST:-/etc/kubernetes/manifests/etcd.yaml}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
# One member's defragmentation's deadline (etcd rewrites the whole file: a few seconds per GiB), and
# every other call's: etcdctl otherwise retries a member that does not answer until its deadline.
defrag_timeout=${ETCD_DEFRAG_TIMEOUT:-10m}
timeout=30s
textfile_dir=${ETCD_TEXTFILE_DIR:-__TEXTFILE_DIR__}

# @include etcd/etcd_tool.sh

# write_metrics STATUS: the textfile collector's file, replaced in one rename.
write_metrics() {
  local ok=0 tmp
  if [ "$1" -eq 0 ]; then
    ok=1
  fi
  install -d -m 0755 "$textfile_dir"
  tmp=$(mktemp "$textfile_dir/.etcd_defrag.prom.XXXXXX")
  cat >"$tmp" <<METRICS
# HELP etcd_defrag_last_run_timestamp_seconds When the last scheduled etcd defragmentation run on this member ended.
# TYPE etcd_defrag_last_run_timestamp_seconds gauge
etcd_defrag_last_run_timestamp_seconds{etcd_member="$node"} $(date +%s)
# HELP etcd_defrag_last_run_success 1 if the last run succeeded (or left the work to the first member), 0 if it refused or failed.
# TYPE etcd_defrag_last_run_success gauge
etcd_defrag_last_run_success{etcd_member="$node"} $ok
METRICS
  chmod 0644 "$tmp"
  mv -f "$tmp" "$textfile_dir/etcd_defrag.prom"
}

trap 'write_metrics $?' EXIT
version=$(etcd_version "$manifest")

# ctl ENDPOINTS ARG...: etcdctl of the member's version against ENDPOINTS, with the member's
# certificates, within $timeout.
ctl() {
  local endpoints=$1
  shift
  etcd_tool "$version" "$pki:ro" -- etcdctl --endpoints="$endpoints" --cacert="$pki/ca.crt" \
    --cert="$pki/server.crt" --key="$pki/server.key" --dial-timeout=5s --command-timeout="$timeout" "$@"
}

# healthy_or_exit WHEN: the whole cluster's health, or exit 1 saying why.
healthy_or_exit() {
  local report
  if ! report=$(ctl "$endpoint" endpoint health --cluster 2>&1); then
    printf '%s\n' "$report" >&2
    echo "etcd defragmentation refused $1: a member is unhealthy or unreachable (above); nothing more is defragmented" >&2
    exit 1
  fi
}

# field NAME: the values of "NAME" : VALUE lines of etcdctl's -w fields output on stdin, quotes removed.
field() {
  sed -n "s/^\"$1\" : \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p"
}

healthy_or_exit "before it started"
listing=$(ctl "$endpoint" member list -w fields)
# A member added but never started has no name and no client URL: the health check cannot see it,
# yet it counts toward the quorum.
if [ "$(field ID <<<"$listing" | wc -l)" -ne "$(field Name <<<"$listing" | grep -c .)" ]; then
  echo "etcd defragmentation refused before it started: a member has never started (no name in member list); nothing is defragmented" >&2
  exit 1
fi
first=$(field Name <<<"$listing" | LC_ALL=C sort | head -n 1)
if [ "$first" != "$node" ]; then
  echo "etcd defragmentation: every member is healthy; $first defragments the cluster, not $node"
  exit 0
fi
status=$(ctl "$endpoint" endpoint status --cluster -w fields)
leader=$(field Leader <<<"$status" | head -n 1)
# One line per member: "<member id> <client URL>", in etcdctl's order (the Endpoint line ends a block).
mapfile -t members < <(awk -F' : ' '$1 == "\"MemberID\"" {id = $2} $1 == "\"Endpoint\"" {gsub(/"/, "", $2); print id, $2}' <<<"$status")
order=()
for m in "${members[@]}"; do
  [ "${m%% *}" = "$leader" ] || order+=("${m#* }")
done
for m in "${members[@]}"; do
  [ "${m%% *}" != "$leader" ] || order+=("${m#* }")
done
if [ "${#order[@]}" -eq 0 ]; then
  echo "etcd defragmentation: endpoint status named no member" >&2
  exit 1
fi
for target in "${order[@]}"; do
  healthy_or_exit "before $target"
  timeout=$defrag_timeout ctl "$target" defrag
done
echo "etcd defragmentation: ${#order[@]} members defragmented, the leader last"
