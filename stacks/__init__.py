"""Stack wiring: one module per platform, each a function from the validated config to outputs."""
