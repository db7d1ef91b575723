"""manifest_resource registers a manifest exactly as pulumi-kubernetes' typed class does: the
RegisterResourceRequest the engine would receive is compared field by field (type token, properties,
aliases, provider version, secret outputs, options), for every kind in its table, against the
installed pulumi-kubernetes. Only where the call came from (stack trace, source position) may differ."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.settings import set_root_resource

from components.manifest_resource import TYPED_ALIASES, manifest_resource, registers_like_typed
from render import program

POD_SPEC = {"containers": [{"name": "c", "image": "registry.example.com/x:1.0", "args": ["--a", "b"]}],
            "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": "gpu-1"}}
SPECS: dict[str, dict[str, Any]] = {
    "CronJob": {"schedule": "0 3 * * *", "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": POD_SPEC}}}},
    "Job": {"backoffLimit": 0, "completionMode": "Indexed", "completions": 2, "template": {"spec": POD_SPEC}},
    "NetworkPolicy": {"podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Ingress"],
                      "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"a": "b"}}}],
                                   "ports": [{"port": 8080, "protocol": "TCP"}]}]},
    "Deployment": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                   "template": {"metadata": {"labels": {"app": "x"}}, "spec": {**POD_SPEC, "restartPolicy": "Always"}}},
    "DaemonSet": {"selector": {"matchLabels": {"app": "x"}},
                  "template": {"metadata": {"labels": {"app": "x"}}, "spec": {**POD_SPEC, "restartPolicy": "Always"}}},
}
TYPED = {"CronJob": k8s.batch.v1.CronJob, "Job": k8s.batch.v1.Job, "NetworkPolicy": k8s.networking.v1.NetworkPolicy,
         "Deployment": k8s.apps.v1.Deployment, "DaemonSet": k8s.apps.v1.DaemonSet}


class CapturingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.requests: dict[str, Any] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        self.requests[request.name] = request
        return super().RegisterResource(request)


@pytest.fixture
def monitor() -> CapturingMonitor:
    m = program.ProgramMocks()
    captured = CapturingMonitor(m)
    set_root_resource(None)
    pulumi.runtime.set_mocks(m, project="gpu-cluster", stack="test", preview=False, monitor=captured)
    return captured


def _comparable(request: Any) -> Any:
    out = type(request)()
    out.CopyFrom(request)
    out.name = "x"
    out.ClearField("stackTrace")
    out.ClearField("sourcePosition")
    return out


def test_every_listed_kind_has_a_case() -> None:
    assert {kind for _, kind in TYPED_ALIASES} == set(SPECS) == set(TYPED)


@pytest.mark.parametrize("kind", sorted(SPECS))
@pulumi.runtime.test
def test_the_engine_receives_what_the_typed_class_sends(monitor: CapturingMonitor, kind: str) -> Any:
    api_version = next(api for api, k in TYPED_ALIASES if k == kind)
    body = {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "x", "namespace": "ns", "labels": {"app": "x"}}, "spec": SPECS[kind]}
    assert registers_like_typed(body)
    typed = TYPED[kind]("typed", metadata=body["metadata"], spec=body["spec"])
    generic = manifest_resource("generic", body, pulumi.ResourceOptions())

    def check(_: Any) -> None:
        typed_request, generic_request = monitor.requests["typed"], monitor.requests["generic"]
        assert typed_request.type == generic_request.type == f"kubernetes:{api_version}:{kind}"
        assert len(typed_request.aliases) == len(TYPED_ALIASES[(api_version, kind)])
        assert _comparable(typed_request) == _comparable(generic_request)

    return pulumi.Output.all(typed.urn, generic.urn).apply(check)


def test_core_group_and_other_shapes_stay_typed() -> None:
    # CustomResource would register kubernetes:v1:Service (the typed class: kubernetes:core/v1:Service).
    assert not registers_like_typed({"apiVersion": "v1", "kind": "Service", "metadata": {}, "spec": {}})
    assert not registers_like_typed({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {}, "spec": {},
                                     "status": {}})
    with pytest.raises(ValueError, match="manifest_resource"):
        manifest_resource("svc", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}},
                          pulumi.ResourceOptions())
