#!/usr/bin/env bash
# nvidia_toolkit's delete: the packages unheld and purged, the apt source and key removed.
# Filled in: nothing.

apt_unpin_purge nvidia-container-toolkit nvidia-container-toolkit-base \
  libnvidia-container-tools libnvidia-container1
rm -f /etc/apt/sources.list.d/nvidia-container-toolkit.list /etc/apt/keyrings/nvidia-container-toolkit.gpg
