#!/usr/bin/env bash
# Node prep, GPU hosts: nouveau blacklisted, the NVIDIA server driver of one branch installed and
# held (any version of the branch, or exactly VERSION), loaded now or after a reboot.
# Filled in: __BRANCH__ (nvidiaDriver.branch), __VERSION__ (nvidiaDriver.version, '' for any).

# nouveau must not claim the GPUs before the NVIDIA driver does.
if put_file /etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf 0644 <<'EOF'; then
blacklist nouveau
options nouveau modeset=0
EOF
  update-initramfs -u
fi
pkg=nvidia-driver-__BRANCH__-server
want=__VERSION__
if [ -z "$want" ]; then
  # Branch pin: install the branch package once, then hold it so apt never moves it.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    apt_get update -q
    apt_get install -y -q --no-install-recommends "$pkg"
  fi
  apt-mark showhold | grep -qx "$pkg" || apt-mark hold "$pkg"
else
  apt_pin "$pkg=$want"
fi
# Load the driver now if possible; reboot only when the running kernel cannot.
if nvidia-smi -L >/dev/null 2>&1; then
  echo "driver ready"
  exit 0
fi
if ! lsmod | grep -q '^nouveau' && modprobe nvidia && nvidia-smi -L >/dev/null 2>&1; then
  echo "driver loaded without reboot"
  exit 0
fi
# Reboot: refuse new SSH sessions first (this one survives: ssh.service uses KillMode=process)
# so the next step cannot connect before the reboot, then reboot in a few seconds.
cat /proc/sys/kernel/random/boot_id >"$STATE_DIR/reboot-requested"
systemctl stop ssh.socket ssh.service 2>/dev/null || true
systemd-run --on-active=5 --unit=gpu-cluster-reboot systemctl reboot
echo "rebooting to load the NVIDIA driver"
