"""bench/critical_path.py's cost table covers every step of the plan it benchmarks: a step with no
cost stops the benchmark (exit 2) rather than counting as free, so a new awaited object in the
program must get a cost here, with its source. Kinds Pulumi does not await cost one API call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import _configs
from bench.critical_path import COSTS, UnknownStep, build_graph, cost_of
from render import program


def _reg(type_: str, name: str) -> SimpleNamespace:
    return SimpleNamespace(type=type_, name=name, custom=True, inputs={"metadata": {"name": name}})


def test_every_step_of_the_benchmarked_lab_plan_has_a_cost() -> None:
    plan = program.run("lab", config=_configs.lab_config(2, **_configs.lab_layers("indexed-job")))
    graph = build_graph(plan, COSTS)  # raises UnknownStep naming each step without a cost
    by_name = {n.name: n for n in graph.values()}
    # The GPU health service: its rollout is awaited; its Service's await ends once that pod is ready.
    deployment = next(n for n in graph.values() if n.key == "health-service")
    service = next(n for n in graph.values() if n.key == "health-endpoints")
    assert deployment.cost > 1 and deployment.urn in service.preds
    # Its diagnostic CronJobs and ServiceMonitor are created, not awaited.
    created = [n for name, n in by_name.items() if "cronjob" in name or "servicemonitor" in name]
    assert created and all((n.key, n.cost) == ("k8s-object", 1) for n in created)


@pytest.mark.parametrize("type_", ["kubernetes:batch/v1:CronJob", "kubernetes:monitoring.coreos.com/v1:ServiceMonitor",
                                   "kubernetes:monitoring.coreos.com/v1:PodMonitor", "kubernetes:core/v1:ConfigMap"])
def test_kinds_pulumi_does_not_await_cost_one_api_call(type_: str) -> None:
    assert cost_of(_reg(type_, "anything"), COSTS) == (1.0, "k8s-object")


@pytest.mark.parametrize("type_", ["kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job", "kubernetes:core/v1:Service",
                                   "kubernetes:apps/v1:StatefulSet", "kubernetes:helm.sh/v3:Release"])
def test_an_awaited_kind_without_a_cost_stops_the_benchmark(type_: str) -> None:
    with pytest.raises(UnknownStep, match="new-thing"):
        cost_of(_reg(type_, "new-thing"), COSTS)
