#!/usr/bin/env bash
# On the first control plane: the earliest expiry of kubeadm's certificates; when it is less than
# __WITHIN_DAYS__ days away, `kubeadm certs renew all` and a restart of the control plane's static
# pods (kubeadm's documented procedure: the components do not all reload certificates). Prints one
# JSON line: expires (RFC 3339, UTC), certificate (which one expires first), caExpires, renewed.
# Filled in: __PERIOD__ (only changes the text, so `pulumi up` runs it again each period),
# __WITHIN_DAYS__, __LEAF_CERTS__ and __KUBECONFIGS__ (scripts.KUBEADM_LEAF_CERTS, KUBEADM_KUBECONFIGS),
# __STATIC_PODS__ (scripts.CONTROL_PLANE_STATIC_PODS), __RESYNC_SECONDS__ (scripts.STATIC_POD_RESYNC_SECONDS),
# __API_READY_TRIES__ (5 s each).
# shellcheck disable=SC2043  # each loop's list is a placeholder filled with several words

# check period __PERIOD__
k8s=/etc/kubernetes
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
read -r expires first <<<"$(earliest)"
if [ -z "$expires" ]; then
  echo "no kubeadm certificate under $k8s: is this the control plane?" >&2
  exit 1
fi
renewed=false
if [ "$expires" -lt "$(( $(date +%s) + __WITHIN_DAYS__ * 86400 ))" ]; then
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
  ready=
  for _ in $(seq 1 __API_READY_TRIES__); do
    if kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw /readyz >/dev/null 2>&1; then ready=1; break; fi
    sleep 5
  done
  if [ -z "$ready" ]; then
    echo "the API server did not come back after the certificate renewal" >&2
    exit 1
  fi
  renewed=true
  read -r expires first <<<"$(earliest)"
fi
ca=$(not_after "$k8s/pki/ca.crt")
printf '{"expires": "%s", "certificate": "%s", "caExpires": "%s", "renewed": %s}\n' \
  "$(date -u -d "@$expires" +%Y-%m-%dT%H:%M:%SZ)" "$first" "$(date -u -d "@$ca" +%Y-%m-%dT%H:%M:%SZ)" "$renewed"
