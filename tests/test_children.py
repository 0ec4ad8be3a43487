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
from support.helpers import BASE, pool, spec, xr

LABELS = {"flower.flwr.ai/federation": "fleet"}
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
TLS_SECRET = {"data": {"ca.crt": CA}}
DIGEST = "0123456789abcdef"


def selected(s: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return pool(
        spec(s, superlink__externalAddress="flower.example.org"), clusterSelector={"matchLabels": LABELS}, **fields
    )


def secure(s: dict[str, Any]) -> dict[str, Any]:
    out = spec(
        s,
        version="1.41.0",
        superlink={"externalAddress": "flower.example.org"},
        tls={"secretName": "superlink-tls"},
        nodeAuthentication={"enabled": True},
    )
    del out["supernodes"]["image"]
    return out


def config(name: str, kind: str = "ProviderConfig", **annotations: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "labels": dict(LABELS), "annotations": annotations}}


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    spec: dict[str, Any]
    configs: list[dict[str, Any]]
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)


PLAIN = selected(spec(BASE, supernodes__pools__0__name="gpu"))
SECURE = secure(
    selected(
        spec(
            BASE,
            supernodes__pools__0__name="gpu",
            supernodes__pools__0__replicas=2,
            networkPolicy={"enabled": True, "fleetCIDRs": ["203.0.113.0/24"]},
        ),
        namespace="flower-sites",
        createNamespace=True,
        nodeConfig={"site": "{cluster}", "id": "{clusterIndex}", "node": "{globalIndex}", "of": "{totalReplicas}"},
    )
)
CLUSTERS = [config("default"), config("eu", **{"flower.flwr.ai/replicas": "1"}), config("us")]
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


def flat_and_parts(case: Case) -> tuple[compose.Plan, dict[str, compose.Plan], dict[str, dict[str, Any]]]:
    fed = read.federation(
        xr(case.spec), {clusters.requirement_key("gpu", "ProviderConfig"): case.configs}, case.observed
    )
    flat = compose.plan(fed, case.observed, None, TLS_SECRET)
    specs = children.specs(fed, flat, case.observed)
    parts = {name: compose.plan(read.cluster({"metadata": {"name": name}, "spec": s})) for name, s in specs.items()}
    return flat, parts, specs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason)
def test_each_remote_cluster_is_composed_by_its_part_as_by_the_federation(case: Case):
    flat, parts, _ = flat_and_parts(case)
    hub = read.federation(xr(case.spec)).hub
    assert sorted(parts) == ["cluster-config-eu", "cluster-config-us"]
    composed: dict[str, Any] = {}
    direct: dict[str, Any] = {}
    for part in parts.values():
        assert not set(part.resources) & set(composed)
        composed.update(part.resources)
        direct.update(part.direct)
    elsewhere = {name: c for name, c in flat.resources.items() if c.provider_config != hub}
    assert composed == elsewhere
    assert direct == {name: d for name, d in flat.direct.items() if name in direct}
    assert len(direct) == len([n for n in flat.direct if not n.endswith(("-default-team-a", "-default-flower-sites"))])


def test_a_part_carries_its_pools_alone_and_what_only_the_federation_knows():
    _, _, specs = flat_and_parts(CASES[2])
    us = specs["cluster-config-us"]
    assert [p["name"] for p in us["federationSpec"]["supernodes"]["pools"]] == ["gpu"]
    assert us["retiredKeys"] == {"flower-sites": [DIGEST]}
    assert "retiredKeys" not in specs["cluster-config-eu"] or specs["cluster-config-eu"]["retiredKeys"] == {}
    assert us["caCertificate"] == CA  # as the SuperLink's Secret holds it
    assert us["fleetAddress"] == "flower.example.org:9092"
    assert set(us["federationSpec"]["superlink"]) <= {"image", "superexecImage", "providerConfigRef"}


def test_nothing_is_given_to_parts_while_the_ca_is_unknown():
    fed = read.federation(xr(SECURE), {clusters.requirement_key("gpu", "ProviderConfig"): CLUSTERS}, {})
    flat = compose.plan(fed, {}, None, None)
    assert children.specs(fed, flat, {}) == {}


@dataclasses.dataclass(frozen=True)
class BadPart:
    reason: str
    change: dict[str, Any]
    field: str


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
]


@pytest.mark.parametrize("case", BAD_PARTS, ids=lambda c: c.reason)
def test_a_part_that_is_not_what_a_federation_writes_is_refused_naming_the_field(case: BadPart):
    _, _, specs = flat_and_parts(CASES[0])
    given = {**specs["cluster-config-eu"], **case.change}
    if "federationSpec" in case.change:
        given["federationSpec"] = {**specs["cluster-config-eu"]["federationSpec"], **case.change["federationSpec"]}
    with pytest.raises(SpecError) as err:
        read.cluster({"metadata": {"name": "x"}, "spec": given})
    assert err.value.errors[0][0].startswith(case.field), err.value.errors
