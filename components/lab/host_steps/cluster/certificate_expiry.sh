#!/usr/bin/env bash
# The certificate expiry metric of one control plane, installed as /usr/local/sbin/gpu-cluster-certificate-expiry
# and run by /etc/cron.d/gpu-cluster-certificate-expiry (and by the renewal step after a renewal): when
# every certificate under /etc/kubernetes/pki (control plane, front proxy and etcd; the CAs too) and
# every client certificate in kubeadm's kubeconfig files expires, as node-exporter textfile metrics
# (gpu_cluster_certificate_expiry_timestamp_seconds{host, certificate}), the file replaced in one rename.
# A certificate openssl cannot read is left out and counted (gpu_cluster_certificate_unreadable).
# Filled in: __NODE__, __TEXTFILE_DIR__, __KUBECONFIGS__ (scripts.KUBEADM_KUBECONFIGS).
# shellcheck disable=SC2043  # the kubeconfig loop's list is a placeholder filled with several words

set -euo pipefail
umask 022
node=__NODE__
k8s=/etc/kubernetes
textfile_dir=__TEXTFILE_DIR__
metric=gpu_cluster_certificate_expiry_timestamp_seconds
unreadable=0

# sample NAME FILE: the metric's line for the first certificate in FILE, or nothing (and counted).
sample() {
  local end
  if end=$(openssl x509 -noout -enddate -in "$2" 2>/dev/null) && end=$(date -d "${end#notAfter=}" +%s 2>/dev/null); then
    printf '%s{host="%s",certificate="%s"} %s\n' "$metric" "$node" "$1" "$end"
  else
    unreadable=$((unreadable + 1))
  fi
}

install -d -m 0755 "$textfile_dir"
tmp=$(mktemp "$textfile_dir/.certificates.prom.XXXXXX")
pem=$(mktemp)
trap 'rm -f "$tmp" "$pem"' EXIT
{
  echo "# HELP $metric When a kubeadm certificate of this control plane expires (its notAfter)."
  echo "# TYPE $metric gauge"
  while IFS= read -r f; do
    sample "${f#"$k8s/pki/"}" "$f"
  done < <(find "$k8s/pki" -name '*.crt' -type f 2>/dev/null | sort)
  for f in __KUBECONFIGS__; do
    [ -f "$k8s/$f" ] || continue
    sed -n 's/^ *client-certificate-data: *//p' "$k8s/$f" | head -n 1 | base64 -d >"$pem" 2>/dev/null || true
    [ -s "$pem" ] || continue  # a kubeconfig that names a file (kubelet.conf) has no certificate of its own
    sample "$f" "$pem"
  done
  echo "# HELP gpu_cluster_certificate_unreadable Certificates under $k8s the expiry metric could not read."
  echo "# TYPE gpu_cluster_certificate_unreadable gauge"
  echo "gpu_cluster_certificate_unreadable{host=\"$node\"} $unreadable"
} >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$textfile_dir/gpu_cluster_certificates.prom"
