#!/usr/bin/env bash
# Node prep, GPU hosts: NVIDIA's container toolkit from its signed apt repository, pinned.
# Filled in: __PACKAGES__ (the toolkit's four packages as PKG=VERSION words, versions.py).

apt_repo nvidia-container-toolkit \
  https://nvidia.github.io/libnvidia-container/gpgkey \
  "deb [signed-by=@KEYRING@] https://nvidia.github.io/libnvidia-container/stable/deb/$(dpkg --print-architecture) /"
apt_pin __PACKAGES__
