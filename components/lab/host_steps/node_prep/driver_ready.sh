#!/usr/bin/env bash
# Node prep, GPU hosts, after a possible reboot (the connection retries dialing while the host is
# down): nvidia-smi sees as many GPUs as the config says. Filled in: __GPUS__ (the host's gpus).

want=__GPUS__
have=0
for _ in $(seq 1 30); do
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ "$have" -ge "$want" ] && break
  sleep 5
done
rm -f "$STATE_DIR/reboot-requested"
if [ "$have" -lt "$want" ]; then
  echo "nvidia-smi sees $have GPU(s) but the config says $want" >&2
  exit 1
fi
echo "$have GPU(s) visible"
