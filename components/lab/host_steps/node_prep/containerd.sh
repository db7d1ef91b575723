#!/usr/bin/env bash
# Node prep, every host: containerd.io from Docker's apt repository, pinned, its config generated
# from its defaults (systemd cgroups, the pause image, on GPU hosts the NVIDIA runtime as default).
# Filled in: __VERSION__ (containerdVersion), __PAUSE_IMAGE__ (versions.py, per minor),
# __NVIDIA_RUNTIME__ (a line scripts.py chooses: nvidia-ctk on GPU hosts, a comment on CPU hosts),
# __KEY_PINS__ (the fingerprints the repository's key must have, '' unchecked).

# @include lib/apt_repo.sh
# shellcheck disable=SC1091  # the host's os-release
. /etc/os-release
apt_repo docker https://download.docker.com/linux/ubuntu/gpg __KEY_PINS__ \
  "deb [arch=$(dpkg --print-architecture) signed-by=@KEYRING@] https://download.docker.com/linux/ubuntu ${VERSION_CODENAME} stable"
apt_pin containerd.io=__VERSION__
# The config is regenerated from containerd's defaults every run and written only if it
# differs: systemd cgroups (what kubelet uses), the pause image kubeadm expects and, on
# GPU hosts, the NVIDIA runtime as the default runtime.
tmp=$(mktemp)
containerd config default >"$tmp"
sed -i -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
  -e 's#sandbox_image = .*#sandbox_image = "__PAUSE_IMAGE__"#' "$tmp"
__NVIDIA_RUNTIME__
if put_file /etc/containerd/config.toml 0644 <"$tmp"; then
  systemctl restart containerd
fi
rm -f "$tmp"
systemctl enable --now containerd >/dev/null 2>&1 || true
