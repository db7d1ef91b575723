"""The program against real components on loopback (issue 31): a control plane built from the pinned
toolchain (components/toolchain_versions.py) with the lab stack's own API server hardening and KWOK
nodes made from the stack's node model. Started by the tests' session fixture (tests/e2e/conftest.py)
and by `make e2e` (python -m e2e, which writes out/e2e/report.json).

  processes.py      start a component in its own process group with its log kept; stop it for sure
  pki.py            a throwaway PKI made with openssl (CA, serving and client certificates, SA keys)
  api.py            a small HTTPS client of the API server (stdlib only: no kubectl is built)
  lab_stack.py      what the lab stack gives the control plane: API server flags and files, nodes
  kwok.py           KWOK's controller with its upstream stages (nodes Ready, pods Running, Jobs done)
  control_plane.py  etcd, kube-apiserver, controller-manager, scheduler, KWOK: up, checked, down
  scheduler_differential.py  a stack's (any platform's) placements by the check against kube-scheduler's
                    bindings on that control plane, its KWOK nodes swapped for the stack's
  providers/        stand-ins the engine runs from PATH for pulumi-random and (preview only)
                    pulumi-command, whose provider modules the proxy does not serve
"""
