"""SuperNode keys published through Kubernetes: who may publish, what is carried, what the SuperLink is told.

The publication itself, by the real program against a real API server with the
Role composed here, is proven in the e2e (test_supernode_keys_reach_the_superlink_through_kubernetes).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.builders import identity, netpol, published_keys
from function.composition import compose, objects, resource_names
from function.federation import read
from function.federation.value import Hold
from function.programs import identity_program
from function.serving import fn
from support.helpers import manifests, pod, spec, xr
from support.published_keys import (
    AUTH,
    FED,
    KEY,
    NAMESPACE,
    OTHER_KEY,
    TLS,
    ds_ready,
    gathered_list,
    observed_list,
    observed_workloads,
    publication,
    sts_ready,
)

AUTH_DS = spec(AUTH, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])
PLACE = published_keys.Place("default", NAMESPACE, ("default",))


@pytest.mark.parametrize(
    ("publications", "expected", "reason"),
    [
        ([publication()], [KEY], "a key a pool's claim owns, published in the gatherer's namespace"),
        ([publication(owner_kind="Pod")], [KEY], "a DaemonSet pod owns its key"),
        ([publication(), publication(uid="9a9a")], [KEY], "one line per key"),
        ([publication(data={"public-key": KEY, "node-id": "12"})], [KEY], "a node ID beside the key is not carried"),
        (
            [publication(OTHER_KEY, uid="b", holder="supernode-identity-fed-default-1"), publication(uid="a")],
            sorted([KEY, OTHER_KEY]),
            "sorted by key",
        ),
        (
            [publication(created="2026-12-01T10:00:00Z"), publication(OTHER_KEY, created="2026-12-01T10:05:00Z")],
            [OTHER_KEY],
            "one holder, one key: the newest (a rekeyed pod's new key), however many it publishes",
        ),
        (
            [publication(OTHER_KEY, created="2026-12-01T10:00:00Z"), publication(created="2026-12-01T10:05:00Z")],
            [KEY],
            "the newest, whatever order the publications come in",
        ),
        (
            [publication(), publication(OTHER_KEY, owner_kind="Pod")],
            sorted([KEY, OTHER_KEY]),
            "a claim and a pod of one name are two holders",
        ),
        ([publication(namespace="team-b")], [], "a ConfigMap of another namespace than the gatherer's"),
        ([publication(metadata__labels={"app.kubernetes.io/instance": "other"})], [], "another Federation's key"),
        ([publication(pool="other-cluster-pool")], [], "a pool placed elsewhere (two ProviderConfigs, one cluster)"),
        ([publication(owner_kind="Secret")], [], "owned by neither a pod nor a claim"),
        ([publication(metadata__ownerReferences=[])], [], "owned by nothing: outlives every SuperNode"),
        ([publication(metadata__name="flwr-key-someone-else")], [], "its name is not its owner's uid"),
        ([publication(kind="Secret")], [], "not a ConfigMap"),
        ([publication("ssh-rsa AAAAB3NzaC1yc2E=")], [], "not the P-384 key the program makes"),
        ([publication(KEY + "\nssh-rsa AAAA")], [], "more than one line"),
        ([publication(data={"public-key": OTHER_KEY})], [], "its name is not of its key"),
    ],
)
def test_only_keys_a_pools_pods_published_are_listed(publications, expected, reason):
    keys = published_keys.gathered(PLACE, gathered_list(*publications))
    assert [k.public_key for k in keys] == expected, reason


HOLDER = f"{NAMESPACE}/PersistentVolumeClaim/supernode-identity-fed-default-0"


@pytest.mark.parametrize(
    ("live", "expected", "reason"),
    [
        (gathered_list(publication()), [f"default/{HOLDER}"], "each line named with its cluster"),
        (None, None, "the list not observed yet: it says nothing"),
        ({"metadata": {"namespace": NAMESPACE}}, None, "made, not written yet: it says nothing"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": ""}}, [], "written: no key there"),
        ({"metadata": {"namespace": "team-b"}, "data": {"keys": f"{KEY} team-b/Pod/p\n"}}, None, "another's list"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": f"{KEY} team-b/Pod/p\n"}}, [], "a holder elsewhere"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": f"{KEY} {HOLDER} 12\n"}}, [], "a field too many"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": f"ssh-rsa AAAA {HOLDER}\n"}}, [], "no P-384 key"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": f"{KEY} {NAMESPACE}/Secret/s\n"}}, [], "no holder"),
        ({"metadata": {"namespace": NAMESPACE}, "data": {"keys": ["x"]}}, None, "not text"),
    ],
)
def test_a_gatherers_list_is_read_line_by_line(live, expected, reason):
    keys = published_keys.gathered(PLACE, live)
    assert (None if keys is None else [k.holder for k in keys]) == expected, reason


def test_until_a_list_is_written_its_place_keeps_what_was_listed_before():
    """A new list Object (an upgrade from the collections) must not empty the SuperLink's list until the next poll."""
    fed = read.federation(xr(AUTH))
    before = published_keys.authorized_keys(FED, NAMESPACE, {}, published_keys.gathered(PLACE, gathered_list(
        publication(), publication(OTHER_KEY, uid="u1", holder="supernode-identity-fed-default-1"))))  # fmt: skip
    elsewhere = f"{KEY[:-2]}Q= spoke/{NAMESPACE}/Pod/p -\n"  # another place's line: not this place's to keep
    before["data"]["authorized-keys"] += elsewhere
    observed = {resource_names.AUTHORIZED_KEYS: {"status": {"atProvider": {"manifest": before}}}}

    def listed(extra: dict[str, Any]) -> str:
        plan = compose.plan(fed, {**observed, **extra})
        return plan.resources[resource_names.AUTHORIZED_KEYS].manifest["data"]["authorized-keys"]

    made = {"metadata": {"namespace": NAMESPACE}}
    kept = before["data"]["authorized-keys"].removesuffix(elsewhere)
    assert listed({}) == kept, "the list not observed yet"
    assert listed(observed_list(made)) == kept, "made, not written yet"
    assert listed(observed_list(gathered_list(publication()))) == f"{KEY} default/{HOLDER} -\n", "then as written"
    assert listed(observed_list({**made, "data": {"keys": ""}})) == "", "written empty: no key there"


def test_authorized_keys_name_each_key_and_its_holder():
    keys = published_keys.gathered(PLACE, gathered_list(publication(data={"public-key": KEY, "node-id": "42"})))
    configmap = published_keys.authorized_keys(FED, NAMESPACE, {}, keys)
    assert configmap["metadata"]["name"] == "fed-superlink-authorized-keys"
    # A node ID in the publication is not carried: the registrar would not trust it anyway.
    holder = f"default/{HOLDER}"
    assert configmap["data"] == {"authorized-keys": f"{KEY} {holder} -\n"}
    # What the registrar reads from it: each key and its holder.
    assert identity_program.authorized(configmap["data"]["authorized-keys"]) == {KEY: (holder, None)}


def test_a_key_two_places_list_counts_once():
    here = published_keys.gathered(PLACE, gathered_list(publication()))
    there = published_keys.gathered(published_keys.Place("eu", NAMESPACE), gathered_list(publication()))
    assert published_keys.one_per_key([*there, *here]) == here, "the first holder, whatever the order"


def test_the_pools_service_account_may_create_configmaps_and_nothing_more():
    built = manifests(AUTH)
    role = built[resource_names.key_role_resource("default", NAMESPACE)]
    # Its pods' claims alone, by name (`resourceNames`): every ordinal of the pool's StatefulSet.
    claims = [f"supernode-identity-fed-supernode-default-{i}" for i in range(2)]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"], "resourceNames": claims},
    ]
    binding = built[resource_names.key_binding_resource("default", NAMESPACE)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fed-flower", "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # A DaemonSet's pods own their keys: no claim to read.
    ds_role = manifests(AUTH_DS)[resource_names.key_role_resource("default", NAMESPACE)]
    assert ds_role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]


def test_the_api_server_narrows_the_pools_create_to_each_pods_own_publication():
    """RBAC cannot restrict a create by name: an admission policy, in the pool's cluster, does.

    What the API server makes of it, from a pool pod's token, is tried in the e2e
    (test_supernode_keys_reach_the_superlink_through_kubernetes).
    """
    built = manifests(AUTH)
    policy = built[resource_names.key_policy_resource("default", NAMESPACE)]
    binding = built[resource_names.key_policy_binding_resource("default", NAMESPACE)]
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert "namespace" not in policy["metadata"], "cluster-scoped"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    # Only the pool's ServiceAccount is judged: the provider, controllers and people are not.
    assert spec["matchConditions"] == [
        {
            "name": "pool-service-account",
            "expression": f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:fed-flower'",
        }
    ]
    rules = " ".join(v["expression"] for v in spec["validations"])
    for needed in (
        "startsWith('flwr-key-' + object.metadata.ownerReferences[0].uid + '-')",
        "== 'fed'",
        "variables.pod",
        "variables.podUID",
        "'supernode-identity-'",
    ):
        assert needed in rules, needed
    # A DaemonSet's pods own their keys themselves: no claim may own one.
    ds = manifests(AUTH_DS)[resource_names.key_policy_resource("default", NAMESPACE)]
    assert "PersistentVolumeClaim" not in " ".join(v["expression"] for v in ds["spec"]["validations"])
    # Unique per Federation, its namespace, cluster and pool namespace: cluster-wide names cannot clash.
    assert len({identity.publication_policy_name("fed", ns, c, p) for ns in "ab" for c in "cd" for p in "ef"}) == 8


def test_nothing_is_published_without_identities_made_in_pods():
    names = set(manifests(TLS))
    assert not {n for n in names if n.startswith("supernode-keys-") or n == resource_names.AUTHORIZED_KEYS}


def test_only_the_identity_containers_hold_a_token():
    p = manifests(AUTH)["pool-default"]["spec"]["template"]["spec"]
    assert p["automountServiceAccountToken"] is False
    holders = {
        c["name"]
        for c in p["containers"] + p["initContainers"]
        if any(m["name"] == identity.KUBE_VOLUME for m in c.get("volumeMounts", []))
    }
    assert holders == {identity.INIT_CONTAINER, identity.REKEY_CONTAINER}
    # Beside the SuperLink, its registrar alone: it reports the keys it retired.
    superlink = manifests(AUTH)["superlink"]["spec"]["template"]["spec"]
    reporters = {
        c["name"]
        for c in superlink["containers"] + superlink["initContainers"]
        if any(m["name"] == identity.KUBE_VOLUME for m in c.get("volumeMounts", []))
    }
    assert reporters == {identity.REGISTRAR}
    assert superlink["automountServiceAccountToken"] is False
    volume = next(v for v in p["volumes"] if v["name"] == identity.KUBE_VOLUME)
    assert volume["projected"]["sources"][0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}


@pytest.mark.parametrize(
    ("s", "owner_claim"),
    [(AUTH, "--owner-claim=supernode-identity-$(POD_NAME)"), (AUTH_DS, None)],
    ids=["statefulset-claim-owns-the-key", "daemonset-pod-owns-the-key"],
)
def test_the_publication_is_owned_by_what_holds_the_key(s, owner_claim):
    workload = "pool-edge" if s is AUTH_DS else "pool-default"
    first = next(c for c in pod(s, workload)["initContainers"] if c["name"] == identity.INIT_CONTAINER)
    claims = [a for a in first["args"] if a.startswith("--owner-claim=")]
    assert claims == ([owner_claim] if owner_claim else [])
    assert {e["name"] for e in first["env"]} == {"POD_NAME", "POD_NAMESPACE", "POD_UID"}


def run(s: dict[str, Any], observed: dict[str, dict[str, Any]] | None = None) -> fnv1.RunFunctionResponse:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr(s))
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(copy.deepcopy(obj))
    rsp = fn.run(req)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return rsp


def test_the_function_reads_the_gatherers_list_and_tells_the_superlink():
    rsp = run(AUTH, observed_list(gathered_list(publication())))
    desired = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    configmap = desired[resource_names.AUTHORIZED_KEYS]["spec"]["forProvider"]["manifest"]
    assert configmap["data"]["authorized-keys"].startswith(KEY)
    names = resource_names.key_gatherer_resources("default", NAMESPACE)
    assert [desired[n]["spec"]["forProvider"]["manifest"]["kind"] for n in names] == [
        "ConfigMap", "ServiceAccount", "Role", "RoleBinding", "Deployment"
    ]  # fmt: skip
    # Made once, then written by the gatherer alone: never updated by the provider.
    assert desired[names[0]]["spec"]["managementPolicies"] == objects.CREATE_ONLY
    assert all("managementPolicies" not in desired[n]["spec"] for n in names[1:])
    # Nothing is asked for: the list is a composed resource, observed.
    assert not rsp.requirements.resources
    assert not run(TLS).requirements.resources


def test_a_gatherer_per_cluster_and_namespace_where_pools_publish():
    # Flower 1.41: pools in other clusters register through the Fleet proxy.
    two = spec(
        AUTH,
        superlink__image="flwr/superlink:1.41.0",
        superlink__externalAddress="fleet.example.com:443",
        supernodes__image="flwr/supernode:1.41.0",
        supernodes__pools=[
            {"name": "a", "replicas": 1},
            {"name": "b", "replicas": 1},
            {"name": "eu", "replicas": 1, "providerConfigRef": {"name": "spoke-eu"}, "caSecretRef": {"name": "ca"}},
        ],
    )
    built = compose.plan(read.federation(xr(two)))
    gatherers = {n for n in built.resources if n.startswith("supernode-keys-gatherer-")}
    assert gatherers == {
        *resource_names.key_gatherer_resources("default", NAMESPACE),
        *resource_names.key_gatherer_resources("spoke-eu", NAMESPACE),
    }
    local = built.resources[resource_names.key_gatherer_resources("default", NAMESPACE)[-1]]
    args = local.manifest["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--pool=")] == ["--pool=a", "--pool=b"], "the pools placed there alone"
    remote = built.resources[resource_names.key_gatherer_resources("spoke-eu", NAMESPACE)[-1]]
    assert remote.provider_config.name == "spoke-eu"
    assert remote.manifest["spec"]["template"]["spec"]["containers"][0]["image"] == "flwr/supernode:1.41.0"
    assert not built.direct, "no collection any more"


GIVEN_KEY_POOL = {"name": "given", "replicas": 1, "authKeySecretRef": {"name": "k", "key": "k"}}
GIVEN_AND_MADE = spec(AUTH, supernodes__pools=[{"name": "a", "replicas": 2}, GIVEN_KEY_POOL])
TWO_POOLS = spec(AUTH, supernodes__pools=[{"name": "a", "replicas": 2}, {"name": "b", "replicas": 3}])


@pytest.mark.parametrize(
    ("federation", "observed", "expected", "reason"),
    [
        (TWO_POOLS, observed_workloads(a=sts_ready(2), b=sts_ready(3)), 5,
         "a key for each SuperNode of the place's pools, once they are ready"),
        (TWO_POOLS, observed_workloads(a=sts_ready(2)), None, "a pool not observed yet: its pods are to start"),
        (TWO_POOLS, observed_workloads(a=sts_ready(2), b={"readyReplicas": 3, "updatedReplicas": 2}), None,
         "a pool rolling: its new pods publish new keys"),
        (GIVEN_AND_MADE, observed_workloads(a=sts_ready(2)), 2,
         "a pool whose key the user gives publishes none, and is not waited for"),
        (spec(AUTH_DS), {}, None, "a DaemonSet not observed yet"),
        (spec(AUTH_DS), observed_workloads(edge=ds_ready(4)), 4, "a DaemonSet ready on four nodes"),
        (spec(AUTH_DS), observed_workloads(edge={**ds_ready(4), "numberReady": 3}), None, "a node's pod not ready"),
        (spec(AUTH_DS), observed_workloads(edge=ds_ready(0)), 0, "a DaemonSet on no node: no key to wait for"),
    ],
)  # fmt: skip
def test_a_gatherers_list_is_ready_once_its_place_settled_with_a_key_each(federation, observed, expected, reason):
    # Ready, the provider polls it at its --poll (10 minutes by default); not yet, every 30 s.
    fed = read.federation(xr(federation))
    built = compose.plan(fed, observed)
    name = resource_names.key_gathered_resource("default", NAMESPACE)
    policy = compose.desired(fed, built)[name]["spec"]["readiness"]
    assert built.resources[name].readiness == policy, reason
    if expected is None:
        assert policy["celQuery"].startswith("false "), reason
    elif expected:
        assert policy["policy"] == "DeriveFromCelQuery", reason
        assert policy["celQuery"].endswith(f"int(object.data.count) >= {expected}"), reason
    else:
        assert policy == {"policy": "SuccessfulCreate"}, reason
    gatherer = compose.desired(fed, built)[resource_names.key_gatherer_resources("default", NAMESPACE)[-1]]
    assert gatherer["spec"]["readiness"] == {"policy": "SuccessfulCreate"}, "the rest keep their kind's policy"


ENDPOINTS = {
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["10.0.0.12"]}, {"addresses": ["10.0.0.11", "not-an-address"]}],
    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
}


@pytest.mark.parametrize(
    ("endpoints", "expected", "reason"),
    [
        (
            ENDPOINTS,
            {
                "to": [{"ipBlock": {"cidr": "10.0.0.11/32"}}, {"ipBlock": {"cidr": "10.0.0.12/32"}}],
                "ports": [{"port": 6443, "protocol": "TCP"}],
            },
            "each API server address, sorted, at the port it serves",
        ),
        (
            {"endpoints": [{"addresses": ["fd00::1"]}], "ports": [{"port": 443}]},
            {"to": [{"ipBlock": {"cidr": "fd00::1/128"}}], "ports": [{"port": 443, "protocol": "TCP"}]},
            "IPv6",
        ),
        (None, None, "not observed yet"),
        ({"endpoints": [], "ports": [{"port": 443}]}, None, "no address"),
        ({"endpoints": [{"addresses": ["10.0.0.1"]}], "ports": []}, None, "no port"),
    ],
)
def test_the_api_server_is_admitted_at_the_endpoints_it_publishes(endpoints, expected, reason):
    assert netpol.kube_api_egress(endpoints) == expected, reason


def observed_endpoints(live: dict[str, Any]) -> dict[str, Any]:
    return {
        resource_names.api_endpoints_resource("default"): {
            "apiVersion": objects.OBJECT_API,
            "kind": "Object",
            "status": {"atProvider": {"manifest": {**netpol.KUBE_API_ENDPOINTS, **live}}},
        }
    }


def test_publishing_pods_reach_their_api_server_once_its_endpoints_are_observed():
    fed = read.federation(xr(AUTH))
    before = compose.plan(fed).resources
    endpoints = before[resource_names.api_endpoints_resource("default")]
    assert endpoints.observe
    wrapped = compose.desired(fed, compose.plan(fed))[resource_names.api_endpoints_resource("default")]
    assert wrapped["spec"]["managementPolicies"] == ["Observe"]
    assert "readiness" not in wrapped["spec"]
    policy = resource_names.networkpolicy_resource("default", NAMESPACE)
    assert netpol.kube_api_egress(ENDPOINTS) not in before[policy].manifest["spec"]["egress"]
    after = compose.plan(fed, observed_endpoints(ENDPOINTS)).resources
    assert netpol.kube_api_egress(ENDPOINTS) in after[policy].manifest["spec"]["egress"]
    # Pools that publish nothing get no such rule, nor anything observed.
    plain = read.federation(xr(TLS))
    plan = compose.plan(plain, observed_endpoints(ENDPOINTS)).resources
    assert resource_names.api_endpoints_resource("default") not in plan
    assert netpol.kube_api_egress(ENDPOINTS) not in plan[policy].manifest["spec"]["egress"]


def test_a_held_pools_keys_stay_listed():
    """A pool waiting for the SuperLink's external address is not composed, but its pods may run: keys stay."""
    held = spec(
        AUTH,
        superlink__image="flwr/superlink:1.41.0",
        superlink__service={"type": "LoadBalancer"},
        supernodes__image="flwr/supernode:1.41.0",
        supernodes__pools=[{"name": "eu", "replicas": 1, "providerConfigRef": {"name": "spoke-eu"},
                            "caSecretRef": {"name": "ca"}}],
    )  # fmt: skip
    fed = read.federation(xr(held))
    live = gathered_list(publication(pool="eu"), pools=("eu",))
    built = compose.plan(fed, observed_list(live, cluster="spoke-eu"))
    assert built.held == {"eu": Hold.ADDRESS}
    assert not set(resource_names.key_gatherer_resources("spoke-eu", NAMESPACE)) & set(built.resources)
    listed = built.resources[resource_names.AUTHORIZED_KEYS].manifest["data"]["authorized-keys"]
    assert listed.startswith(f"{KEY} spoke-eu/{NAMESPACE}/"), listed
