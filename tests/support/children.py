"""A Federation whose pools follow clusters by label: planned, and the FederationClusters it composes.

Shared by the tests of FederationClusters (test_children.py) and of the keys they carry (test_key_shards.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from function.composition import compose, groups
from function.federation import read, value
from function.topology import clusters
from support.helpers import BASE, pool, spec, xr

LABELS = {"flower.flwr.ai/federation": "fleet"}
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
TLS_SECRET = {"data": {"ca.crt": CA}}


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


def planned(case: Case) -> tuple[value.Federation, compose.Plan]:
    fed = read.federation(
        xr(case.spec), {clusters.requirement_key("gpu", "ProviderConfig"): case.configs}, case.observed
    )
    return fed, compose.plan(fed, case.observed, None, TLS_SECRET)


def federation_clusters(built: compose.Plan, observed: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each FederationCluster the Federation composes through its groups, by composition resource name."""
    out: dict[str, dict[str, Any]] = {}
    for name in built.parts:
        desired = groups.compose({"metadata": {"name": name}, **built.direct[name]}, observed or {}).desired
        out.update({k: v for k, v in desired.items() if v["kind"] in read.CLUSTER_KINDS})
    return out
