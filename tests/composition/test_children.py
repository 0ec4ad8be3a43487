"""FederationClusters (function/composition/children.py, function/api/cluster_spec.py).

A Federation's remote clusters, each composed by a call of its own from the
spec the Federation gives it, must get exactly the objects the Federation
composes there itself: same names, same manifests, same cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from function.api.refusals import SpecError
from function.composition import children, compose
from function.composition.resource_names import REGISTRATIONS
from function.federation import read
from function.topology import clusters
from support.children import CA, CLUSTERS, SECURE, Case, config, federation_clusters, planned, selected
from support.helpers import BASE, spec, xr

DIGEST = "0123456789abcdef"
PLAIN = selected(spec(BASE, supernodes__pools__0__name="gpu"))
REPORT = {
    REGISTRATIONS: {"status": {"atProvider": {"manifest": {"data": {"retired": f"{DIGEST} us/flower-sites/Pod/x\n"}}}}}
}

CASES = [
    Case("a plain selector: the pools in eu and us, not the hub's", PLAIN, CLUSTERS),
    Case(
        "TLS with a CA copy, node authentication, a NetworkPolicy, a namespace made, global ids, per-cluster replicas",
        SECURE,
        CLUSTERS,
    ),
    Case("a retired key reaches its cluster's part only", SECURE, CLUSTERS, REPORT),
    Case(
        "a cluster pinned to an index keeps it in its part",
        SECURE,
        [config("eu", **{"flower.flwr.ai/cluster-index": "7"}), config("us")],
    ),
]


def parts_of(built: compose.Plan) -> dict[str, compose.Plan]:
    """Each FederationCluster the Federation composes, composed by its own call."""
    return {
        name: compose.plan(read.cluster({"metadata": {"name": name}, **part}))
        for name, part in federation_clusters(built).items()
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason)
def test_each_remote_cluster_is_composed_by_its_part_as_the_federation_would_compose_it(case: Case):
    fed, built = planned(case)
    assert sorted(federation_clusters(built)) == ["cluster-config-eu", "cluster-config-us"]
    assert {c.provider_config.name for c in built.resources.values()} == {"default"}
    composed: dict[str, Any] = {}
    direct: dict[str, Any] = {}
    for part in parts_of(built).values():
        assert not set(part.resources) & set(composed)
        composed.update(part.resources)
        direct.update(part.direct)
    handed = [p for p in built.pools if children.handed(fed, p)]
    expected = compose.pool_resources(fed, handed, built.external, built.ca, case.observed)
    composed_gatherers = {n: c for n, c in composed.items() if n.startswith("supernode-keys-gatherer-")}
    composed = {n: c for n, c in composed.items() if n not in composed_gatherers}
    assert composed == {name: c for name, c in expected.items() if c.provider_config != fed.hub}
    # The keys gatherers too, each beside its own cluster's pools.
    assert composed_gatherers == compose.key_gatherers(fed, handed, handed, case.observed)
    assert not direct, "no collection any more"


def test_a_part_carries_its_pools_alone_and_what_only_the_federation_knows():
    _, built = planned(CASES[2])
    parts = federation_clusters(built)
    us, eu = parts["cluster-config-us"], parts["cluster-config-eu"]
    assert (us["apiVersion"], us["kind"]) == ("flower.crossplane.io/v1alpha1", "XFederationCluster")
    spec = us["spec"]
    assert [p["name"] for p in spec["federationSpec"]["supernodes"]["pools"]] == ["gpu"]
    assert spec["retiredKeys"] == {"flower-sites": [DIGEST]}
    assert "retiredKeys" not in eu["spec"]
    assert spec["caCertificate"] == CA  # as the SuperLink's Secret holds it
    assert spec["fleetAddress"] == "flower.example.org:9092"
    assert set(spec["federationSpec"]["superlink"]) <= {"image", "superexecImage", "providerConfigRef"}


def test_nothing_is_given_to_parts_while_the_ca_is_unknown_and_what_they_have_is_kept():
    fed = read.federation(xr(SECURE), {clusters.requirement_key("gpu", "ProviderConfig"): CLUSTERS}, {})
    _, before = planned(CASES[1])
    observed = {name: {**before.direct[name], "status": {}} for name in before.parts}
    waiting = compose.plan(fed, observed, None, None)
    assert waiting.parts == frozenset()
    assert {name: waiting.kept[name]["spec"] for name in before.parts} == {
        name: before.direct[name]["spec"] for name in before.parts
    }


def test_a_cluster_keeps_the_index_its_part_was_given():
    _, before = planned(CASES[3])
    observed = {name: before.direct[name] for name in before.parts}
    # eu no longer pins 7: the index its FederationCluster holds is kept, not the lowest free one.
    _, after = planned(Case("", SECURE, [config("eu"), config("us")], observed))
    assert federation_clusters(after)["cluster-config-eu"]["spec"]["selected"] == [
        {"selector": "gpu", "index": 7, "offset": 14}
    ]


def test_a_cluster_keeps_the_index_a_federation_cluster_of_an_earlier_release_was_given():
    # Earlier releases composed FederationClusters in the Federation itself: it observes them, not groups.
    _, before = planned(CASES[3])
    observed = federation_clusters(before)
    _, after = planned(Case("", SECURE, [config("eu"), config("us")], observed))
    assert federation_clusters(after)["cluster-config-eu"]["spec"]["selected"][0]["index"] == 7


def test_a_cluster_that_leaves_takes_its_part_alone():
    _, before = planned(CASES[1])
    observed = {name: before.direct[name] for name in before.parts}
    _, after = planned(Case("", SECURE, [config("default"), config("us")], observed))
    assert sorted(federation_clusters(after)) == ["cluster-config-us"]
    assert federation_clusters(after)["cluster-config-us"] == federation_clusters(before)["cluster-config-us"]
    # eu's group, of no other cluster here, goes with it: not composed, not kept.
    eu_group = read.group_resource("cluster-config-eu")
    assert eu_group != read.group_resource("cluster-config-us")
    assert eu_group not in after.direct
    assert eu_group not in after.kept


@dataclasses.dataclass(frozen=True)
class BadPart:
    reason: str
    change: dict[str, Any]
    field: str
    namespace: str | None = None  # a namespaced FederationCluster's own namespace


BAD_PARTS = [
    BadPart(
        "a selector the carried spec does not have", {"selected": [{"selector": "cpu", "index": 0}]}, "spec.selected"
    ),
    BadPart("no selector at all", {"selected": []}, "spec.selected"),
    BadPart("an unknown field", {"extra": 1}, "spec.extra"),
    BadPart(
        "a carried spec the Federation would refuse",
        {"federationSpec": {"mode": "Sideways"}},
        "spec.federationSpec.mode",
    ),
    BadPart(
        "a namespaced part speaking for a Federation of another namespace (another tenant's objects' names)",
        {"namespace": "team-b", "bound": True},
        "spec.namespace",
        namespace="team-a",
    ),
    BadPart(
        "a namespaced part not bound to its namespace, as no namespaced Federation writes it",
        {"namespace": "team-a", "bound": False},
        "spec.bound",
        namespace="team-a",
    ),
]


@pytest.mark.parametrize("case", BAD_PARTS, ids=lambda c: c.reason)
def test_a_part_that_is_not_what_a_federation_writes_is_refused_naming_the_field(case: BadPart):
    _, built = planned(CASES[0])
    eu = federation_clusters(built)["cluster-config-eu"]["spec"]
    given = {**eu, **case.change}
    if "federationSpec" in case.change:
        given["federationSpec"] = {**eu["federationSpec"], **case.change["federationSpec"]}
    metadata = {"name": "x", "namespace": case.namespace} if case.namespace else {"name": "x"}
    with pytest.raises(SpecError) as err:
        read.cluster({"metadata": metadata, "spec": given})
    assert err.value.errors[0][0].startswith(case.field), err.value.errors


def test_a_namespaced_part_of_its_own_namespaces_federation_is_read():
    _, built = planned(CASES[0])
    given = {**federation_clusters(built)["cluster-config-eu"]["spec"], "namespace": "team-a", "bound": True}
    part = read.cluster({"metadata": {"name": "x", "namespace": "team-a"}, "spec": given})
    assert (part.namespace, part.bound, part.namespaced) == ("team-a", True, True)
