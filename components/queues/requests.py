"""What Kueue counts against a ClusterQueue's quota for a pod and a job, as Kueue computes it
(pkg/util/resource and pkg/workload: a container's requests, its limits where a request is not
given; a pod's is the sum of its containers and sidecars (init containers with restartPolicy
Always), or the largest plain init container plus the sidecars started before it, whichever is
more; pods x replicas for the job). Resources excluded by Kueue's config (the RDMA device) are
left out by the caller."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from config.quantities import parse_quantity


def _container(c: dict[str, Any]) -> dict[str, Decimal]:
    res = c.get("resources") or {}
    out = {k: parse_quantity(str(v)) for k, v in (res.get("limits") or {}).items()}
    out.update({k: parse_quantity(str(v)) for k, v in (res.get("requests") or {}).items()})
    return out


def _add(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: a.get(k, Decimal(0)) + b.get(k, Decimal(0)) for k in a.keys() | b.keys()}


def _max(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: max(a.get(k, Decimal(0)), b.get(k, Decimal(0))) for k in a.keys() | b.keys()}


def pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """The resources one pod of `spec` counts (Kubernetes' effective pod requests)."""
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        total = _add(total, _container(c))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, _container(c))
        else:
            init_peak = _max(init_peak, _add(sidecars, _container(c)))
    return _max(_add(total, sidecars), init_peak)


def job_requests(pods: int, spec: dict[str, Any], excluded_prefixes: tuple[str, ...] = ()) -> dict[str, Decimal]:
    """`pods` pods of `spec`, without the resources Kueue is told to ignore."""
    return {k: v * pods for k, v in pod_requests(spec).items() if not k.startswith(excluded_prefixes)}
