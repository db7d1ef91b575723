"""NCCL acceptance: an all-reduce sweep over torch.distributed, started by torchrun on every node.

    python -m trainer.allreduce_bench --max-bytes 1073741824 --link-gbps 100 --rdma

Global rank 0 prints an nccl-tests style table (size, count, time, algbw, busbw = algbw x 2(n-1)/n,
#wrong), the NCCL transport found in NCCL's INFO log, and one `acceptance: verdict=...` line.
Every rank exits with the verdict's code (trainer.nccl): 0 pass, 10 largest-size busbw below
--min-busbw-fraction x --link-gbps, 11 NCCL used TCP sockets while --rdma is declared, 12 no
transport lines to confirm --rdma, 15 --rdma declared but no channel over NET/IB (only P2P/SHM:
RDMA never exercised), 16 some size returned wrong values (#wrong not 0: data corruption, which wins
over every other code), 17 an IB completion error (IBV_WC_* status) in an NCCL WARN line of any
rank, 3 bad arguments. Under torchrun the pod sees 1 for any failure (torchrun's
own code) unless --exit-code-file hands the code to the launch script; the verdict line says which.

NCCL's log: with the nccl backend and no --nccl-log, this process sets NCCL_DEBUG=INFO (when it is
lower) and, unless NCCL_DEBUG_FILE is set, NCCL_DEBUG_FILE=/tmp/nccl-debug.<pid>.log before NCCL
starts, then reads that file (%h and %p expanded as NCCL does). --nccl-log reads given files instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from trainer import EXIT_CONFIG_ERROR, record_exit_code
from trainer.nccl import (
    NcclTransport,
    SweepRow,
    algorithm_bandwidth,
    bus_bandwidth,
    format_sweep_header,
    format_sweep_row,
    parse_nccl_log,
    verdict,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.allreduce_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30, help="largest size; the verdict uses it (default 1 GiB)")
    p.add_argument("--factor", type=int, default=2, help="size multiplier between steps")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--link-gbps", type=float, default=0.0, help="declared per-node link rate, Gbit/s (0: no bandwidth check)")
    p.add_argument("--min-busbw-fraction", type=float, default=0.9)
    p.add_argument("--rdma", action="store_true", help="RDMA (IB/RoCE) is declared: the all-reduce must run over NET/IB (sockets, or P2P/SHM only, fail)")
    p.add_argument("--expect-transport", choices=("any", "RDMA"), default="any", help="RDMA: same as --rdma")
    p.add_argument("--nccl-log", action="append", default=[], help="NCCL INFO log file(s) to read instead of our own")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--preflight", action="store_true", help="check the arguments and exit (3 when unusable)")
    p.add_argument("--exit-code-file", help="write a failing exit code here for the launch script (see launch.py)")
    args = p.parse_args(argv)
    args.rdma = args.rdma or args.expect_transport == "RDMA"
    return args


def check_args(args: argparse.Namespace) -> str | None:
    if args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        return f"need 4 <= --min-bytes <= --max-bytes, got {args.min_bytes} and {args.max_bytes}"
    if args.factor < 2:
        return f"--factor must be >= 2, got {args.factor}"
    if args.iters < 1 or args.warmup < 0:
        return f"--iters must be >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}"
    if not 0 < args.min_busbw_fraction <= 1:
        return f"--min-busbw-fraction must be in (0, 1], got {args.min_busbw_fraction}"
    if args.link_gbps < 0:
        return f"--link-gbps must be >= 0, got {args.link_gbps}"
    return None


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min x factor, ... and always max itself (the size the verdict is about); multiples of 4 B."""
    out, size = [], min_bytes
    while size < max_bytes:
        out.append(size - size % 4)
        size *= factor
    out.append(max_bytes - max_bytes % 4)
    return sorted(set(out))


def own_nccl_log_path() -> Path:
    template = os.environ.get("NCCL_DEBUG_FILE") or f"/tmp/nccl-debug.{os.getpid()}.log"
    return Path(template.replace("%h", socket.gethostname().split(".")[0]).replace("%p", str(os.getpid())))


def ask_nccl_for_its_log() -> None:
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        os.environ["NCCL_DEBUG"] = "INFO"
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV")
    os.environ.setdefault("NCCL_DEBUG_FILE", f"/tmp/nccl-debug.{os.getpid()}.log")


def read_transport(paths: list[Path]) -> NcclTransport:
    result = NcclTransport()
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                result = result.merge(parse_nccl_log(f))
        except OSError as exc:
            print(f"# cannot read NCCL log {path}: {exc.strerror}", file=sys.stderr, flush=True)
    return result


# What the verdict needs from every rank's log, as counts a MAX/SUM all-reduce can combine (object
# collectives would need numpy): [saw Socket network, saw IB network, IB completion errors, channels per kind...].
_KINDS = ("NET/IB", "NET/Socket", "P2P", "SHM")


def merge_across_ranks(local: NcclTransport, device) -> NcclTransport:
    import torch
    import torch.distributed as dist

    flags = torch.tensor([local.network == "Socket", local.network == "IB", local.ib_errors]
                         + [local.channels.get(k, 0) for k in _KINDS], dtype=torch.int64, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.SUM)
    values = [int(v) for v in flags.tolist()]
    network = "Socket" if values[0] else ("IB" if values[1] else None)
    channels = {k: v for k, v in zip(_KINDS, values[3:], strict=True) if v}
    # channel kinds outside _KINDS (e.g. NVLS, COLLNET) are kept from this rank's own log
    channels.update({k: v for k, v in local.channels.items() if k not in _KINDS})
    # nNodes and MNNVL are the communicator's, the same in every rank's log
    return NcclTransport(network=network, devices=local.devices, channels=channels, nodes=local.nodes, mnnvl=local.mnnvl,
                         ib_errors=values[2], ib_error_example=local.ib_error_example)


def run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if backend == "nccl" and not use_cuda:
        print("allreduce_bench: event=fatal exit=3 reason='--backend nccl needs a GPU; none is visible'", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if backend == "nccl" and not args.nccl_log:
        ask_nccl_for_its_log()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    rows: list[SweepRow] = []
    if rank == 0:
        print(f"# allreduce_bench: nranks {world} backend {backend} device {device.type} dtype float32 "
              f"iters {args.iters} warmup {args.warmup}", flush=True)
        for line in format_sweep_header():
            print(line, flush=True)
    for size in sizes(args.min_bytes, args.max_bytes, args.factor):
        count = size // 4
        buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        sync()
        wrong = int((buf != world * (world + 1) / 2).sum().item())
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        started = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        sync()
        elapsed = torch.tensor([(time.perf_counter() - started) / args.iters, float(wrong)], dtype=torch.float64)
        if backend == "nccl":
            elapsed = elapsed.to(device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace, as in nccl-tests
        seconds, wrong = float(elapsed[0]), int(elapsed[1])
        algbw = algorithm_bandwidth(size, seconds)
        row = SweepRow(size=size, count=count, dtype="float", redop="sum", time_us=seconds * 1e6,
                       algbw=algbw, busbw=bus_bandwidth(algbw, world), wrong=wrong)
        rows.append(row)
        if rank == 0:
            print(format_sweep_row(row), flush=True)
        del buf

    paths = [Path(p) for p in args.nccl_log] if args.nccl_log else ([own_nccl_log_path()] if backend == "nccl" else [])
    transport = read_transport(paths)
    merged = merge_across_ranks(transport, device if backend == "nccl" else torch.device("cpu"))
    result = verdict(rows, merged, link_gbps=args.link_gbps or None, min_busbw_fraction=args.min_busbw_fraction,
                     rdma_declared=args.rdma, nccl_expected=backend == "nccl" or bool(args.nccl_log))
    if rank == 0:
        print(f"# Avg bus bandwidth    : {sum(r.busbw for r in rows) / len(rows):.5g}", flush=True)
        print(f"# NCCL transport: {merged.summary()} network={merged.network or 'n/a'}"
              + "".join(f"\n#   {shlex.quote(d)}" for d in dict.fromkeys(merged.devices)), flush=True)
        print(result.line(merged, rows[-1].size if rows else None), flush=True)
    dist.destroy_process_group()
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problem = check_args(args)
    if problem:
        print(f"allreduce_bench: event=fatal exit={EXIT_CONFIG_ERROR} reason={shlex.quote(problem)}", file=sys.stderr, flush=True)
        record_exit_code(args.exit_code_file, EXIT_CONFIG_ERROR)
        return EXIT_CONFIG_ERROR
    if args.preflight:
        print("allreduce_bench: preflight ok", flush=True)
        return 0
    code = run(args)
    record_exit_code(args.exit_code_file, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
