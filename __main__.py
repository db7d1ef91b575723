"""gpu-cluster: load the validated stack config, build the stack for its platform, export outputs."""

import pulumi

import config
from stacks import registry

cfg, secrets = config.load()
for key, value in registry.build(cfg, secrets).items():
    pulumi.export(key, value)
