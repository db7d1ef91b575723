"""gpu-cluster: load the validated stack config, build the stack for its platform, export outputs."""

import pulumi

from components import config
from stacks.registry import BUILDERS

cfg, secrets = config.load()
for key, value in BUILDERS[cfg.platform](cfg, secrets).items():
    pulumi.export(key, value)
