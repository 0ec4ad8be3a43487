"""Pools that follow clusters by label (function/topology/clusters.py).

Their names, indices, settings, composition and status.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api import names
from function.api.refusals import SpecError
from function.api.spec import MAX_CLUSTERS, ProviderConfigRef
from function.builders import identity
from function.composition import compose, groups, placing, resource_names
from function.federation import read, value
from function.serving import fn, render, wire
from function.topology import clusters
from support.helpers import ANY_NAMESPACE_POLICY, BASE, pool, spec, xr
from support.peers import EXAMPLES, composition_for, load_all, policy_for

LABELS = {"flower.flwr.ai/federation": "fleet"}
# Pools elsewhere dial a given address, so none waits for an observed one.
SELECTED = pool(
    spec(BASE, supernodes__pools__0__name="gpu", superlink__externalAddress="flower.example.org"),
    clusterSelector={"matchLabels": LABELS},
)
KEY = clusters.requirement_key("gpu", "ProviderConfig")
SERVICE = {
    "superlink-service": {
        "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}}
    }
}


def secure_selected() -> dict[str, Any]:
    """SELECTED at Flower 1.41 with TLS and node authentication (images from spec.version)."""
    s = spec(
        SELECTED,
        version="1.41.0",
        superlink={"externalAddress": "flower.example.org"},
        tls={"secretName": "superlink-tls"},
        nodeAuthentication={"enabled": True},
    )
    del s["supernodes"]["image"]
    return s


def config(name: str, **annotations: str) -> dict[str, Any]:
    """A labelled ProviderConfig as Crossplane lists it."""
    return {
        "apiVersion": clusters.CLUSTER_API,
        "kind": "ProviderConfig",
        "metadata": {"name": name, "labels": dict(LABELS), "annotations": annotations},
    }


def fed(s: dict[str, Any], configs: list[dict[str, Any]] | None, observed: dict[str, Any] | None = None):
    required = {} if configs is None else {KEY: configs}
    return read.federation(xr(s), required, observed or {})


def member_names(f: value.Federation) -> dict[str, int | None]:
    return {m.cluster.name: m.index for m in f.selection.placed}


# -- names ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NameCase:
    reason: str
    cluster: str
    kind: str = "ClusterProviderConfig"
    namespaced: bool = False
    want: str | None = None  # None: only checked for validity and hash


NAME_CASES = [
    NameCase("a DNS label is kept as it is", "spoke-eu", want="gpu-spoke-eu"),
    NameCase("dots are not allowed in labels: replaced, and a hash keeps a.b apart from a-b", "a.b"),
    NameCase("a long name is cut to fit the StatefulSet's 52 characters, with a hash", "x" * 200),
    NameCase(
        "namespaced: a ClusterProviderConfig is told apart from a ProviderConfig of its name", "eu", namespaced=True
    ),
    NameCase(
        "namespaced ProviderConfig of a plain name keeps it",
        "eu",
        kind="ProviderConfig",
        namespaced=True,
        want="gpu-eu",
    ),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.reason)
def test_pool_names_fit_and_are_stable(case):
    ref = ProviderConfigRef(name=case.cluster, kind=case.kind)
    name = clusters.pool_name("fed", "gpu", ref, mode="StatefulSet", namespaced=case.namespaced)
    assert names.problem(names.pool("fed", name), "StatefulSet") is None
    assert len(name) <= names.MAX_NAME  # the pool label holds it
    if case.want is not None:
        assert name == case.want
    else:
        assert name != f"gpu-{case.cluster}"
    # Only the cluster decides it: the same name on every call.
    assert name == clusters.pool_name("fed", "gpu", ref, mode="StatefulSet", namespaced=case.namespaced)


def test_clusters_that_differ_only_in_dots_get_different_names():
    a = clusters.pool_name("fed", "gpu", ProviderConfigRef(name="a.b"), mode="StatefulSet", namespaced=False)
    b = clusters.pool_name("fed", "gpu", ProviderConfigRef(name="a-b"), mode="StatefulSet", namespaced=False)
    assert a != b


def test_a_selector_pool_name_must_leave_room_for_its_clusters():
    long_pool = pool(SELECTED, name="g" * 34)
    with pytest.raises(SpecError, match=r"spec.supernodes.pools\[0\].name"):
        read.federation(xr(long_pool))
    # The same name is fine for a pool that names its cluster.
    read.federation(xr(pool(BASE, name="g" * 34)))


# -- indices --------------------------------------------------------------------


def observed_index(f: value.Federation, *names: str) -> dict[str, Any]:
    """The observed groups of clusters, as the function last composed them, listing those alone: they hold the index."""
    built = compose.plan(f, SERVICE)
    desired = compose.desired(f, built)
    out: dict[str, Any] = {}
    for m in f.selection.placed:
        if m.cluster.name not in names:
            continue
        name = read.cluster_resource(m.cluster, namespaced=False)
        group = read.group_resource(name)
        given = out.setdefault(group, {**desired[group], "spec": {**desired[group]["spec"], "clusters": []}})
        given["spec"]["clusters"] += [e for e in desired[group]["spec"]["clusters"] if e["name"] == name]
    return out


def manifests_everywhere(f: value.Federation) -> dict[str, dict[str, Any]]:
    """The manifests of a Federation and of each FederationCluster it composes, by composition resource name."""
    built = compose.plan(f, SERVICE)
    out = {name: c.manifest for name, c in built.resources.items()}
    for group in built.parts:
        for name, part in groups.compose({"metadata": {"name": group}, **built.direct[group]}, {}).desired.items():
            out.update(compose.manifests(read.cluster({"metadata": {"name": name}, **part})))
    return out


def test_new_clusters_take_the_lowest_free_index_in_name_order():
    f = fed(SELECTED, [config("c"), config("a"), config("b")])
    assert member_names(f) == {"a": 0, "b": 1, "c": 2}


def test_a_joining_cluster_renumbers_no_one():
    before = fed(SELECTED, [config("b"), config("c")])
    observed = observed_index(before, "b", "c")
    after = fed(SELECTED, [config("a"), config("b"), config("c")], observed)
    # a sorts first, yet b and c keep 0 and 1; a takes the next free index.
    assert member_names(after) == {"a": 2, "b": 0, "c": 1}


def test_a_leaving_cluster_frees_its_index_and_moves_no_one():
    before = fed(SELECTED, [config("a"), config("b"), config("c")])
    observed = observed_index(before, "a", "c")
    after = fed(SELECTED, [config("a"), config("c"), config("d")], observed)
    assert member_names(after) == {"a": 0, "c": 2, "d": 1}


INDEX_CASES = [
    ("a pinned index wins over the lowest free", [config("a"), config("b", **{clusters.INDEX_ANNOTATION: "0"})],
     {"a": 1, "b": 0}, {}),
    ("two clusters pinning one index: the first by name keeps it, the other is held",
     [config("a", **{clusters.INDEX_ANNOTATION: "3"}), config("b", **{clusters.INDEX_ANNOTATION: "3"})],
     {"a": 3}, {"b": "pinned by a too"}),
    ("an index beyond maxClusters cannot be pinned", [config("a", **{clusters.INDEX_ANNOTATION: "100"})],
     {}, {"a": "not an index from 0 to 99"}),
    ("an index is a number", [config("a", **{clusters.INDEX_ANNOTATION: "first"})], {}, {"a": "'first'"}),
]  # fmt: skip


@pytest.mark.parametrize(("reason", "configs", "want", "held"), INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_pinned_indices(reason, configs, want, held):
    f = fed(SELECTED, configs)
    assert member_names(f) == want, reason
    assert {m.cluster.name: m.problem for m in f.selection.held}.keys() == held.keys()
    for m in f.selection.held:
        assert held[m.cluster.name] in m.problem


def test_a_remembered_index_beyond_a_lowered_max_clusters_is_given_again():
    before = fed(SELECTED, [config("a"), config("b", **{clusters.INDEX_ANNOTATION: "9"})])
    observed = observed_index(before, "b")
    lowered = pool(SELECTED, clusterSelector={"matchLabels": LABELS, "maxClusters": 5})
    after = fed(lowered, [config("a"), config("b")], observed)
    assert member_names(after) == {"a": 0, "b": 1}


# -- per-cluster settings ---------------------------------------------------------------------------


SETTINGS_CASES = [
    ("replicas from the annotation", SELECTED, {clusters.REPLICAS_ANNOTATION: "5"}, 5, ""),
    ("replicas must be a number", SELECTED, {clusters.REPLICAS_ANNOTATION: "many"}, None, "not a number from 1"),
    ("with {globalIndex} a cluster has replicas indices, so no more SuperNodes",
     pool(SELECTED, nodeConfig={"id": "{globalIndex}"}), {clusters.REPLICAS_ANNOTATION: "3"}, None,
     "each cluster has `replicas` global indices"),
    ("with {globalIndex} fewer is fine", pool(SELECTED, nodeConfig={"id": "{globalIndex}"}),
     {clusters.REPLICAS_ANNOTATION: "1"}, 1, ""),
    ("a DaemonSet has no replicas: the annotation, meant for other federations, is ignored",
     spec(SELECTED, mode="DaemonSet", supernodes__pools__0__replicas=None), {clusters.REPLICAS_ANNOTATION: "3"},
     None, ""),
    ("a nodeConfig value Flower would not read back holds the cluster",
     SELECTED, {clusters.NODE_CONFIG_PREFIX + "path": "a'b\"c"}, None, "node-config.flower.flwr.ai/path"),
]  # fmt: skip


@pytest.mark.parametrize(("reason", "s", "annotations", "replicas", "problem"), SETTINGS_CASES,
                         ids=[c[0] for c in SETTINGS_CASES])  # fmt: skip
def test_per_cluster_settings(reason, s, annotations, replicas, problem):
    if s["mode"] == "DaemonSet":
        s = pool(s)
        s["supernodes"]["pools"][0].pop("replicas", None)
    f = fed(s, [config("eu", **annotations)])
    if problem:
        assert not f.selection.placed, reason
        assert problem in f.selection.held[0].problem
    else:
        assert [m.pool.replicas for m in f.selection.placed if m.pool] == [replicas], reason


def test_node_config_annotations_override_the_pool_and_fill_placeholders():
    s = pool(SELECTED, nodeConfig={"site": "{cluster}", "path": "/data"})
    f = fed(s, [config("eu", **{clusters.NODE_CONFIG_PREFIX + "path": "/mnt/{cluster}-{clusterIndex}"})])
    args = manifests_everywhere(f)["pool-gpu-eu"]["spec"]["template"]["spec"]["containers"][0]["args"]
    node_config = args[args.index("--node-config") + 1]
    assert node_config == 'path="/mnt/eu-0" site="eu"'


# -- the selection as a whole -----------------------------------------------------------------


def test_too_many_clusters_is_an_error_naming_the_selector():
    s = pool(SELECTED, clusterSelector={"matchLabels": LABELS, "maxClusters": 2})
    with pytest.raises(SpecError) as err:
        fed(s, [config("a"), config("b"), config("c")])
    assert err.value.errors[0][0] == "spec.supernodes.pools[0].clusterSelector"
    assert "matches 3 clusters, more than maxClusters 2" in err.value.errors[0][1]


def test_a_selected_name_taken_by_a_named_pool_holds_that_cluster():
    s = spec(SELECTED, supernodes__pools=[*SELECTED["supernodes"]["pools"], {"name": "gpu-eu", "replicas": 1}])
    f = fed(s, [config("eu"), config("us")])
    assert member_names(f) == {"us": 1}
    assert "taken by another pool" in f.selection.held[0].problem


def test_a_claim_pool_in_another_namespace_may_not_land_in_the_superlink_cluster():
    s = pool(spec(SELECTED, providerConfigRef={"name": "hub"}), namespace="elsewhere")
    f = fed(s, [config("hub"), config("eu")])
    assert member_names(f) == {"eu": 0}
    assert "stay in namespace 'team-a'" in f.selection.held[0].problem


def test_global_indices_are_blocks_that_joins_do_not_move():
    numbered = {"id": "{globalIndex}", "n": "{totalReplicas}"}
    selector = {"matchLabels": LABELS, "maxClusters": 4}
    s = pool(SELECTED, nodeConfig=numbered, clusterSelector=selector)
    s["supernodes"]["pools"].append({"name": "local", "replicas": 3, "nodeConfig": {"id": "{globalIndex}"}})
    before = fed(s, [config("b")])
    assert placing.global_offsets(before) == ({"gpu-b": 0, "local": 8}, 11)
    joined = fed(s, [config("a"), config("b")], observed_index(before, "b"))
    # b keeps block 0, a takes block 1 (ids 2-3); the named pool after the
    # selector's 4 blocks of 2 stays at 8, and {totalReplicas} at 11.
    assert placing.global_offsets(joined) == ({"gpu-b": 0, "gpu-a": 2, "local": 8}, 11)


def test_the_same_selection_in_any_order_renders_the_same_bytes():
    configs = [config(f"site-{i}", **{clusters.REPLICAS_ANNOTATION: str(1 + i % 3)}) for i in range(12)]
    # Crossplane lists them in no promised order.
    shuffled = configs[7:] + configs[:7][::-1]
    one = compose.desired(fed(SELECTED, configs), compose.plan(fed(SELECTED, configs), SERVICE))
    other = compose.desired(fed(SELECTED, shuffled), compose.plan(fed(SELECTED, shuffled), SERVICE))
    assert yaml.safe_dump(one) == yaml.safe_dump(other)


# -- requirements -----------------------------------------------------------------------------


def test_requirements_per_flavor():
    f = read.federation(xr(SELECTED))
    assert clusters.requirements(f.written, "team-a", namespaced=False) == [
        clusters.Requirement(KEY, "kubernetes.crossplane.io/v1alpha1", "ProviderConfig", LABELS)
    ]
    assert clusters.requirements(f.written, "team-a", namespaced=True) == [
        clusters.Requirement("clusters-gpu-clusterproviderconfig", "kubernetes.m.crossplane.io/v1alpha1",
                             "ClusterProviderConfig", LABELS),
        clusters.Requirement(KEY, "kubernetes.m.crossplane.io/v1alpha1", "ProviderConfig", LABELS, "team-a"),
    ]  # fmt: skip


def run(s: dict[str, Any], required: dict[str, list[dict[str, Any]]] | None, observed: dict[str, Any] | None = None):
    """The function's answer for the Federation, with its FederationClusters' own answers beside it (with_parts)."""
    return with_parts(answer(s, required, observed), observed or {})


def answer(
    s: dict[str, Any], required: dict[str, list[dict[str, Any]]] | None, observed: dict[str, Any] | None = None
) -> fnv1.RunFunctionResponse:
    """The function's answer for the Federation alone."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr(s))
    # Placement across clusters, not tenancy: pools may use any namespace (tests/api/test_policy.py).
    req.input.update(ANY_NAMESPACE_POLICY)
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    for key, items in (required or {}).items():
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    return fn.run(req)


def with_parts(rsp: fnv1.RunFunctionResponse, observed: dict[str, Any]) -> fnv1.RunFunctionResponse:
    """The Federation's answer with, beside each FederationCluster it composes, what that one composes in turn.

    Each FederationCluster is answered by a call of its own, as Crossplane makes it, with the same policy.
    """
    merged = fnv1.RunFunctionResponse()
    merged.CopyFrom(rsp)
    waiting = list(rsp.desired.resources.items())
    while waiting:
        name, composed = waiting.pop(0)
        part = wire.to_dict(composed.resource)
        if part.get("kind") not in (*read.CLUSTER_KINDS, *read.GROUP_KINDS):
            continue
        req = fnv1.RunFunctionRequest()
        namespaced = part["kind"] in ("FederationCluster", "FederationClusterGroup")
        metadata = {"name": name, "namespace": "team-a"} if namespaced else {"name": name}
        req.observed.composite.resource.update({**part, "metadata": metadata})
        req.input.update(ANY_NAMESPACE_POLICY)
        for n, obj in observed.items():
            req.observed.resources[n].resource.update(obj)
        answer = fn.run(req)
        assert not [r.message for r in answer.results if r.severity == fnv1.SEVERITY_FATAL], name
        # Given what it needs: its own gatherers' lists are composed resources it observes, nothing it asks for.
        assert not answer.requirements.resources, name
        for n, r in answer.desired.resources.items():
            merged.desired.resources[n].CopyFrom(r)
        waiting += list(answer.desired.resources.items())
    return merged


def conditions(rsp: fnv1.RunFunctionResponse) -> dict[str, fnv1.Condition]:
    return {c.type: c for c in rsp.conditions}


def test_the_function_asks_for_the_labelled_provider_configs_on_every_call():
    for required in (None, {KEY: [config("eu")]}):
        rsp = run(SELECTED, required, SERVICE)
        selector = rsp.requirements.resources[KEY]
        assert (selector.api_version, selector.kind) == ("kubernetes.crossplane.io/v1alpha1", "ProviderConfig")
        assert dict(selector.match_labels.labels) == LABELS


def test_no_match_is_a_condition_and_not_ready_not_an_error():
    rsp = run(SELECTED, {KEY: []}, SERVICE)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    selected = conditions(rsp)["ClustersSelected"]
    assert (selected.status, selected.reason) == (fnv1.STATUS_CONDITION_FALSE, "NoMatchingClusters")
    assert "no ProviderConfig carries the labels of pool gpu" in selected.message
    # Not "True, 0/0 SuperNodes ready": the pool that matched nothing has no SuperNode to be ready.
    supernodes = conditions(rsp)["SuperNodesReady"]
    assert (supernodes.status, supernodes.reason) == (fnv1.STATUS_CONDITION_FALSE, "NoMatchingClusters")
    assert supernodes.message.startswith("no cluster selected for pool gpu: "), supernodes.message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert not [n for n in rsp.desired.resources if n.startswith("pool-")]


def test_a_leaving_cluster_has_its_objects_dropped_and_the_others_unchanged():
    both = run(SELECTED, {KEY: [config("eu"), config("us")]}, SERVICE)
    observed = {
        **SERVICE,
        **{n: wire.to_dict(r.resource) for n, r in both.desired.resources.items() if n != "superlink-service"},
    }
    one = run(SELECTED, {KEY: [config("us")]}, observed)
    left = set(both.desired.resources) - set(one.desired.resources)
    # eu's group goes too: no other cluster here shares it.
    eu = {"cluster-config-eu", read.group_resource("cluster-config-eu")}
    assert left == {*eu, "pool-gpu-eu", "serviceaccount-eu-team-a", "networkpolicy-supernode-eu-team-a"}
    for name in one.desired.resources:
        assert wire.to_dict(one.desired.resources[name].resource) == wire.to_dict(both.desired.resources[name].resource)


def test_while_the_clusters_are_not_listed_every_observed_object_is_kept():
    both = run(SELECTED, {KEY: [config("eu"), config("us")]}, SERVICE)
    observed = {n: wire.to_dict(r.resource) for n, r in both.desired.resources.items()}
    observed["superlink-service"].update(SERVICE["superlink-service"])
    unanswered = run(SELECTED, None, observed)
    assert set(unanswered.desired.resources) == set(both.desired.resources)
    assert conditions(unanswered)["ClustersSelected"].status == fnv1.STATUS_CONDITION_UNKNOWN


def test_a_held_cluster_keeps_what_it_has():
    good = run(SELECTED, {KEY: [config("eu")]}, SERVICE)
    observed = {n: wire.to_dict(r.resource) for n, r in good.desired.resources.items()}
    observed["superlink-service"].update(SERVICE["superlink-service"])
    bad = run(SELECTED, {KEY: [config("eu", **{clusters.REPLICAS_ANNOTATION: "0"})]}, observed)
    assert wire.to_dict(bad.desired.resources["pool-gpu-eu"].resource)["spec"] == observed["pool-gpu-eu"]["spec"]
    selected = conditions(bad)["ClustersSelected"]
    assert selected.reason == "ClusterSettingsInvalid"
    assert "cluster eu of pool gpu is held: annotation flower.flwr.ai/replicas '0'" in selected.message


def test_a_held_cluster_keeps_the_key_publishers_role_of_an_earlier_release():
    # Earlier releases composed the Role under other resource names (resource_names.legacy_key_publisher_resources):
    # a cluster held over an upgrade keeps them as they were, not deleted until it is composed again.
    good = run(SELECTED, {KEY: [config("eu")]}, SERVICE)
    observed = {n: wire.to_dict(r.resource) for n, r in good.desired.resources.items()}
    observed["superlink-service"].update(SERVICE["superlink-service"])
    legacy = resource_names.legacy_key_publisher_resources("eu", "team-a")
    for name in legacy:
        observed[name] = observed["pool-gpu-eu"]  # any Object: it is returned as observed
    bad = run(SELECTED, {KEY: [config("eu", **{clusters.REPLICAS_ANNOTATION: "0"})]}, observed)
    for name in legacy:
        assert wire.to_dict(bad.desired.resources[name].resource)["spec"] == observed[name]["spec"], name


def test_a_held_cluster_keeps_its_federation_cluster_as_it_was():
    """What a held cluster keeps is what its FederationCluster was given: composed anew by its own call, its
    workload and the identity program it mounts stay together, whatever the function's release."""
    s = secure_selected()
    s = pool(s, caSecretRef={"name": "flower-ca"})
    good = run(s, {KEY: [config("eu")]}, SERVICE)
    observed = {n: wire.to_dict(r.resource) for n, r in good.desired.resources.items()}
    observed["superlink-service"].update(SERVICE["superlink-service"])
    bad = run(s, {KEY: [config("eu", **{clusters.REPLICAS_ANNOTATION: "0"})]}, observed)
    assert conditions(bad)["ClustersSelected"].reason == "ClusterSettingsInvalid"
    current = f"identity-program-{identity.PROGRAM_DIGEST}-eu-team-a"
    for name in ("cluster-config-eu", "pool-gpu-eu", current):
        assert wire.to_dict(bad.desired.resources[name].resource)["spec"] == observed[name]["spec"], name


def test_status_lists_each_cluster_and_counts_them():
    rsp = run(SELECTED, {KEY: [config("eu"), config("us")]}, SERVICE)
    status = wire.to_dict(rsp.desired.composite.resource)["status"]
    assert status["clusters"] == 2
    assert [(p["name"], p["providerConfig"], p["selector"], p["clusterIndex"]) for p in status["pools"]] == [
        ("gpu-eu", "eu", "gpu", 0),
        ("gpu-us", "us", "gpu", 1),
    ]
    assert conditions(rsp)["ClustersSelected"].message == "pool gpu: 2 clusters (eu, us)"


EXAMPLE = EXAMPLES / "claims" / "multicluster-selector.yaml"
EXAMPLE_CLUSTERS = EXAMPLES / "required" / "clusters.yaml"
LOAD_BALANCER = {
    "apiVersion": "kubernetes.crossplane.io/v1alpha2",
    "kind": "Object",
    "metadata": {"name": "svc", "annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-service"}},
    "spec": {"forProvider": {"manifest": {}}},
    "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}},
}


def test_render_answers_label_requirements_like_crossplane():
    docs, _ = render.render(
        load_all(EXAMPLE)[0], [LOAD_BALANCER], required=load_all(EXAMPLE_CLUSTERS), policy=policy_for(EXAMPLE)
    )
    objects = {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d for d in docs[1:]}
    groups = {n: o for n, o in objects.items() if n.startswith("cluster-")}
    assert {o["kind"] for o in groups.values()} == {"XFederationClusterGroup"}
    # spoke-lab carries another value of the label: not selected. Each cluster's pool is its FederationCluster's.
    parts = sorted(c["name"] for o in groups.values() for c in o["spec"]["clusters"])
    assert parts == ["cluster-config-spoke-edge.example.org", "cluster-config-spoke-eu", "cluster-config-spoke-us"]
    assert sorted(groups) == sorted({read.group_resource(n) for n in parts})
    assert docs[0]["status"]["clusters"] == 3


def test_crank_render_with_required_provider_configs_agrees(crank, functions_file, tmp_path):
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(render.composite(load_all(EXAMPLE)[0])))
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump(LOAD_BALANCER))
    proc = subprocess.run(
        [crank, "render", str(xr_file), str(composition_for(EXAMPLE, tmp_path)), str(functions_file),
         f"--observed-resources={tmp_path / 'observed.yaml'}", f"--required-resources={EXAMPLE_CLUSTERS}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    theirs = {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d["spec"] for d in docs[1:]}
    ours, _ = render.render(
        load_all(EXAMPLE)[0], [LOAD_BALANCER], required=load_all(EXAMPLE_CLUSTERS), policy=policy_for(EXAMPLE)
    )
    assert theirs == {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d["spec"] for d in ours[1:]}
    assert read.group_resource("cluster-config-spoke-us") in theirs
    assert docs[0]["status"]["clusters"] == 3


def largest_secure_selection() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The most clusters one selector takes, node authentication and TLS on, ten SuperNodes each."""
    s = secure_selected()
    s = pool(
        s,
        caSecretRef={"name": "flower-ca"},
        createNamespace=True,
        namespace="flower-sites",
        clusterSelector={"matchLabels": LABELS, "maxClusters": MAX_CLUSTERS},
        nodeConfig={"site": "{cluster}", "id": "{globalIndex}", "n": "{totalReplicas}"},
        supernodeResources={"requests": {"cpu": "1", "memory": "2Gi"}},
        replicas=10,
    )
    configs = [
        config(f"site-{i:04d}", **{clusters.NODE_CONFIG_PREFIX + "path": f"/data/{i}"}) for i in range(MAX_CLUSTERS)
    ]
    return s, configs


def reporting(part: dict[str, Any], name: str) -> dict[str, Any]:
    """A FederationCluster as observed once Ready, its pool reported as its own call reports it."""
    cluster = name.removeprefix("cluster-config-")
    entry = {"name": f"gpu-{cluster}", "kind": "StatefulSet", "desired": 10, "ready": 10, "namespace": "flower-sites",
             "providerConfig": cluster, "selector": "gpu", "clusterIndex": 999}  # fmt: skip
    ready = [{"type": "Ready", "status": "True", "reason": "Available"}]
    return {**part, "status": {"conditions": ready, "pools": [entry], "supernodes": "10/10"}}


def test_the_most_clusters_fit_in_what_crossplane_reads_with_room_to_spare():
    # Crossplane's gRPC client reads responses up to the default 4 MiB, and every call's request
    # carries what its composite observes. No call carries the whole federation's objects: the
    # Federation's answer is its groups, a group's its share of FederationClusters, a
    # FederationCluster's its one cluster.
    s, configs = largest_secure_selection()
    rsp = answer(s, {KEY: configs}, SERVICE)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    composed = {n: wire.to_dict(r.resource) for n, r in rsp.desired.resources.items()}
    shares = {n: g for n, g in composed.items() if g.get("kind") in read.GROUP_KINDS}
    assert len(shares) == read.GROUPS
    assert sum(len(g["spec"]["clusters"]) for g in shares.values()) == MAX_CLUSTERS
    # Its status lists every cluster's pool: a sixth of a megabyte of the 0.6 MiB.
    assert rsp.ByteSize() < fn.MAX_RESPONSE_BYTES / 4, rsp.ByteSize()
    observed_groups = {}
    for name, group in shares.items():
        # The largest share: about a thirtieth of the clusters, well under what one reconcile applies in time.
        assert len(group["spec"]["clusters"]) < 2 * MAX_CLUSTERS / read.GROUPS, name
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update({**group, "metadata": {"name": name}})
        first = fn.run(req)
        assert first.ByteSize() < fn.MAX_RESPONSE_BYTES / 8, (name, first.ByteSize())
        for n, r in first.desired.resources.items():
            req.observed.resources[n].resource.update(reporting(wire.to_dict(r.resource), n))
        settled = fn.run(req)
        assert req.ByteSize() < fn.MAX_RESPONSE_BYTES / 8, (name, req.ByteSize())
        status = wire.to_dict(settled.desired.composite.resource)["status"]
        assert status["readyClusters"] == status["clusters"] == len(group["spec"]["clusters"])
        observed_groups[name] = {**group, "status": {**status, "conditions": [{"type": "Ready", "status": "True"}]}}
    # The Federation settled: every group observed with its clusters' pools rolled up.
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr(s))
    req.input.update(ANY_NAMESPACE_POLICY)
    for name, obj in {**SERVICE, **observed_groups}.items():
        req.observed.resources[name].resource.update(obj)
    req.required_resources[KEY].SetInParent()
    for item in configs:
        req.required_resources[KEY].items.add().resource.update(item)
    assert req.ByteSize() < fn.MAX_RESPONSE_BYTES / 2, req.ByteSize()
    settled = fn.run(req)
    assert settled.ByteSize() < fn.MAX_RESPONSE_BYTES / 4, settled.ByteSize()
    status = wire.to_dict(settled.desired.composite.resource)["status"]
    assert status["supernodes"] == f"{10 * MAX_CLUSTERS}/{10 * MAX_CLUSTERS}"
    # A FederationCluster's own answer is one cluster's: node authentication, TLS and all.
    last = with_parts(answer(s, {KEY: configs[-1:]}, SERVICE), {})
    one = {n: r for n, r in last.desired.resources.items() if n not in rsp.desired.resources}
    assert "pool-gpu-site-0999" in one
    assert sum(r.ByteSize() for r in one.values()) < 128 * 1024


def big_template(kib: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {f"note-{i}": "x" * 1024 for i in range(kib)}}}


def test_more_than_crossplane_reads_is_a_clear_error_not_a_grpc_failure():
    # Each group carries the pools as written: a pod template of 140 KiB in each of 32 groups no longer fits in 4 MiB.
    s = pool(
        SELECTED, clusterSelector={"matchLabels": LABELS, "maxClusters": MAX_CLUSTERS}, podTemplate=big_template(140)
    )
    rsp = answer(s, {KEY: [config(f"site-{i:04d}") for i in range(MAX_CLUSTERS)]}, SERVICE)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1 and "more than Crossplane reads from a function (4 MiB)" in fatal[0], fatal
    assert not rsp.desired.resources
    assert rsp.ByteSize() < fn.MAX_RESPONSE_BYTES


def test_a_group_too_large_for_crossplane_is_a_clear_error():
    # Each FederationCluster of a group carries its pools as written: the largest share's (over 40 clusters)
    # with 100 KiB each do not fit, while the Federation's 32 groups, with one copy each, do.
    s = pool(
        SELECTED, clusterSelector={"matchLabels": LABELS, "maxClusters": MAX_CLUSTERS}, podTemplate=big_template(100)
    )
    rsp = answer(s, {KEY: [config(f"site-{i:04d}") for i in range(MAX_CLUSTERS)]}, SERVICE)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    shares = {n: wire.to_dict(r.resource) for n, r in rsp.desired.resources.items() if n.startswith("cluster-group-")}
    name, group = max(shares.items(), key=lambda item: len(item[1]["spec"]["clusters"]))
    assert len(group["spec"]["clusters"]) > 40
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update({**group, "metadata": {"name": name}})
    answered = fn.run(req)
    fatal = [r.message for r in answered.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1 and "more than Crossplane reads from a function (4 MiB)" in fatal[0], fatal
    assert fatal[0].startswith("invalid FederationClusterGroup: its "), fatal
    assert not answered.desired.resources


# -- as a named remote pool --------------------------------------------------------------------


def test_selected_pools_get_the_ca_copy_in_each_cluster():
    s = spec(SELECTED, tls={"secretName": "superlink-tls"})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "superlink-tls", "namespace": "team-a"},
              "data": {"ca.crt": "Q0E="}}  # fmt: skip
    rsp = run(s, {KEY: [config("eu"), config("us")], "superlink-tls": [secret]})
    # The CA is read through a required resource too, and copied once per selected cluster.
    assert "superlink-tls" in rsp.requirements.resources
    assert {"ca-eu-team-a", "ca-us-team-a"} <= set(rsp.desired.resources)
    copy = wire.to_dict(rsp.desired.resources["ca-eu-team-a"].resource)
    assert copy["spec"]["providerConfigRef"] == {"name": "eu"}
    assert copy["spec"]["forProvider"]["manifest"]["data"] == {"ca.crt": "Q0E="}


def test_selected_pools_wait_for_the_external_address_like_named_ones():
    s = spec(SELECTED, superlink={"image": "flwr/superlink:1.25.0", "service": {"type": "LoadBalancer"}})
    waiting = run(s, {KEY: [config("eu")]})
    assert "pool-gpu-eu" not in waiting.desired.resources
    assert waiting.desired.composite.ready == fnv1.READY_FALSE
    assert "gpu-eu" in conditions(waiting)["ExternalAddressReady"].message
    found = run(s, {KEY: [config("eu")]}, SERVICE)
    args = wire.to_dict(found.desired.resources["pool-gpu-eu"].resource)["spec"]["forProvider"]["manifest"]
    assert "--superlink=203.0.113.7:9092" in args["spec"]["template"]["spec"]["containers"][0]["args"]


def namespaced_xr(s: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "flower.crossplane.io/v1alpha1", "kind": "Federation",
            "metadata": {"name": "fed", "namespace": "team-a"}, "spec": s}  # fmt: skip


def test_a_namespaced_federation_selects_both_kinds_and_names_the_kind():
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(namespaced_xr(SELECTED))
    answers = {
        "clusters-gpu-clusterproviderconfig": [
            {"apiVersion": clusters.NAMESPACED_API, "kind": "ClusterProviderConfig", "metadata": {"name": "eu"}}
        ],
        KEY: [{"apiVersion": clusters.NAMESPACED_API, "kind": "ProviderConfig",
               "metadata": {"name": "eu", "namespace": "team-a"}}],
    }  # fmt: skip
    for key, items in answers.items():
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    rsp = with_parts(fn.run(req), {})
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    asked = {k: (v.kind, v.namespace) for k, v in rsp.requirements.resources.items()}
    assert asked == {
        "clusters-gpu-clusterproviderconfig": ("ClusterProviderConfig", ""),
        KEY: ("ProviderConfig", "team-a"),
    }
    pools = {n: wire.to_dict(r.resource)["spec"]["providerConfigRef"] for n, r in rsp.desired.resources.items()
             if n.startswith("pool-")}  # fmt: skip
    # One cluster of each kind, both named eu: two pools, the ClusterProviderConfig's with a hash.
    assert sorted(pools.values(), key=lambda r: r["kind"]) == [
        {"kind": "ClusterProviderConfig", "name": "eu"},
        {"kind": "ProviderConfig", "name": "eu"},
    ]
    assert "pool-gpu-eu" in pools and pools["pool-gpu-eu"]["kind"] == "ProviderConfig"


def test_a_selector_pool_with_node_authentication_needs_no_control_api_on_any_release():
    # Any cluster may come to carry the labels. Its SuperNodes publish their keys through their own
    # cluster's API and never reach the Control API, so a release before 1.40 (whose Fleet address
    # leads to no Control API) is no longer refused up front.
    s = spec(SELECTED, tls={"secretName": "superlink-tls"}, nodeAuthentication={"enabled": True})
    fed = read.federation(xr(s))
    assert str(fed.flower.superlink) == "1.25.0", "the case needs a release before 1.40"


def test_a_federation_and_its_groups_are_composed_again_each_minute_and_a_new_cluster_every_30_s():
    """Crossplane requeues a composite after its response's TTL: its Federation reads the ProviderConfigs unwatched,
    and a group lists keys its clusters report in events Crossplane's circuit breaker may drop (outcome.GROUP_TTL); a
    FederationCluster with nothing observed yet is not Ready, and looks as often as the provider reads its Objects
    (outcome.STARTING_CLUSTER_TTL; once Ready it waits longer: tests/composition/test_key_shards.py)."""
    rsp = answer(SELECTED, {KEY: [config("eu")]}, SERVICE)
    assert rsp.meta.ttl.ToTimedelta() == dt.timedelta(minutes=1)
    parts = [(n, wire.to_dict(r.resource)) for n, r in rsp.desired.resources.items()]
    shares = [(n, p) for n, p in parts if p.get("kind") in read.GROUP_KINDS]
    assert shares, "no FederationClusterGroup composed"
    parts = []
    for name, group in shares:
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update({**group, "metadata": {"name": name}})
        answered = fn.run(req)
        assert answered.meta.ttl.ToTimedelta() == dt.timedelta(minutes=1), name
        parts += [(n, wire.to_dict(r.resource)) for n, r in answered.desired.resources.items()]
    assert parts, "no FederationCluster composed"
    for name, part in parts:
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update({**part, "metadata": {"name": name}})
        req.input.update(ANY_NAMESPACE_POLICY)
        cluster = fn.run(req)
        assert not [r.message for r in cluster.results if r.severity == fnv1.SEVERITY_FATAL], name
        assert cluster.meta.ttl.ToTimedelta() == dt.timedelta(seconds=30), name
