"""compose.plan's concerns one at a time: each a table of cases, each case with its reason."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from function.composition import compose, kept, objects, placing
from function.federation import read, value
from function.federation.value import Hold
from function.topology import placement
from support.helpers import BASE, spec, xr

NO_ADDRESS = placement.External(None, "none", "the LoadBalancer address of the SuperLink Service")
ADDRESS = placement.External("203.0.113.7:9092", "loadBalancer")
LOCAL_FLEET = "fed-superlink.team-a.svc:9092"
CA = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"

TLS = {"secretName": "superlink-tls"}
HUB = {"providerConfigRef": {"name": "hub"}, "superlink__service": {"type": "LoadBalancer"}}
LOCAL = {"name": "local", "replicas": 1}
EU = {"name": "eu", "replicas": 2, "providerConfigRef": {"name": "spoke-eu"}}
US = {"name": "us", "replicas": 1, "providerConfigRef": {"name": "spoke-us"}}
THEIR_CA = {"caSecretRef": {"name": "their-ca", "key": "root.pem"}}


def federation(s: dict[str, Any]) -> value.Federation:
    if s.get("namespace"):
        # An XR without a claim, free to place pools in other namespaces of the hub.
        return read.federation({"metadata": {"name": "fed"}, "spec": s})
    return read.federation(xr(s))


def pools_spec(*pools: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return spec(BASE, supernodes__pools=list(pools), **{**HUB, **changes})


def placed(
    s: dict[str, Any], external: placement.External = ADDRESS, *, ca_known: bool = True
) -> list[value.PlacedPool]:
    fed = federation(s)
    return [placing.place_pool(fed, pool, external, ca_known=ca_known) for pool in fed.spec.supernodes.pools]


@dataclasses.dataclass(frozen=True)
class PlaceCase:
    reason: str
    spec: dict[str, Any]
    external: placement.External
    ca_known: bool
    # Of the pool: (remote, fleet, trusted Secret or None, copies_ca, hold)
    want: tuple[bool, str | None, str | None, bool, Hold | None]


PLACE_CASES = [
    PlaceCase(
        "a pool beside the SuperLink dials the Service's cluster DNS name",
        pools_spec(LOCAL),
        NO_ADDRESS,
        ca_known=False,
        want=(False, LOCAL_FLEET, None, False, None),
    ),
    PlaceCase(
        "a pool in another cluster dials the external address",
        pools_spec(EU),
        ADDRESS,
        ca_known=False,
        want=(True, "203.0.113.7:9092", None, False, None),
    ),
    PlaceCase(
        "a pool in another cluster waits for an external address",
        pools_spec(EU),
        NO_ADDRESS,
        ca_known=False,
        want=(True, None, None, False, Hold.ADDRESS),
    ),
    PlaceCase(
        "with TLS, a pool beside the SuperLink mounts ca.crt of its Secret and never waits for the CA",
        pools_spec(LOCAL, tls=TLS),
        ADDRESS,
        ca_known=False,
        want=(False, LOCAL_FLEET, "superlink-tls", False, None),
    ),
    PlaceCase(
        "with TLS, a pool in another namespace trusts the function's copy of the CA",
        pools_spec({**LOCAL, "namespace": "other"}, tls=TLS, namespace="team-a"),
        ADDRESS,
        ca_known=True,
        want=(False, LOCAL_FLEET, "fed-superlink-ca", True, None),
    ),
    PlaceCase(
        "with TLS, a remote pool waits for the CA to copy",
        pools_spec(EU, tls=TLS),
        ADDRESS,
        ca_known=False,
        want=(True, "203.0.113.7:9092", "fed-superlink-ca", True, Hold.CA),
    ),
    PlaceCase(
        "with TLS, a remote pool naming its CA Secret never waits for the CA",
        pools_spec({**EU, **THEIR_CA}, tls=TLS),
        ADDRESS,
        ca_known=False,
        want=(True, "203.0.113.7:9092", "their-ca", False, None),
    ),
    PlaceCase(
        "a pool missing both waits for the address first",
        pools_spec(EU, tls=TLS),
        NO_ADDRESS,
        ca_known=False,
        want=(True, None, "fed-superlink-ca", True, Hold.ADDRESS),
    ),
]


@pytest.mark.parametrize("case", PLACE_CASES, ids=lambda c: c.reason)
def test_place_pool(case):
    (p,) = placed(case.spec, case.external, ca_known=case.ca_known)
    secret = p.trust.secret if p.trust else None
    assert (p.remote, p.fleet, secret, p.copies_ca, p.hold) == case.want


@dataclasses.dataclass(frozen=True)
class HoldCase:
    reason: str
    fleet: str | None
    copies_ca: bool
    ca_known: bool
    want: Hold | None


HOLD_CASES = [
    HoldCase("an address and no CA to copy: composed", LOCAL_FLEET, copies_ca=False, ca_known=False, want=None),
    HoldCase("an address and the CA to copy known: composed", LOCAL_FLEET, copies_ca=True, ca_known=True, want=None),
    HoldCase("no CA to copy yet", LOCAL_FLEET, copies_ca=True, ca_known=False, want=Hold.CA),
    HoldCase("no address", None, copies_ca=False, ca_known=True, want=Hold.ADDRESS),
    HoldCase("no address, and no CA: the address is named", None, copies_ca=True, ca_known=False, want=Hold.ADDRESS),
]


@pytest.mark.parametrize("case", HOLD_CASES, ids=lambda c: c.reason)
def test_hold_reason(case):
    assert placing.hold_reason(case.fleet, copies_ca=case.copies_ca, ca_known=case.ca_known) is case.want


@dataclasses.dataclass(frozen=True)
class ResourcesCase:
    """A concern's composed resources for a spec: their names and each one's ProviderConfig."""

    reason: str
    spec: dict[str, Any]
    want: dict[str, str]
    external: placement.External = ADDRESS
    ca_known: bool = True


def composed(resources: dict[str, objects.Composed]) -> dict[str, str]:
    return {name: c.provider_config.name for name, c in resources.items()}


SUPERLINK_CASES = [
    ResourcesCase(
        "the SuperLink and its Service in the hub",
        pools_spec(LOCAL),
        {"superlink": "hub", "superlink-service": "hub"},
    ),
    ResourcesCase(
        "a user's TLS Secret adds nothing",
        pools_spec(LOCAL, tls=TLS),
        {"superlink": "hub", "superlink-service": "hub"},
    ),
    ResourcesCase(
        "cert-manager adds the SuperLink's Certificate",
        pools_spec(LOCAL, tls={"certManager": {"issuerRef": {"name": "flower-ca", "kind": "ClusterIssuer"}}}),
        {"superlink": "hub", "superlink-service": "hub", "superlink-certificate": "hub"},
    ),
]


@pytest.mark.parametrize("case", SUPERLINK_CASES, ids=lambda c: c.reason)
def test_superlink_resources(case):
    assert composed(compose.superlink_resources(federation(case.spec), case.external)) == case.want


SERVICE_ACCOUNT_CASES = [
    ResourcesCase(
        "the SuperLink's own, and one for its namespace's pools, shared by them",
        pools_spec(LOCAL, {**LOCAL, "name": "second"}),
        {"superlink-serviceaccount": "hub", "serviceaccount-hub-team-a": "hub"},
    ),
    ResourcesCase(
        "no pools' account where no pool runs: the SuperLink runs as its own",
        pools_spec(EU),
        {"superlink-serviceaccount": "hub", "serviceaccount-spoke-eu-team-a": "spoke-eu"},
    ),
    ResourcesCase(
        "one more per other cluster and namespace",
        pools_spec(LOCAL, EU, {**EU, "name": "eu-2"}, {**US, "namespace": "fl"}),
        {
            "superlink-serviceaccount": "hub",
            "serviceaccount-hub-team-a": "hub",
            "serviceaccount-spoke-eu-team-a": "spoke-eu",
            "serviceaccount-spoke-us-fl": "spoke-us",
        },
    ),
]


@pytest.mark.parametrize("case", SERVICE_ACCOUNT_CASES, ids=lambda c: c.reason)
def test_service_accounts(case):
    assert composed(compose.service_accounts(federation(case.spec), placed(case.spec))) == case.want


WORKLOAD_CASES = [
    ResourcesCase(
        "one workload per pool, in the pool's cluster",
        pools_spec(LOCAL, EU),
        {"pool-local": "hub", "pool-eu": "spoke-eu"},
    ),
]


@pytest.mark.parametrize("case", WORKLOAD_CASES, ids=lambda c: c.reason)
def test_workloads(case):
    assert composed(compose.workloads(federation(case.spec), placed(case.spec), {})) == case.want


def test_workloads_dial_their_pools_fleet_address():
    s = pools_spec(LOCAL, EU)
    out = compose.workloads(federation(s), placed(s), {})
    args = {name: c.manifest["spec"]["template"]["spec"]["containers"][0]["args"] for name, c in out.items()}
    assert f"--superlink={LOCAL_FLEET}" in args["pool-local"]
    assert "--superlink=203.0.113.7:9092" in args["pool-eu"]


CA_SECRET_CASES = [
    ResourcesCase("no TLS, no copy", pools_spec(EU), {}),
    ResourcesCase("a pool beside the SuperLink mounts its Secret: no copy", pools_spec(LOCAL, tls=TLS), {}),
    ResourcesCase(
        "one copy per cluster and namespace of pools that trust it",
        pools_spec(
            LOCAL,
            EU,
            {**EU, "name": "eu-2"},
            {**LOCAL, "name": "other", "namespace": "other"},
            tls=TLS,
            namespace="team-a",
        ),
        {"ca-spoke-eu-team-a": "spoke-eu", "ca-hub-other": "hub"},
    ),
    ResourcesCase("a pool naming its CA Secret gets no copy", pools_spec({**US, **THEIR_CA}, tls=TLS), {}),
]


@pytest.mark.parametrize("case", CA_SECRET_CASES, ids=lambda c: c.reason)
def test_ca_secrets(case):
    assert composed(compose.ca_secrets(federation(case.spec), placed(case.spec), CA)) == case.want


def test_ca_secrets_hold_the_ca_alone():
    s = pools_spec(EU, tls=TLS)
    (secret,) = compose.ca_secrets(federation(s), placed(s), CA).values()
    assert secret.manifest["metadata"] == {
        "name": "fed-superlink-ca",
        "namespace": "team-a",
        "labels": secret.manifest["metadata"]["labels"],
    }
    assert list(secret.manifest["data"]) == ["ca.crt"]


NAMESPACE_CASES = [
    ResourcesCase("no pool asks for its namespace", pools_spec(LOCAL, {**EU, "namespace": "fl"}), {}),
    ResourcesCase(
        "a pool that asks gets its namespace in its cluster",
        pools_spec(LOCAL, {**EU, "namespace": "fl", "createNamespace": True}),
        {"namespace-spoke-eu-fl": "spoke-eu"},
    ),
]


@pytest.mark.parametrize("case", NAMESPACE_CASES, ids=lambda c: c.reason)
def test_namespaces(case):
    assert composed(compose.namespaces(placed(case.spec))) == case.want


NETWORK_POLICY_CASES = [
    ResourcesCase("disabled: none", pools_spec(LOCAL, EU, networkPolicy={"enabled": False}), {}),
    ResourcesCase(
        "the SuperLink's, and one per pool cluster and namespace",
        pools_spec(LOCAL, {**LOCAL, "name": "second"}, EU),
        {
            "networkpolicy-superlink": "hub",
            "networkpolicy-supernode-hub-team-a": "hub",
            "networkpolicy-supernode-spoke-eu-team-a": "spoke-eu",
        },
    ),
]


@pytest.mark.parametrize("case", NETWORK_POLICY_CASES, ids=lambda c: c.reason)
def test_network_policies(case):
    out = compose.network_policies(federation(case.spec), placed(case.spec), case.external, {})
    assert composed(out) == case.want


OBSERVED_POOL = {
    "apiVersion": "kubernetes.crossplane.io/v1alpha2",
    "kind": "Object",
    "metadata": {"name": "fed-x7k2p-pool-eu"},
    "spec": {"forProvider": {"manifest": {"kind": "StatefulSet"}}},
    "status": {"atProvider": {}},
}


@dataclasses.dataclass(frozen=True)
class KeptCase:
    reason: str
    external: placement.External
    observed: dict[str, Any]
    want: list[str]


KEPT_CASES = [
    KeptCase("a held pool's observed Object is kept", NO_ADDRESS, {"pool-eu": OBSERVED_POOL}, ["pool-eu"]),
    KeptCase("a held pool never created has nothing to keep", NO_ADDRESS, {}, []),
    KeptCase(
        "an observed Object with no spec is not kept",
        NO_ADDRESS,
        {"pool-eu": {"apiVersion": "v1", "kind": "Object"}},
        [],
    ),
    KeptCase("a composed pool is not kept but composed anew", ADDRESS, {"pool-eu": OBSERVED_POOL}, []),
]


@pytest.mark.parametrize("case", KEPT_CASES, ids=lambda c: c.reason)
def test_kept_objects(case):
    returned = kept.kept_objects(placed(pools_spec(LOCAL, EU), case.external), case.observed)
    assert list(returned) == case.want
    for obj in returned.values():
        assert obj == {k: OBSERVED_POOL[k] for k in ("apiVersion", "kind", "spec")}


@dataclasses.dataclass(frozen=True)
class PlanCase:
    reason: str
    spec: dict[str, Any]
    observed: dict[str, Any]
    tls_secret: Any
    # Held pools, whether any is remote, the pools trusting the copied CA, whether the CA was read.
    want: tuple[dict[str, Hold], bool, list[str], bool]


LB_OBSERVED = {
    "superlink-service": {
        "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}}
    }
}
TLS_SECRET = {"data": {"ca.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"}}

PLAN_CASES = [
    PlanCase("one cluster: nothing waits", pools_spec(LOCAL), {}, None, ({}, False, [], False)),
    PlanCase(
        "a remote pool waits for the address",
        pools_spec(LOCAL, EU),
        {},
        None,
        ({"eu": Hold.ADDRESS}, True, [], False),
    ),
    PlanCase(
        "with TLS, a remote pool waits for the CA once the address is known",
        pools_spec(LOCAL, EU, tls=TLS),
        LB_OBSERVED,
        None,
        ({"eu": Hold.CA}, True, ["eu"], False),
    ),
    PlanCase(
        "with the CA read, nothing waits",
        pools_spec(LOCAL, EU, tls=TLS),
        LB_OBSERVED,
        TLS_SECRET,
        ({}, True, ["eu"], True),
    ),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.reason)
def test_plan(case):
    built = compose.plan(federation(case.spec), case.observed, None, case.tls_secret)
    assert (built.held, built.remote, built.ca_pools, built.ca_known) == case.want
    assert built.needs_ca is bool(case.want[2])
    for name in built.held:
        assert read.pool_resource(name) not in built.resources


@dataclasses.dataclass(frozen=True)
class PodManagementCase:
    reason: str
    spec: dict[str, Any]
    # The pool's Object as observed (spec.forProvider.manifest is what was composed last), or None.
    previous: dict[str, Any] | None
    want: str | None


def object_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "spec": {"forProvider": {"manifest": manifest}}}  # fmt: skip


MADE_BEFORE = {"kind": "StatefulSet", "spec": {"replicas": 1}}
POD_MANAGEMENT_CASES = [
    PodManagementCase("a new StatefulSet starts its SuperNodes in parallel", pools_spec(LOCAL), None, "Parallel"),
    PodManagementCase(
        "one made before this policy keeps Kubernetes' default: the field is immutable",
        pools_spec(LOCAL),
        object_of(MADE_BEFORE),
        None,
    ),
    PodManagementCase(
        "one made in order by choice stays so",
        pools_spec(LOCAL),
        object_of({"kind": "StatefulSet", "spec": {"podManagementPolicy": "OrderedReady"}}),
        "OrderedReady",
    ),
    PodManagementCase(
        "one made in parallel stays so",
        pools_spec(LOCAL),
        object_of({"kind": "StatefulSet", "spec": {"podManagementPolicy": "Parallel"}}),
        "Parallel",
    ),
    PodManagementCase(
        "a DaemonSet that becomes a StatefulSet is a new workload",
        pools_spec(LOCAL),
        object_of({"kind": "DaemonSet", "spec": {}}),
        "Parallel",
    ),
    PodManagementCase(
        "an Object observed with no manifest yet is no StatefulSet made before",
        pools_spec(LOCAL),
        {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object"},
        "Parallel",
    ),
]


@pytest.mark.parametrize("case", POD_MANAGEMENT_CASES, ids=lambda c: c.reason)
def test_statefulset_pod_management(case):
    observed = {} if case.previous is None else {read.pool_resource("local"): case.previous}
    built = compose.plan(federation(case.spec), observed, None, None)
    workload = built.resources[read.pool_resource("local")].manifest
    assert workload["spec"].get("podManagementPolicy") == case.want


def test_daemonsets_have_no_pod_management():
    s = spec(BASE, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])
    built = compose.plan(federation(s), {}, None, None)
    assert "podManagementPolicy" not in built.resources[read.pool_resource("edge")].manifest["spec"]
