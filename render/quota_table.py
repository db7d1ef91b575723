"""summary.md's "Team quotas": each Kueue ClusterQueue the plan creates (one per team, and the
program's own), read from the rendered objects themselves, so the table says what Kueue gets.

Per queue, flavor and resource: the nominal quota, the borrowing limit (none: it may borrow all its
cohort lends), the lending limit (none: it lends all its unused nominal quota) and the most it can
ever use: the whole-cluster check's Kueue model (render/cluster/kueue_admission.QuotaBook.potential,
Kueue's potentialAvailable), its nominal quota plus what it may borrow of what the others lend.
"""

from __future__ import annotations

from typing import Any

from render.cluster.kueue_admission import QuotaBook
from render.cluster.kueue_admission import _fmt as quantity_text
from render.cluster.kueue_objects import read
from render.cluster.objects import Obj

KUEUE_GROUP = "kueue.x-k8s.io/"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every Namespace


def _namespaces(selector: dict[str, Any] | None) -> str:
    """The namespaces a ClusterQueue's namespaceSelector admits, as a reader reads them."""
    if selector is None:
        return "none"
    if not selector:
        return "every one"
    labels = selector.get("matchLabels") or {}
    if set(selector) == {"matchLabels"} and set(labels) == {NAMESPACE_NAME_LABEL}:
        return f"`{labels[NAMESPACE_NAME_LABEL]}`"
    return f"selector `{selector}`"


def section(objects: list[dict[str, Any]]) -> list[str]:
    """The "Team quotas" section of summary.md; nothing when the plan creates no ClusterQueue."""
    queues = [o for o in objects if o.get("kind") == "ClusterQueue"
              and str(o.get("apiVersion", "")).startswith(KUEUE_GROUP)]
    if not queues:
        return []
    world = read([Obj(o, "", "plan") for o in queues])
    book = QuotaBook(world)
    out = ["", "## Team quotas", "",
           "Each Kueue ClusterQueue as the plan creates it. A queue uses its nominal quota first; in a cohort "
           "it lends what it does not use and borrows what the others lend and do not use, up to its "
           "borrowing limit. **At most** is the most it can ever use (Kueue's potentialAvailable). "
           "(docs/queues.md)", "",
           "| queue | namespace | cohort | flavor | resource | nominal | borrowing limit | lending limit | at most |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(world.cluster_queues):
        cq = world.cluster_queues[name]
        for group in cq.groups:
            for flavor, quotas in group.flavors:
                for resource, quota in quotas.items():
                    fr = (flavor, resource)
                    borrow = ("—" if not cq.cohort else "all the cohort lends" if quota.borrowing_limit is None
                              else quantity_text(resource, quota.borrowing_limit))
                    lend = ("—" if not cq.cohort else "all it does not use" if quota.lending_limit is None
                            else quantity_text(resource, quota.lending_limit))
                    out.append(f"| `{name}` | {_namespaces(cq.namespace_selector)} | "
                               f"{f'`{cq.cohort}`' if cq.cohort else 'none'} | `{flavor}` | `{resource}` | "
                               f"{quantity_text(resource, quota.nominal)} | {borrow} | {lend} | "
                               f"{quantity_text(resource, book.potential(cq, fr))} |")
    return out
