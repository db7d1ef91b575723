"""queues.flexStartRetry (config/gke_provisioning.py FlexStartRetry): how Kueue retries a flex-start
job whose ProvisioningRequest fails before it deactivates it, written out in the
ProvisioningRequestConfig's spec.retryStrategy (components/queues/provisioning.py) whether set or not,
valid against the pinned chart's CRD (its field names and int32 types, strict: an unknown field is
refused), and bad values refused naming the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from components.queues import provisioning
from config.queues import flavors
from config.scheduling_contract import GPU_RESOURCE
from render.cluster.admission import Admission
from render.cluster.objects import Obj, chart_dir, parse_documents, render_chart
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import A100, gke_raw, pool
from tests.config.test_queues_config import queues, team

FLEX = pool(A100, name="a100-flex", zones=["us-central1-a"], autoscaling={"minNodes": 0, "maxNodes": 3},
            provisioning="flexStart")


def _raw(*pools: dict[str, Any], **retry: int) -> dict[str, Any]:
    return {**gke_raw(*pools), "queues": queues(team(), **({"flexStartRetry": retry} if retry else {}))}


def _config(raw: dict[str, Any]) -> dict[str, Any]:
    cfg = accepted(raw)
    (prc, _check) = provisioning.provisioning_objects(flavors(cfg), GPU_RESOURCE, cfg.queues.flex_start_retry)
    return dict(prc)


def test_kueues_defaults_are_written_out_when_unset() -> None:
    """Kueue 0.19.2's CRD defaults: 3 retries, 60 s doubling to 1800 s; then the workload is deactivated."""
    assert _config(_raw(FLEX))["spec"]["retryStrategy"] == {
        "backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}


def test_the_configured_strategy_is_written_and_valid_against_the_charts_crd(upstream_dir: Path) -> None:
    from components import versions
    from components.queues import kueue

    prc = _config(_raw(FLEX, backoffLimitCount=0, backoffBaseSeconds=30, backoffMaxSeconds=600))
    assert prc["spec"]["retryStrategy"] == {"backoffLimitCount": 0, "backoffBaseSeconds": 30, "backoffMaxSeconds": 600}
    path = chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION)
    rendered, _ = render_chart(path, kueue.kueue_values(10, ["team-vision"], False), kueue.RELEASE_NAME,
                               kueue.NAMESPACE, "1.34.2")
    crds = [Obj(d, "urn:kueue", "release kueue", crd_dir=True) for text in rendered.values()
            for d in parse_documents(text) if d.get("kind") == "CustomResourceDefinition"]
    assert crds

    def problems(body: dict[str, Any]) -> list[str]:
        model = Admission([*crds, Obj(body, "urn:queues", "plan")], {"urn:queues": ["urn:kueue"]}, "1.34")
        return [p.reason for p in model.schema()]

    assert problems(prc) == []
    misspelt = copy.deepcopy(prc)
    misspelt["spec"]["retryStrategy"]["backoffLimit"] = misspelt["spec"]["retryStrategy"].pop("backoffLimitCount")
    assert any("backoffLimit" in p and "unexpected" in p for p in problems(misspelt)), problems(misspelt)


@pytest.mark.parametrize(("retry", "key", "words"), [
    ({"backoffLimitCount": 21}, "queues.flexStartRetry.backoffLimitCount", ("20",)),
    ({"backoffLimitCount": -1}, "queues.flexStartRetry.backoffLimitCount", ("0",)),
    ({"backoffBaseSeconds": 0}, "queues.flexStartRetry.backoffBaseSeconds", ("1",)),
    ({"backoffMaxSeconds": 86401}, "queues.flexStartRetry.backoffMaxSeconds", ("86400",)),
    ({"backoffBaseSeconds": 600, "backoffMaxSeconds": 300}, "queues.flexStartRetry.backoffMaxSeconds",
     ("300 is below backoffBaseSeconds 600",)),
    ({"backoffLimit": 3}, "queues.flexStartRetry.backoffLimit", ()),
])
def test_bad_values_are_refused_naming_the_key(retry: dict[str, int], key: str, words: tuple[str, ...]) -> None:
    reported(_raw(FLEX, **retry), key, *words)


def test_without_a_flex_start_pool_it_is_refused_as_doing_nothing() -> None:
    reported(_raw(A100, backoffLimitCount=5), "queues.flexStartRetry", "no gke.gpuPools[] has provisioning flexStart")
    accepted(_raw(A100))  # unset: nothing to refuse


def test_the_gke_pages_example_is_accepted_and_is_kueues_default() -> None:
    import re

    import yaml

    page = (Path(__file__).resolve().parents[2] / "docs" / "getting-started" / "gke.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "flexStartRetry" in b]
    retry = yaml.safe_load(block)["gpu-cluster:queues"]["flexStartRetry"]
    assert _config(_raw(FLEX, **retry)) == _config(_raw(FLEX))  # the page shows the defaults
