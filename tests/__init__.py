"""The tests, mirroring the tree (tests/config/, tests/components/, tests/render/, ...), and their
helpers: simulated hosts (hostsim.py), a fake API server and kubectl, the toolchain's binaries
(toolchain.py). tests/e2e/ is the tier against the real control plane (`make e2e`)."""
