#!/usr/bin/env bash
# The certificate expiry metric on one control plane (create and update): the script and its cron
# file written only when they differ, then one run, so the metric is there from this `up` on.
# Filled in: __EXPIRY_SCRIPT__ (certificate_expiry.sh, filled) and __CRON_FILE__ (placed as they are, in
# quoted here-documents), __SCRIPT_PATH__, __CRON_PATH__.

if ! command -v cron >/dev/null 2>&1; then
  echo "no cron daemon on this host (Ubuntu's server images have it): apt-get install cron" >&2
  exit 1
fi
put_file __SCRIPT_PATH__ 0755 >&2 <<'GPU_CLUSTER_CERTIFICATE_EXPIRY' || true
__EXPIRY_SCRIPT__
GPU_CLUSTER_CERTIFICATE_EXPIRY
put_file __CRON_PATH__ 0644 >&2 <<'GPU_CLUSTER_CERTIFICATE_EXPIRY_CRON' || true
__CRON_FILE__
GPU_CLUSTER_CERTIFICATE_EXPIRY_CRON
__SCRIPT_PATH__
echo "certificate expiry metric scheduled"
