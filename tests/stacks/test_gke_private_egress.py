"""A private gke cluster and its route to the charts' public registries (gke.privateNodes.egress,
config/gke_egress.py), evaluated by the real program under the recording mocks and rendered by
`python -m render` as a user runs it:

  - private nodes get a Cloud Router and a Cloud NAT on gke.network in gcp:region (Google's Cloud NAT
    GKE example: auto-allocated addresses, all subnet ranges), or on gke.subnetwork alone, and every
    in-cluster layer (the Helm releases) waits for the NAT;
  - egress existing creates none, and render says the egress is not checked;
  - a Shared VPC network with cloudNat, and egress on a public cluster, are refused naming the key;
  - the committed (public) stack has no router.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import config
from config import ConfigError
from render import program
from tests.config.test_gke_config import L4, gke_raw
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

ROUTER, NAT = "gcp:compute/router:Router", "gcp:compute/routerNat:RouterNat"


def _private(**private: object) -> dict[str, object]:
    return {"privateNodes": {"enabled": True, **private}}


def _plan(**gke: object) -> program.Plan:
    return program.run("gke", config=stack_config_with("gke", gke=gke))


def test_private_nodes_get_a_cloud_router_and_nat_every_release_waits_for():
    plan = _plan(**_private())
    (router,) = plan.of_type(ROUTER)
    (nat,) = plan.of_type(NAT)
    assert router.inputs == {"name": "gpu-cluster-nat-router", "project": "my-gpu-project", "region": "us-central1",
                             "network": "default"}
    assert nat.inputs["name"] == "gpu-cluster-nat" and nat.inputs["region"] == "us-central1"
    assert nat.inputs["natIpAllocateOption"] == "AUTO_ONLY"
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat.inputs["router"] == "gpu-cluster-nat-router"
    (cluster,) = plan.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["privateClusterConfig"]["enablePrivateNodes"] is True
    # Each Helm release, or the in-cluster layer it belongs to, depends on the NAT (the engine runs a
    # child after its parent, and the parent after its dependencies).
    by_urn = {r.urn: r for r in plan.resources}

    def waits_for_nat(r: program.Registration) -> bool:
        for _ in range(10):  # bounded walk up the parents
            if nat.urn in r.dependencies:
                return True
            if r.parent not in by_urn:
                return False
            r = by_urn[r.parent]
        return False

    releases = plan.of_type("kubernetes:helm.sh/v3:Release")
    assert releases and all(waits_for_nat(r) for r in releases), [r.name for r in releases if not waits_for_nat(r)]
    assert plan.outputs["egress"] == {"egress": "cloudNat", "router": "gpu-cluster-nat-router", "nat": "gpu-cluster-nat"}


def test_with_a_subnetwork_the_nat_translates_that_subnetwork_only():
    plan = _plan(subnetwork="gpu-nodes", **_private())
    (nat,) = plan.of_type(NAT)
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS"
    assert nat.inputs["subnetworks"] == [{"name": "gpu-nodes", "sourceIpRangesToNats": ["ALL_IP_RANGES"]}]


def test_existing_egress_creates_no_nat_and_render_says_it_is_not_checked(tmp_path: Path):
    plan = _plan(**_private(egress="existing"))
    assert not plan.of_type(ROUTER) and not plan.of_type(NAT)
    gke = {**json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"]), **_private(egress="existing")}
    result = render_cli(tmp_path, "gke", {"gke": gke})
    assert result.returncode == 0, result.stderr
    assert "warning: gke.privateNodes.egress existing: the private nodes pull the charts' images" in result.stderr
    assert "not checked offline" in (tmp_path / "out" / "summary.md").read_text()


def _problems(**gke: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        config.parse(gke_raw(L4, **gke))
    return dict(err.value.problems)


def test_cloud_nat_on_a_shared_vpc_network_is_refused_naming_the_host_project():
    found = _problems(network="projects/net-host-proj/global/networks/shared", **_private())
    assert "gke.privateNodes.egress" in found
    assert "project net-host-proj (Shared VPC)" in found["gke.privateNodes.egress"]
    assert "set egress existing" in found["gke.privateNodes.egress"]


def test_egress_on_a_public_cluster_is_refused_as_doing_nothing():
    found = _problems(privateNodes={"enabled": False, "egress": "existing"})
    assert "does nothing with gke.privateNodes.enabled false" in found["gke.privateNodes.egress"]


def test_the_committed_public_stack_has_no_router():
    plan = program.run("gke")
    assert not plan.of_type(ROUTER) and not plan.of_type(NAT)
    assert "egress" not in plan.outputs
