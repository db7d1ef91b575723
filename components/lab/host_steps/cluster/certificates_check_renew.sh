#!/usr/bin/env bash
# On one control plane (every control plane has this step; the `up` runs them one after another,
# components/lab/certificates.py): the earliest expiry of kubeadm's certificates; when it is less than
# __WITHIN_DAYS__ days away, `kubeadm certs renew all` and a restart of this host's static pods, kube-vip's
# too (kubeadm's documented procedure: the components do not all reload certificates), then a wait
# until this host's API server is ready and its etcd member healthy. Refuses to restart while another
# control plane's etcd member is unhealthy: taking this one down too could cost etcd its quorum.
# Prints one JSON line: expires (RFC 3339, UTC), certificate (which one expires first), caExpires, renewed.
# Filled in: __PERIOD__ (only changes the text, so `pulumi up` runs it again each period),
# __WITHIN_DAYS__, __LEAF_CERTS__ and __KUBECONFIGS__ (scripts.KUBEADM_LEAF_CERTS, KUBEADM_KUBECONFIGS),
# __STATIC_PODS__ (scripts.CONTROL_PLANE_STATIC_PODS), __RESYNC_SECONDS__ (scripts.STATIC_POD_RESYNC_SECONDS),
# __API_READY_TRIES__ (5 s each), __NODE__ and __ADDRESS__ (this control plane), __CONTROL_PLANES__
# ("name=address" of every control plane), __API_PORT__, __ETCD_METRICS_PORT__ (kubeadm.ETCD_METRICS_URL),
# __EXPIRY_SCRIPT__ (certificates.EXPIRY_SCRIPT, the expiry metric's script).
# shellcheck disable=SC2043  # each loop's list is a placeholder filled with several words

# check period __PERIOD__
k8s=/etc/kubernetes
self=__NODE__
# not_after FILE: when the (first) certificate in FILE expires, in seconds since the epoch
not_after() {
  date -d "$(openssl x509 -noout -enddate -in "$1" | cut -d= -f2)" +%s
}
# earliest: "<epoch> <name>" of the certificate that expires first
earliest() {
  local min="" first="" f t pem
  pem=$(mktemp)
  for f in __LEAF_CERTS__; do
    [ -f "$k8s/pki/$f" ] || continue
    t=$(not_after "$k8s/pki/$f")
    if [ -z "$min" ] || [ "$t" -lt "$min" ]; then min=$t first=$f; fi
  done
  for f in __KUBECONFIGS__; do
    [ -f "$k8s/$f" ] || continue
    sed -n 's/^ *client-certificate-data: *//p' "$k8s/$f" | head -n 1 | base64 -d >"$pem"
    [ -s "$pem" ] || continue
    t=$(not_after "$pem")
    if [ -z "$min" ] || [ "$t" -lt "$min" ]; then min=$t first=$f; fi
  done
  rm -f "$pem"
  echo "$min $first"
}
# etcd_healthy ADDRESS: the member's own /health on its metrics port (a leader, no alarm).
etcd_healthy() {
  curl -fsS --max-time 5 "http://$1:__ETCD_METRICS_PORT__/health" 2>/dev/null | grep -q '"health": *"true"'
}
# other_members_healthy: every other control plane the cluster has as a Node, by its member's
# health on the node address. Without a working admin.conf (certificates already lapsed) there
# is no list: the renewal is what brings the API back.
other_members_healthy() {
  local line name address pair planes=(__CONTROL_PLANES__)
  while IFS= read -r line; do
    name=${line%%=*}
    if [ -z "$name" ] || [ "$name" = "$self" ]; then continue; fi
    address=
    for pair in "${planes[@]}"; do
      if [ "${pair%%=*}" = "$name" ]; then address=${pair#*=}; fi
    done
    if [ -z "$address" ]; then continue; fi  # not one of this program's control planes
    if ! etcd_healthy "$address"; then
      echo "the etcd member on $name ($address:__ETCD_METRICS_PORT__/health) is not healthy: not restarting $self's" \
        "as well, which could cost etcd its quorum; renew when it is back (docs/operations/certificates.md)" >&2
      return 1
    fi
  done < <(kubectl --kubeconfig "$k8s/admin.conf" get nodes -l node-role.kubernetes.io/control-plane \
             -o jsonpath='{range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}{"\n"}{end}' 2>/dev/null)
}
read -r expires first <<<"$(earliest)"
if [ -z "$expires" ]; then
  echo "no kubeadm certificate under $k8s: is this the control plane?" >&2
  exit 1
fi
renewed=false
if [ "$expires" -lt "$(( $(date +%s) + __WITHIN_DAYS__ * 86400 ))" ]; then
  other_members_healthy || exit 1
  kubeadm certs renew all >/dev/null
  # Restart the static pods so every component serves and presents the new certificates:
  # move their manifests away until the kubelet stopped them, then back.
  held=$(mktemp -d)
  trap 'mv -f "$held"/*.yaml "$k8s/manifests/" 2>/dev/null || true' EXIT
  for pod in __STATIC_PODS__; do
    if [ -f "$k8s/manifests/$pod.yaml" ]; then mv "$k8s/manifests/$pod.yaml" "$held/"; fi
  done
  sleep __RESYNC_SECONDS__
  mv -f "$held"/*.yaml "$k8s/manifests/" 2>/dev/null || true
  # This host's own API server (its address, not the endpoint, which another host may answer)
  # and etcd member, before the next control plane's step may restart its own.
  ready=
  for _ in $(seq 1 __API_READY_TRIES__); do
    if kubectl --kubeconfig "$k8s/admin.conf" --server=https://__ADDRESS__:__API_PORT__ get --raw=/readyz >/dev/null 2>&1 \
      && etcd_healthy 127.0.0.1; then
      ready=1
      break
    fi
    sleep 5
  done
  if [ -z "$ready" ]; then
    echo "$self's API server or etcd member did not come back healthy after the certificate renewal" >&2
    exit 1
  fi
  renewed=true
  read -r expires first <<<"$(earliest)"
  # The expiry metric (certificate_expiry.sh), now rather than at its next scheduled run.
  if [ -x __EXPIRY_SCRIPT__ ]; then __EXPIRY_SCRIPT__ || true; fi
fi
ca=$(not_after "$k8s/pki/ca.crt")
printf '{"expires": "%s", "certificate": "%s", "caExpires": "%s", "renewed": %s}\n' \
  "$(date -u -d "@$expires" +%Y-%m-%dT%H:%M:%SZ)" "$first" "$(date -u -d "@$ca" +%Y-%m-%dT%H:%M:%SZ)" "$renewed"
