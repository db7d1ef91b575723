#!/usr/bin/env bash
# Undo certificate_expiry_install: the cron file, the script and its metrics file.
# Filled in: __SCRIPT_PATH__, __CRON_PATH__, __TEXTFILE_DIR__.

rm -f __CRON_PATH__ __SCRIPT_PATH__ __TEXTFILE_DIR__/gpu_cluster_certificates.prom
