"""The training workload: a DDP trainer (`python -m trainer.train`) and the NCCL acceptance sweep
(`python -m trainer.allreduce_bench`), both started by torchrun in the pods the TrainingJob emits.

`nccl` holds the pure maths and log parsing of the acceptance test and needs no torch.
"""

# A fatal error in the trainer's own configuration (bad arguments, unusable data or checkpoint
# directory). Retrying cannot fix it, so the Job's podFailurePolicy fails the whole Job on it;
# components/training/launch.py repeats the number (the two packages share no imports).
EXIT_CONFIG_ERROR = 3


def record_exit_code(path: str | None, code: int) -> None:
    """Leave a fatal exit code where the launch script finds it after torchrun (which reports any
    worker failure as 1). Written atomically: every local rank may write the same code."""
    if not path or code == 0:
        return
    import os

    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, path)
