"""Clusters provider-kubernetes cannot reach (function/composition/reachability.py), said on the Federation.

A spoke whose API server is down, or whose credentials were rotated away,
leaves its Objects as last seen, Synced False with the client's words: the
Federation names the cluster and why, keeps its pools' last known state, and
stays Ready unless the SuperLink's own cluster is the one that does not answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from function.composition import groups, outcome, reachability
from function.topology import clusters
from support.children import CLUSTERS, Case, federation_clusters, planned, selected
from support.helpers import BASE, spec, xr

REFUSED = 'cannot get object: Get "https://10.1.2.3:6443/apis/apps/v1/namespaces/x": dial tcp 10.1.2.3:6443: connect: connection refused'  # noqa: E501 - the client's message, whole
UNAUTHORIZED = "cannot observe external resource: cannot get object: Unauthorized"
RBAC = 'cannot get object: statefulsets.apps "x" is forbidden: User "provider" cannot get resource'


@pytest.mark.parametrize(
    ("reason", "message", "why"),
    [
        ("a stopped API server refuses the connection", REFUSED, "Unreachable"),
        ("a partition times out", "cannot get object: context deadline exceeded", "Unreachable"),
        ("a name that no longer resolves", "dial tcp: lookup spoke.example: no such host", "Unreachable"),
        ("a rotated token", UNAUTHORIZED, "CredentialsRefused"),
        ("a CA that does not match", "tls: failed to verify certificate: x509: certificate signed by unknown authority",
         "CredentialsRefused"),
        ("the provider's own rights are no cluster's fault", RBAC, None),
        ("an invalid manifest is no cluster's fault", "cannot create object: Service is invalid", None),
    ],
)  # fmt: skip
def test_why_an_object_did_not_sync_is_told_from_the_clients_words(reason: str, message: str, why: str | None):
    assert reachability.classify(message) == why, reason


HUB_AND_SPOKE = spec(
    BASE, supernodes__pools__0__providerConfigRef={"name": "spoke"}, superlink__externalAddress="fleet.example.com:443"
)


def failing(message: str) -> dict[str, Any]:
    """An observed Object provider-kubernetes could not sync, its live object as last seen."""
    conditions = [{"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
                  {"type": "Ready", "status": "True", "reason": "Available"}]  # fmt: skip
    return {"status": {"conditions": conditions, "atProvider": {"manifest": {}}}}


def decided(observed: dict[str, Any]) -> outcome.Outcome:
    out = outcome.decide(xr(HUB_AND_SPOKE), observed, {}, None)
    assert out.refusal is None, out.refusal
    return out


def condition(out: outcome.Outcome) -> tuple[str, str, str]:
    (found,) = [c for c in out.conditions if c.typ == "ClustersReachable"]
    return found.status, found.reason or "", found.message or ""


def test_every_cluster_answering_says_so_and_lists_none():
    out = decided({})
    assert condition(out)[:2] == ("True", "Available")
    assert out.status is not None
    assert "unreachableClusters" not in out.status


def test_a_spoke_that_does_not_answer_is_named_with_why_and_the_federation_stays_ready_on_the_rest():
    pool = next(name for name in decided({}).desired if name.startswith("pool-"))
    out = decided({pool: failing(REFUSED)})
    status, reason, message = condition(out)
    assert (status, reason) == ("False", "Unreachable")
    assert "cluster spoke: its API server does not answer" in message
    assert "connection refused" in message
    assert out.status is not None
    assert out.status["unreachableClusters"] == [
        {"providerConfig": "spoke", "reason": "Unreachable", "message": " ".join(REFUSED.split())[:300], "objects": 1}
    ]
    assert out.composite_ready is not False, "the SuperLink's cluster answers: what it has can train"
    assert pool in out.desired, "nothing composed differently: the spoke's Objects stay desired"


def test_credentials_refused_point_at_the_credentials_first():
    names = [n for n in decided({}).desired if n.startswith(("pool-", "serviceaccount-spoke"))]
    out = decided({names[0]: failing(REFUSED), names[1]: failing(UNAUTHORIZED)})
    status, reason, message = condition(out)
    assert (status, reason) == ("False", "CredentialsRefused")
    assert "its credentials are refused (2 Object(s) not synced): " in message
    assert "Unauthorized" in message


def test_the_superlinks_own_cluster_not_answering_makes_the_federation_unready():
    out = decided({"superlink": failing(REFUSED)})
    assert condition(out)[0] == "False"
    assert "cluster default" in condition(out)[2]
    assert out.composite_ready is False


def test_a_remote_clusters_federation_cluster_reports_it_and_its_group_and_federation_roll_it_up():
    """Through the chain a selector's clusters report by: FederationCluster, its group, the Federation."""
    case = Case("a plain selector", selected(spec(BASE, supernodes__pools__0__name="gpu")), CLUSTERS)
    _, built = planned(case)
    eu = {"metadata": {"name": "cluster-config-eu"}, **federation_clusters(built)["cluster-config-eu"]}
    pool = next(name for name in outcome.decide(eu, {}, {}, None).desired if name.startswith("pool-"))
    part = outcome.decide(eu, {pool: failing(UNAUTHORIZED)}, {}, None)
    assert part.status is not None
    (entry,) = part.status["unreachableClusters"]
    assert (entry["providerConfig"], entry["reason"]) == ("eu", "CredentialsRefused")
    assert condition(part)[:2] == ("False", "CredentialsRefused")
    observed_parts = {"cluster-config-eu": {"status": part.status}}
    rolled = {
        name: groups.compose({"metadata": {"name": name}, **built.direct[name]}, observed_parts).status.wire()
        for name in built.parts
    }
    (group,) = [name for name, status in rolled.items() if status.get("unreachableClusters")]
    assert [u["providerConfig"] for u in rolled[group]["unreachableClusters"]] == ["eu"]
    answers = {clusters.requirement_key("gpu", "ProviderConfig"): case.configs}
    whole = outcome.decide(xr(case.spec), {group: {"status": rolled[group]}}, answers, None)
    assert whole.status is not None
    assert [u["providerConfig"] for u in whole.status["unreachableClusters"]] == ["eu"]
    assert condition(whole)[:2] == ("False", "CredentialsRefused")
    assert whole.composite_ready is not False, "the hub answers"
