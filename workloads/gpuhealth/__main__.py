"""`python -m gpuhealth`: the GPU health service (see gpuhealth/service.py).

Every option has an environment variable (GPU_HEALTH_<OPTION>, e.g. GPU_HEALTH_DRY_RUN=true);
the command line wins.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from gpuhealth.kube import KubeClient
from gpuhealth.service import GpuHealth, Settings
from gpuhealth.web import Server, WebhookToken

DEFAULT_PORT = 9880


def _env(name: str, default: str) -> str:
    return os.environ.get("GPU_HEALTH_" + name, default)


def _env_bool(name: str) -> bool:
    value = _env(name, "false").strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", ""):
        raise SystemExit(f"GPU_HEALTH_{name}: not a boolean: {value!r}")
    return value in ("true", "1", "yes")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpuhealth", description=(
        "Cordons, taints and drains GPU nodes on Alertmanager notifications (XID, ECC) and failing "
        "diagnostics; returns them after a passing diagnostic. A circuit breaker limits nodes out of "
        "service at once; --dry-run only reports."))
    p.add_argument("--listen-address", default=_env("LISTEN_ADDRESS", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(_env("PORT", str(DEFAULT_PORT))),
                   help="HTTP port: POST /webhook (Alertmanager), GET /metrics, GET /healthz (0: any free port)")
    p.add_argument("--webhook-token-file", default=_env("WEBHOOK_TOKEN_FILE", ""),
                   help="file holding the bearer token Alertmanager sends on /webhook (required; re-read when it "
                        "changes); a request without it gets 401")
    p.add_argument("--dry-run", action="store_true", default=_env_bool("DRY_RUN"),
                   help="decide and report (Events, metrics, log), change nothing")
    p.add_argument("--max-nodes-out", type=int, default=int(_env("MAX_NODES_OUT", "1")),
                   help="circuit breaker: most nodes out of service by this service at once")
    p.add_argument("--max-percent-out", type=float, default=float(_env("MAX_PERCENT_OUT", "10")),
                   help="circuit breaker: most percent of the GPU nodes out at once (the stricter limit wins)")
    p.add_argument("--reconcile-seconds", type=float, default=float(_env("RECONCILE_SECONDS", "30")),
                   help="how often nodes are re-read: evictions retried, diagnostics checked")
    p.add_argument("--stale-reconciles", type=float, default=float(_env("STALE_RECONCILES", "4")),
                   help="/healthz fails after this many reconcile intervals without a successful pass")
    p.add_argument("--gpu-resource", default=_env("GPU_RESOURCE", "nvidia.com/gpu"),
                   help="extended resource that makes a node a GPU node and a pod a GPU pod")
    p.add_argument("--event-namespace", default=_env("EVENT_NAMESPACE", "default"),
                   help="namespace of the Events about nodes (kubectl describe node reads 'default')")
    p.add_argument("--diag-namespace", default=_env("DIAG_NAMESPACE", "gpu-health"),
                   help="namespace of the diagnostic's pods (labelled app.kubernetes.io/name=gpu-diag): never evicted")
    p.add_argument("--pair-namespace", default=_env("PAIR_NAMESPACE", "training"),
                   help="namespace of the NCCL pair check's pods (the only ones read as its results)")
    p.add_argument("--pair-window-minutes", type=float, default=float(_env("PAIR_WINDOW_MINUTES", "96")),
                   help="how long one run of the pair check's rounds takes: results further apart are not "
                        "evidence of the same fault")
    p.add_argument("--api-server", default=_env("API_SERVER", ""),
                   help="Kubernetes API URL; default: in-cluster (KUBERNETES_SERVICE_HOST/PORT)")
    p.add_argument("--token-file", default=_env("TOKEN_FILE", ""), help="bearer token file (with --api-server)")
    p.add_argument("--ca-file", default=_env("CA_FILE", ""), help="CA bundle of the API server (with --api-server)")
    p.add_argument("--insecure-loopback", action="store_true", default=_env_bool("INSECURE_LOOPBACK"),
                   help="allow plain http:// to a loopback --api-server (tests)")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error("--port must be within 0..65535")
    if not args.webhook_token_file:
        p.error("--webhook-token-file (GPU_HEALTH_WEBHOOK_TOKEN_FILE) is required: the webhook takes nodes out, "
                "only Alertmanager with the token may call it")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings(max_nodes_out=args.max_nodes_out, max_percent_out=args.max_percent_out,
                            dry_run=args.dry_run, gpu_resource=args.gpu_resource,
                            event_namespace=args.event_namespace, reconcile_seconds=args.reconcile_seconds,
                            pair_namespace=args.pair_namespace, pair_window_minutes=args.pair_window_minutes,
                            diag_namespace=args.diag_namespace, stale_reconciles=args.stale_reconciles)
        token = WebhookToken(Path(args.webhook_token_file))
        if args.api_server:
            kube = KubeClient(args.api_server, Path(args.token_file) if args.token_file else None,
                              Path(args.ca_file) if args.ca_file else None, insecure_loopback=args.insecure_loopback)
        else:
            kube = KubeClient.in_cluster()
    except ValueError as e:
        print(f"gpuhealth: {e}", file=sys.stderr)
        return 2
    server = Server(GpuHealth(kube, settings), args.listen_address, args.port, token)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    logging.getLogger("gpuhealth").info("listening on %s:%d (dry run: %s, breaker: %d nodes / %g%%)",
                                        args.listen_address, server.port, settings.dry_run,
                                        settings.max_nodes_out, settings.max_percent_out)
    print(f"listening on {args.listen_address}:{server.port}", flush=True)
    done.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
