"""Offline plan of a gpu-cluster stack: `python -m render <stack> --out DIR`."""
