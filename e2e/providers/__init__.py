"""Stand-ins for the Pulumi providers the Go module proxy does not serve (docs/toolchain.md,
"Stand-ins for pulumi-random and pulumi-command"), run by the real engine as plugins found on PATH
(bin/pulumi-resource-random, bin/pulumi-resource-command).

  plugin.py            the provider protocol's server side, secrets and unknowns on the wire
  random_provider.py   RandomPassword and RandomBytes, with terraform-provider-random's semantics
  command_provider.py  remote.Command for previews only: it runs nothing, and refuses up/destroy
"""
