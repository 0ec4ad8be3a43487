"""Remote clusters' keys reach the SuperLink through their FederationCluster and its group, never the Federation.

Each FederationCluster reads its own gatherers' lists alone and reports
the keys it checked; its group lists its clusters' reports in a shard beside
the SuperLink; the Federation's own list names the shards there should be;
the SuperLink mounts every shard a group may write. The registrar's side (a
shard named but missing unregisters no one) is in tests/programs/test_identity.py and,
with real Flower, tests/real/test_real_node_auth.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from function.builders import identity, published_keys, tls
from function.composition import compose, groups, outcome, resource_names, status
from function.federation import read
from function.topology import clusters
from support.children import CLUSTERS, SECURE, TLS_SECRET, Case, federation_clusters, planned, selected
from support.helpers import ANY_NAMESPACE_POLICY, BASE, spec, xr
from support.published_keys import (
    AUTH,
    FED,
    KEY,
    NAMESPACE,
    OTHER_KEY,
    gathered_list,
    observed_list,
    publication,
    sts_ready,
)

POOLS = "flower-sites"


def federation() -> tuple[Any, compose.Plan]:
    return planned(Case("secure", SECURE, CLUSTERS))


def part_of(name: str, composite: dict[str, Any]) -> Any:
    return read.cluster({"metadata": {"name": name}, **composite})


def observed_of(part: Any, *keys: str, pool: str | None = None) -> dict[str, dict[str, Any]]:
    """What a FederationCluster's call observes: its gatherer's list, of keys published in its cluster.

    pool: the publishing pods' pool; the cluster's own by default. Its gatherer lists its cluster's pools alone.
    """
    cluster = part.part.cluster.name
    published = [publication(k, namespace=POOLS, pool=pool or f"gpu-{cluster}", uid=f"u{i}", holder=f"h-{i}")
                 for i, k in enumerate(keys)]  # fmt: skip
    return observed_list(gathered_list(*published, namespace=POOLS, pools=(f"gpu-{cluster}",)), cluster=cluster)


def reported(name: str, composite: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """A FederationCluster's call: the keys it reports in its status."""
    part = part_of(name, composite)
    report = status.report(part, compose.plan(part, observed), {}, 1)
    return report.status.wire().get("publishedKeys")


def test_a_cluster_reports_the_keys_its_own_gatherer_listed_alone():
    _, built = federation()
    parts = federation_clusters(built)
    eu, us = parts["cluster-config-eu"], parts["cluster-config-us"]
    eu_part, us_part = part_of("cluster-config-eu", eu), part_of("cluster-config-us", us)
    assert reported("cluster-config-eu", eu, observed_of(eu_part, KEY)) == [
        f"{KEY} eu/{POOLS}/PersistentVolumeClaim/h-0 -"
    ]
    assert reported("cluster-config-us", us, observed_of(us_part, OTHER_KEY))[0].startswith(f"{OTHER_KEY} us/{POOLS}/")
    # A key of another cluster's pool, published where eu's gatherer looks (two ProviderConfigs, one cluster).
    assert reported("cluster-config-eu", eu, observed_of(eu_part, OTHER_KEY, pool="gpu-us")) == []
    # Another cluster's list, whatever a call observes: not read.
    assert reported("cluster-config-eu", eu, observed_of(us_part, OTHER_KEY)) == []


def test_a_clusters_gatherer_lists_its_own_pools_keys_alone():
    _, built = federation()
    for name, composite in federation_clusters(built).items():
        part = part_of(name, composite)
        cluster = part.part.cluster.name
        workload = compose.plan(part).resources[resource_names.key_gatherer_resources(cluster, POOLS)[-1]]
        args = workload.manifest["spec"]["template"]["spec"]["containers"][0]["args"]
        assert [a for a in args if a.startswith("--pool=")] == [f"--pool=gpu-{cluster}"], name
        assert workload.provider_config.name == composite["spec"]["providerConfigRef"]["name"], name


def test_two_provider_configs_naming_one_cluster_each_get_a_publisher_role_of_their_own():
    # A test fleet, or a cluster reached two ways: with one Role name, each FederationCluster's Object would
    # apply its own claims over the other's, so the other's pods could not read theirs until the next poll.
    _, built = federation()
    roles, bindings = {}, {}
    for name, composite in federation_clusters(built).items():
        part = part_of(name, composite)
        cluster = part.part.cluster.name
        resources = compose.plan(part).resources
        roles[cluster] = resources[resource_names.key_role_resource(cluster, POOLS)].manifest
        bindings[cluster] = resources[resource_names.key_binding_resource(cluster, POOLS)].manifest
        assert not set(resource_names.legacy_key_publisher_resources(cluster, POOLS)) & set(resources), name
    assert sorted(roles) == ["eu", "us"]
    assert roles["eu"]["metadata"]["name"] != roles["us"]["metadata"]["name"]
    for cluster, role in roles.items():
        assert bindings[cluster]["roleRef"]["name"] == bindings[cluster]["metadata"]["name"] == role["metadata"]["name"]
        (claims,) = [r["resourceNames"] for r in role["rules"] if "resourceNames" in r]
        assert claims and all(f"-gpu-{cluster}-" in c for c in claims), (cluster, claims)


def test_without_node_authentication_a_cluster_reports_nothing():
    plain = spec(selected(spec(BASE, supernodes__pools__0__name="gpu")), tls={"secretName": "superlink-tls"})
    _, built = planned(Case("plain", plain, CLUSTERS))
    for name, composite in federation_clusters(built).items():
        part = part_of(name, composite)
        written = status.report(part, compose.plan(part), {}, 1).status.wire()
        assert "publishedKeys" not in written and "keysAwaited" not in written, name


@pytest.mark.parametrize(
    ("cluster", "keys", "awaited", "reason"),
    [
        ("cluster-config-eu", [], 1, "its one SuperNode's key not listed yet"),
        ("cluster-config-eu", [KEY], 0, "every key listed: its group may wait longer"),
        ("cluster-config-us", [OTHER_KEY], 1, "one of its two SuperNodes' keys listed"),
    ],
)
def test_a_cluster_reports_how_many_keys_it_awaits_for_its_group(cluster, keys, awaited, reason):
    _, built = federation()
    part = part_of(cluster, federation_clusters(built)[cluster])
    observed = settled(part, observed_of(part, *keys))
    assert status.report(part, compose.plan(part, observed), observed, 1).status.wire()["keysAwaited"] == awaited, (
        reason
    )


def settled(part: Any, observed: dict[str, dict[str, Any]], *, short: int = 0) -> dict[str, dict[str, Any]]:
    """observed, with every other Object the cluster composes there, its pools' pods ready but short of them."""
    out = dict(observed)
    for name, composed in compose.plan(part, observed).resources.items():
        manifest = composed.manifest
        live = {**manifest, "metadata": {**manifest["metadata"], "generation": 1}}
        if manifest["kind"] == "StatefulSet":
            replicas = manifest["spec"].get("replicas", 1)
            live |= {"spec": {"replicas": replicas}, "status": {"observedGeneration": 1, **sts_ready(replicas)}}
            live["status"]["readyReplicas"] -= short
        out.setdefault(name, {"status": {"atProvider": {"manifest": live}}})
    return out


@pytest.mark.parametrize(
    ("cluster", "keys", "short", "ttl", "reason"),
    [
        ("cluster-config-eu", [], 0, outcome.KEYS_AWAITED_TTL, "its one SuperNode's key not seen yet"),
        ("cluster-config-eu", [KEY], 0, outcome.FEDERATION_CLUSTER_TTL, "every key there: watches tell it the rest"),
        ("cluster-config-us", [OTHER_KEY], 0, outcome.KEYS_AWAITED_TTL, "one of its two SuperNodes' keys missing"),
        ("cluster-config-eu", [KEY], 1, outcome.STARTING_CLUSTER_TTL, "every key there, but its pod not ready yet"),
        ("cluster-config-us", [], 1, outcome.STARTING_CLUSTER_TTL, "a pod not ready and keys missing: the sooner"),
    ],
)
def test_a_cluster_not_ready_or_awaiting_keys_is_composed_again_sooner(cluster, keys, short, ttl, reason):
    # Crossplane's circuit breaker may drop the event of a key's or a workload's Object: the TTL is what is left.
    _, built = federation()
    composite = federation_clusters(built)[cluster]
    part = part_of(cluster, composite)
    observed = settled(part, observed_of(part, *keys), short=short)
    decided = outcome.decide({"metadata": {"name": cluster}, **composite}, observed, {}, ANY_NAMESPACE_POLICY)
    assert decided.refusal is None, decided.refusal
    assert decided.ttl == ttl, reason


def test_a_cluster_with_nothing_observed_yet_is_composed_again_within_the_providers_first_reads():
    _, built = federation()
    for name, composite in federation_clusters(built).items():
        decided = outcome.decide({"metadata": {"name": name}, **composite}, {}, {}, ANY_NAMESPACE_POLICY)
        assert decided.ttl == outcome.STARTING_CLUSTER_TTL, name


def test_without_node_authentication_a_cluster_awaits_no_keys():
    plain = spec(selected(spec(BASE, supernodes__pools__0__name="gpu")), tls={"secretName": "superlink-tls"})
    _, built = planned(Case("plain", plain, CLUSTERS))
    for name, composite in federation_clusters(built).items():
        observed = settled(part_of(name, composite), {})
        decided = outcome.decide({"metadata": {"name": name}, **composite}, observed, {}, ANY_NAMESPACE_POLICY)
        assert decided.ttl == outcome.FEDERATION_CLUSTER_TTL, name


def test_a_group_lists_its_clusters_reports_in_its_shard_beside_the_superlink():
    _, built = federation()
    group_name, group = next((n, built.direct[n]) for n in sorted(built.parts))
    assert group["spec"]["authorizedKeys"] == {
        "shard": published_keys.shard_id(group_name),
        "providerConfigRef": {"name": "default", "kind": "ClusterProviderConfig"},
    }
    composites = groups.compose({"metadata": {"name": group_name}, **group}, {}).desired
    clusters = {n: c for n, c in composites.items() if c["kind"] in read.CLUSTER_KINDS}
    keys = iter([KEY, OTHER_KEY])
    observed = {
        n: {**c, "status": {"publishedKeys": reported(n, c, observed_of(part_of(n, c), next(keys)))}}
        for n, c in clusters.items()
    }
    answer = groups.compose({"metadata": {"name": group_name}, **group}, observed)
    shard = answer.desired[resource_names.AUTHORIZED_KEYS]
    assert answer.ready[resource_names.AUTHORIZED_KEYS]
    assert shard["spec"]["providerConfigRef"] == {"name": "default"}
    manifest = shard["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["name"] == identity.shard_name(FED, published_keys.shard_id(group_name))
    assert manifest["metadata"]["namespace"] == NAMESPACE
    listed = sorted(line for c in observed.values() for line in c["status"]["publishedKeys"])
    assert manifest["data"] == {identity.AUTHORIZED_KEYS_FILE: "".join(f"{line}\n" for line in listed)}
    # Status counts clusters, not the shard.
    assert answer.status.clusters == len(clusters)


HOLDER = f"eu/{POOLS}/PersistentVolumeClaim/supernode-identity-fed-default-0"


@pytest.mark.parametrize(
    ("lines", "expected", "reason"),
    [
        ([f"{KEY} {HOLDER} -"], [f"{KEY} {HOLDER} -"], "a key of a holder in the cluster, no node ID yet"),
        ([f"{KEY} {HOLDER} 42"], [f"{KEY} {HOLDER} 42"], "with the node ID it registered as"),
        ([f"{KEY} us/{POOLS}/Pod/x -"], [], "a holder in another cluster: not this cluster's to report"),
        ([f"ssh-rsa AAAA {HOLDER} -"], [], "not a P-384 key"),
        ([f"{KEY} eu/{POOLS}/Secret/x -"], [], "a holder that is neither a pod nor a claim"),
        ([f"{KEY} {HOLDER} -\nssh-rsa AAAA {HOLDER} -"], [], "two lines in one: a line break smuggled in"),
        ([f"{KEY} {HOLDER} -\n"], [], "a line with its own line break"),
        ([f"{KEY} {HOLDER} 4x"], [], "a node ID that is not a number"),
        ("not a list", [], "not a list at all"),
        ([{"key": KEY}], [], "not a line"),
    ],
)
def test_a_group_lists_only_well_formed_lines_of_its_clusters_own_holders(lines, expected, reason):
    assert published_keys.reported_lines("eu", lines) == expected, reason


def test_a_shard_lists_each_key_once_sorted():
    lines = [f"{OTHER_KEY} {HOLDER} -", f"{KEY} {HOLDER} 42", f"{KEY} us/{POOLS}/Pod/x -"]
    text = published_keys.shard(FED, NAMESPACE, {}, "07", lines)["data"][identity.AUTHORIZED_KEYS_FILE]
    assert text == f"{KEY} {HOLDER} 42\n{OTHER_KEY} {HOLDER} -\n"


def test_the_federation_names_its_groups_shards_and_the_superlink_mounts_every_one():
    _, built = federation()
    listing = built.resources[resource_names.AUTHORIZED_KEYS].manifest["data"]
    expected = sorted(identity.shard_file(published_keys.shard_id(g)) for g in built.parts)
    assert listing[published_keys.SHARDS_FIELD].split() == expected
    assert listing[identity.AUTHORIZED_KEYS_FILE] == "", "remote clusters' keys are not the Federation's to list"
    pod = built.resources[resource_names.SUPERLINK].manifest["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == identity.AUTHORIZED_KEYS_VOLUME)
    sources = volume["projected"]["sources"]
    assert sources[0] == {"configMap": {"name": identity.authorized_keys_name(FED), "optional": True}}
    shards = [s["configMap"] for s in sources[1:]]
    assert [s["name"] for s in shards] == [identity.shard_name(FED, f"{n:02d}") for n in range(identity.SHARDS)]
    assert all(s["optional"] for s in shards)
    assert [s["items"][0]["path"] for s in shards] == [identity.shard_file(f"{n:02d}") for n in range(identity.SHARDS)]


def test_a_federation_without_selector_pools_keeps_its_one_list():
    built = compose.plan(read.federation(xr(AUTH)))
    listing = built.resources[resource_names.AUTHORIZED_KEYS].manifest["data"]
    assert published_keys.SHARDS_FIELD not in listing
    pod = built.resources[resource_names.SUPERLINK].manifest["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == identity.AUTHORIZED_KEYS_VOLUME)
    assert volume == {
        "name": identity.AUTHORIZED_KEYS_VOLUME,
        "configMap": {"name": identity.authorized_keys_name(FED), "optional": True},
    }


def test_the_federation_never_lists_a_remote_clusters_keys():
    """Its group's shard carries them: a remote cluster's list is its FederationCluster's, even where observed."""
    fed, built = federation()
    eu = part_of("cluster-config-eu", federation_clusters(built)["cluster-config-eu"])
    plan = compose.plan(fed, observed_of(eu, KEY), None, TLS_SECRET)
    assert plan.resources[resource_names.AUTHORIZED_KEYS].manifest["data"][identity.AUTHORIZED_KEYS_FILE] == ""


def test_a_cluster_keeps_reporting_its_keys_until_its_list_is_written():
    """Its report is what its group lists: a list not observed yet (a new Object) takes no key away."""
    _, built = federation()
    composite = federation_clusters(built)["cluster-config-eu"]
    eu = part_of("cluster-config-eu", composite)
    lines = reported("cluster-config-eu", composite, observed_of(eu, KEY))
    xr = {"metadata": {"name": "cluster-config-eu"}, **composite, "status": {"publishedKeys": lines}}
    decided = outcome.decide(xr, {}, {}, ANY_NAMESPACE_POLICY)
    assert decided.status["publishedKeys"] == lines
    written_empty = observed_of(eu)
    assert outcome.decide(xr, written_empty, {}, ANY_NAMESPACE_POLICY).status["publishedKeys"] == []


@pytest.mark.parametrize(
    ("secrets", "ttl", "reason"),
    [
        ([], outcome.HELD_TTL, "its pools wait for the CA to copy, which no watch tells of: it looks every 10 s"),
        ([TLS_SECRET], outcome.FEDERATION_TTL, "nothing waits: watches tell it the rest, and the minute the others"),
    ],
)
def test_a_federation_whose_pools_wait_looks_again_soon(secrets, ttl, reason):
    # The events that would tell of the CA come with the Federation's first Objects, when
    # Crossplane's circuit breaker drops most of them: the TTL is what is left.
    required = {clusters.requirement_key("gpu", "ProviderConfig"): CLUSTERS, tls.REQUIREMENT: secrets}
    decided = outcome.decide(xr(SECURE), {}, required, ANY_NAMESPACE_POLICY)
    assert decided.refusal is None, decided.refusal
    assert decided.ttl == ttl, reason
