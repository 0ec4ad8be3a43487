"""FederationClusterGroups (function/composition/groups.py): the fan-out between a Federation and its clusters.

A group writes once what its clusters share; each FederationCluster it
composes must be exactly what the Federation would have written, a held
cluster's must stay as it is, and its status must roll up theirs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api.refusals import SpecError
from function.composition import groups, outcome
from function.federation import read
from function.serving import fn, wire

GPU = {"name": "gpu", "clusterSelector": {"matchLabels": {"site": "yes"}}, "replicas": 2}
CPU = {"name": "cpu", "clusterSelector": {"matchLabels": {"cpu": "yes"}}, "replicas": 1}
CARRIED = {
    "version": "1.41.0",
    "mode": "StatefulSet",
    "isolationMode": "subprocess",
    "supernodes": {"pools": [GPU, CPU]},
}
SPEC: dict[str, Any] = {
    "federation": "fleet",
    "namespace": "team-a",
    "bound": True,
    "federationSpec": CARRIED,
    "totalReplicas": 6,
    "fleetAddress": "flower.example.org:9092",
    "clusters": [
        {
            "name": "cluster-config-eu",
            "providerConfigRef": {"name": "eu", "kind": "ProviderConfig"},
            "annotations": {"flower.flwr.ai/replicas": "3"},
            "selected": [{"selector": "gpu", "index": 0, "offset": 0}],
        },
        {
            "name": "cluster-config-us",
            "providerConfigRef": {"name": "us", "kind": "ProviderConfig"},
            "selected": [{"selector": "gpu", "index": 1, "offset": 2}, {"selector": "cpu", "index": 0}],
            "retiredKeys": {"team-a": ["0123456789abcdef"]},
        },
    ],
}


def group(spec: dict[str, Any] = SPEC, namespace: str | None = None, kind: str = "XFederationClusterGroup"):
    metadata = {"name": "cluster-group-07", "generation": 3}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": read.CLUSTER_API, "kind": kind, "metadata": metadata, "spec": spec}


def ready_part(*pools: tuple[str, int, int], ready: bool = True) -> dict[str, Any]:
    """An observed FederationCluster reporting pools (name, desired, ready)."""
    entries = [
        {"name": n, "kind": "StatefulSet", "desired": d, "ready": r, "namespace": "team-a", "providerConfig": "eu"}
        for n, d, r in pools
    ]
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"apiVersion": read.CLUSTER_API, "kind": "XFederationCluster", "spec": {"federation": "fleet"},
            "status": {"conditions": [condition], "pools": entries}}  # fmt: skip


def test_each_federation_cluster_is_the_shared_fields_and_its_entry():
    parts = groups.expand(groups.read(group()))
    eu, us = parts["cluster-config-eu"], parts["cluster-config-us"]
    assert eu == {
        "federation": "fleet",
        "namespace": "team-a",
        "bound": True,
        "providerConfigRef": {"name": "eu", "kind": "ProviderConfig"},
        "annotations": {"flower.flwr.ai/replicas": "3"},
        "federationSpec": {**CARRIED, "supernodes": {"pools": [GPU]}},
        "selected": [{"selector": "gpu", "index": 0, "offset": 0}],
        "totalReplicas": 6,
        "fleetAddress": "flower.example.org:9092",
    }
    # us has both pools, and the keys retired there; neither reaches eu.
    assert [p["name"] for p in us["federationSpec"]["supernodes"]["pools"]] == ["gpu", "cpu"]
    assert us["retiredKeys"] == {"team-a": ["0123456789abcdef"]}
    # Each is what a FederationCluster's own call reads.
    for name, part in parts.items():
        assert read.cluster({"metadata": {"name": name}, "spec": part}).part is not None


@dataclasses.dataclass(frozen=True)
class KeptCase:
    reason: str
    kept: list[str]
    observed: dict[str, Any]
    want: set[str]


KEPT_CASES = [
    KeptCase("nothing held: the entries alone", [], {}, {"cluster-config-eu", "cluster-config-us"}),
    KeptCase(
        "a held cluster's FederationCluster stays as observed",
        ["cluster-config-lab"],
        {"cluster-config-lab": ready_part(("gpu-lab", 2, 2))},
        {"cluster-config-eu", "cluster-config-us", "cluster-config-lab"},
    ),
    KeptCase(
        "a held cluster with no FederationCluster yet gets none",
        ["cluster-config-lab"],
        {},
        {"cluster-config-eu", "cluster-config-us"},
    ),
]


@pytest.mark.parametrize("case", KEPT_CASES, ids=lambda c: c.reason)
def test_held_clusters_keep_their_federation_cluster_as_it_is(case: KeptCase):
    answer = groups.compose(group({**SPEC, "kept": case.kept}), case.observed)
    assert set(answer.desired) == case.want
    for name in case.kept:
        if name in case.observed:
            assert answer.desired[name]["spec"] == case.observed[name]["spec"]


def test_status_rolls_up_the_federation_clusters_reports():
    observed = {
        "cluster-config-eu": ready_part(("gpu-eu", 3, 3)),
        "cluster-config-us": ready_part(("gpu-us", 2, 1), ("cpu-us", 1, 0), ready=False),
    }
    answer = groups.compose(group(), observed)
    status = answer.status.wire()
    assert (status["clusters"], status["readyClusters"], status["supernodes"]) == (2, 1, "4/6")
    assert status["observedGeneration"] == 3
    assert [p["name"] for p in status["pools"]] == ["gpu-eu", "gpu-us", "cpu-us"]
    assert answer.ready == {"cluster-config-eu": True, "cluster-config-us": False}
    condition = answer.condition
    assert (condition.status, condition.message) == (
        "False",
        "1/2 clusters ready, 4/6 SuperNodes ready; waiting for cluster-config-us",
    )


def test_a_namespaced_group_composes_namespaced_federation_clusters():
    answer = groups.compose(group(namespace="team-a", kind="FederationClusterGroup"), {})
    assert {p["kind"] for p in answer.desired.values()} == {"FederationCluster"}
    answer = groups.compose(group(), {})
    assert {p["kind"] for p in answer.desired.values()} == {"XFederationCluster"}


@dataclasses.dataclass(frozen=True)
class BadGroup:
    reason: str
    change: dict[str, Any]
    field: str
    namespace: str | None = None


BAD_GROUPS = [
    BadGroup("an unknown field", {"extra": 1}, "spec.extra"),
    BadGroup("no Fleet address", {"fleetAddress": ""}, "spec.fleetAddress"),
    BadGroup(
        "a cluster with no selector pool",
        {"clusters": [{"name": "x", "providerConfigRef": {"name": "x"}, "selected": []}]},
        "spec.clusters[0].selected",
    ),
    BadGroup(
        "a namespaced group speaking for a Federation of another namespace (another tenant's objects' names)",
        {"namespace": "team-b"},
        "spec.namespace",
        namespace="team-a",
    ),
    BadGroup("a namespaced group not bound to its namespace", {"bound": False}, "spec.bound", namespace="team-a"),
    BadGroup(
        "a shard the SuperLink does not mount (two digits, as its volume names them)",
        {"authorizedKeys": {"shard": "7", "providerConfigRef": {"name": "hub"}}},
        "spec.authorizedKeys.shard",
    ),
    BadGroup(
        "a shard with no cluster to list it in",
        {"authorizedKeys": {"shard": "07"}},
        "spec.authorizedKeys.providerConfigRef",
    ),
]


@pytest.mark.parametrize("case", BAD_GROUPS, ids=lambda c: c.reason)
def test_a_group_that_is_not_what_a_federation_writes_is_refused_naming_the_field(case: BadGroup):
    kind = "FederationClusterGroup" if case.namespace else "XFederationClusterGroup"
    xr = group({**SPEC, **case.change}, case.namespace, kind)
    with pytest.raises(SpecError) as err:
        groups.read(xr)
    assert err.value.errors[0][0].startswith(case.field), err.value.errors
    # Through the function: a fatal result naming it, and nothing composed.
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    rsp = fn.run(req)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1 and fatal[0].startswith(f"invalid FederationClusterGroup: {case.field}"), fatal
    assert not rsp.desired.resources


def test_the_function_answers_a_group_without_the_platform_policy():
    # A group composes FederationClusters alone; each is judged under the policy by its own call.
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(group())
    req.input.update({"apiVersion": "flower.fn.crossplane.io/v1alpha1", "kind": "Policy", "environmentConfig": "x"})
    rsp = fn.run(req)
    assert not rsp.requirements.resources
    assert sorted(rsp.desired.resources) == ["cluster-config-eu", "cluster-config-us"]
    assert wire.to_dict(rsp.desired.composite.resource)["status"]["clusters"] == 2
    assert rsp.meta.ttl.ToTimedelta() == outcome.GROUP_TTL


def test_a_cluster_always_falls_in_the_same_group():
    names = [f"cluster-config-site-{i:04d}" for i in range(1000)]
    shares = [read.group_resource(n) for n in names]
    assert shares == [read.group_resource(n) for n in names]
    assert len(set(shares)) == read.GROUPS
    # Not by position: a name's share does not depend on which others there are.
    assert read.group_resource("cluster-config-site-0500") == shares[500]


def awaiting(part: dict[str, Any], *, keys: Any) -> dict[str, Any]:
    """part, reporting keys SuperNodes whose keys its gatherer has not listed yet."""
    return {**part, "status": {**part["status"], "keysAwaited": keys}}


EU_READY, US_READY = ready_part(("gpu-eu", 3, 3)), ready_part(("gpu-us", 2, 2), ("cpu-us", 1, 1))


@pytest.mark.parametrize(
    ("observed", "ttl", "reason"),
    [
        ({}, outcome.GROUP_TTL, "nothing observed yet: its clusters start"),
        ({"cluster-config-eu": EU_READY}, outcome.GROUP_TTL, "one cluster not made yet"),
        (
            {"cluster-config-eu": EU_READY, "cluster-config-us": ready_part(("gpu-us", 2, 1), ready=False)},
            outcome.GROUP_TTL,
            "one cluster not Ready",
        ),
        (
            {"cluster-config-eu": EU_READY, "cluster-config-us": US_READY},
            outcome.SETTLED_GROUP_TTL,
            "every cluster Ready, without node authentication (no keys reported awaited)",
        ),
        (
            {"cluster-config-eu": awaiting(EU_READY, keys=0), "cluster-config-us": awaiting(US_READY, keys=0)},
            outcome.SETTLED_GROUP_TTL,
            "every cluster Ready with every key listed",
        ),
        (
            {"cluster-config-eu": awaiting(EU_READY, keys=0), "cluster-config-us": awaiting(US_READY, keys=2)},
            outcome.GROUP_TTL,
            "Ready, but two keys not listed yet: their report's event may be dropped",
        ),
        (
            {"cluster-config-eu": awaiting(EU_READY, keys="2"), "cluster-config-us": US_READY},
            outcome.GROUP_TTL,
            "a count that is not one: taken as keys awaited",
        ),
        (
            {"cluster-config-eu": awaiting(EU_READY, keys=True), "cluster-config-us": US_READY},
            outcome.GROUP_TTL,
            "a boolean is not a count either",
        ),
    ],
)
def test_a_group_looks_each_minute_until_its_clusters_are_ready_with_their_keys(observed, ttl, reason):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(group())
    for name, part in observed.items():
        req.observed.resources[name].resource.update(part)
    rsp = fn.run(req)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL], reason
    assert rsp.meta.ttl.ToTimedelta() == ttl, reason
