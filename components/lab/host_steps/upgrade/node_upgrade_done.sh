#!/usr/bin/env bash
# After a joined node's upgrade (its ready step, updated), with `report` holding what the join step
# printed: wait for the reboot it asked for and, on a GPU node, for its GPUs; then uncordon it and
# free its upgrade slot. scripts.py writes the line that sets `report` (stdin, or what the node
# upgrader's stdin held besides the token) before this.
# Filled in: __NODE__, __VERSION__ (kubernetesVersion), __GPUS__ (0 unless the driver changes),
# __DRIVER_SPEC__ (", nvidia-driver-<branch>-server[=<version>]" or nothing),
# __REBOOT_TRIES__ and __GPU_TRIES__ (scripts.REBOOT_WAIT_TRIES, GPU_WAIT_TRIES; 10 s each).
# __DRIVER_SPEC__ follows `v$want` directly in the last line: the host reads $want, then the spec.
# shellcheck disable=SC2154,SC2034  # report: set by the line before; want, want__DRIVER_SPEC__: see above

node=__NODE__
want=__VERSION__
gpus=__GPUS__
boot=$(sed -n 's/^gpu-cluster: reboot boot-id=//p' <<<"$report" | tail -n 1)
wait_api
if [ -n "$boot" ]; then
  now=$boot
  for ((n = 0; n < __REBOOT_TRIES__; n++)); do
    now=$(k get node "$node" -o jsonpath='{.status.nodeInfo.bootID}' 2>/dev/null || true)
    if [ -n "$now" ] && [ "$now" != "$boot" ]; then
      break
    fi
    sleep 10
  done
  if [ -z "$now" ] || [ "$now" = "$boot" ]; then
    echo "$node did not come back from its reboot in $((__REBOOT_TRIES__ / 6)) minutes" >&2
    exit 1
  fi
  if [ "$gpus" -gt 0 ]; then
    seen=0
    for ((n = 0; n < __GPU_TRIES__; n++)); do
      seen=$(k get node "$node" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null || true)
      if [ "${seen:-0}" -gt 0 ]; then
        break
      fi
      sleep 10
    done
    if [ "${seen:-0}" -eq 0 ]; then
      echo "$node came back without allocatable GPUs in $((__GPU_TRIES__ / 6)) minutes; it stays cordoned" >&2
      exit 1
    fi
  fi
fi
uncordon_node "$node"
echo "$node: upgraded to v$want__DRIVER_SPEC__ and uncordoned"
