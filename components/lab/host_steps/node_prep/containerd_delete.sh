#!/usr/bin/env bash
# containerd's delete: stopped, unheld and purged; its config, apt source and key removed.
# Filled in: nothing.

systemctl disable --now containerd >/dev/null 2>&1 || true
apt_unpin_purge containerd.io
rm -f /etc/containerd/config.toml /etc/apt/sources.list.d/docker.list /etc/apt/keyrings/docker.gpg
