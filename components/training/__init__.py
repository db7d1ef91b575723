"""Distributed training: the launcher-neutral container command (launch.py), the TrainingJob
component (job.py), its network policies and the layer that wires storage and jobs together."""
