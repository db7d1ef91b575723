"""Pulumi components of gpu-cluster: each module is one concern (see docs/architecture.md)."""
