"""NetworkPolicies, judged by an evaluator of the NetworkPolicy semantics."""

from __future__ import annotations

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import compose, fn, names
from helpers import BASE, manifests, spec, xr
from netpol_eval import allowed, external, pod

REMOTE = spec(
    BASE,
    providerConfigRef={"name": "hub"},
    superlink__externalAddress="203.0.113.7",
    networkPolicy={
        "fleetCIDRs": ["198.51.100.0/24"],
        "controlNamespaces": ["ml-users"],
        "controlCIDRs": ["192.0.2.0/28"],
        "supernodeEgress": [{"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 5432}]}],
    },
    supernodes__pools=[
        {"name": "local", "replicas": 1},
        {"name": "other-ns", "replicas": 1},
        {"name": "eu", "replicas": 1, "providerConfigRef": {"name": "spoke-eu"}, "namespace": "fl"},
    ],
)

SUPERLINK = pod("team-a", names.superlink_labels("fed"))
SUPERNODE = pod("team-a", names.pool_labels("fed", "local"))
STRANGER = pod("team-a", {"app": "something-else"})
OTHER_FED = pod("team-a", names.pool_labels("other", "local"))


def hub(s=REMOTE):
    out = manifests(s)
    return [m for k, m in out.items() if k == "networkpolicy-superlink" or k.startswith("networkpolicy-supernode-hub-")]


def spoke(s=REMOTE):
    return [m for k, m in manifests(s).items() if k.startswith("networkpolicy-supernode-spoke-eu-")]


def test_supernodes_reach_the_superlink_and_others_do_not():
    assert allowed(hub(), SUPERNODE, SUPERLINK, 9092)
    assert not allowed(hub(), STRANGER, SUPERLINK, 9092)
    assert not allowed(hub(), OTHER_FED, SUPERLINK, 9092)
    assert not allowed(hub(), SUPERNODE, SUPERLINK, 9093)


def test_remote_ranges_reach_only_the_fleet_port():
    assert allowed(hub(), external("198.51.100.23"), SUPERLINK, 9092)
    assert not allowed(hub(), external("198.51.101.23"), SUPERLINK, 9092)
    assert not allowed(hub(), external("198.51.100.23"), SUPERLINK, 9093)


def test_control_api_from_listed_namespaces_and_ranges_only():
    assert allowed(hub(), pod("ml-users", {"app": "notebook"}), SUPERLINK, 9093)
    assert allowed(hub(), external("192.0.2.5"), SUPERLINK, 9093)
    assert not allowed(hub(), pod("default", {"app": "notebook"}), SUPERLINK, 9093)
    assert not allowed(hub(), external("192.0.2.100"), SUPERLINK, 9093)


def test_supernodes_reach_dns_and_what_the_user_allows_and_nothing_else():
    assert allowed(hub(), SUPERNODE, external("10.96.0.10"), 53, "UDP")
    assert allowed(hub(), SUPERNODE, external("10.1.2.3"), 5432)
    assert not allowed(hub(), SUPERNODE, external("93.184.216.34"), 443)
    assert not allowed(hub(), STRANGER, SUPERNODE, 9094)  # no ingress to SuperNodes


def test_allowing_dependency_installation_opens_https_for_supernodes_alone():
    # Package indexes have no fixed addresses: HTTPS anywhere, and nothing more.
    allowing = spec(REMOTE, version="1.41.0", superlink__image=None, supernodes__image=None)
    allowing["allowRuntimeDependencyInstallation"] = True
    assert allowed(hub(allowing), SUPERNODE, external("93.184.216.34"), 443)
    assert not allowed(hub(allowing), SUPERNODE, external("93.184.216.34"), 80)
    assert not allowed(hub(allowing), STRANGER, SUPERNODE, 9094)
    assert not allowed(hub(REMOTE), SUPERNODE, external("93.184.216.34"), 443)


def test_beside_the_grpc_fleet_adapter_supernodes_reach_both_fleet_listeners():
    # A 1.41 SuperLink serving a 1.25 pool over gRPC (9092) and a 1.41 pool over HTTP (9093).
    upgrading = spec(
        BASE,
        providerConfigRef={"name": "hub"},
        version="1.41.0",
        superlink__image=None,
        supernodes__image=None,
        supernodes__pools=[
            {"name": "local", "replicas": 1, "images": {"supernode": "flwr/supernode:1.25.0"}},
            {"name": "new", "replicas": 1},
        ],
    )
    for port in (9092, 9093):
        assert allowed(hub(upgrading), SUPERNODE, SUPERLINK, port), port
        assert not allowed(hub(upgrading), STRANGER, SUPERLINK, port), port


def test_remote_supernodes_reach_the_external_address():
    remote_node = pod("fl", names.pool_labels("fed", "eu"))
    assert allowed(spoke(), remote_node, external("203.0.113.7"), 9092)
    assert not allowed(spoke(), remote_node, external("203.0.113.8"), 9092)


def test_pools_in_other_namespaces_of_the_hub_are_admitted():
    s = {
        **REMOTE,
        "supernodes": {**REMOTE["supernodes"], "pools": [{"name": "x", "replicas": 1, "namespace": "other"}]},
    }
    bare = {"metadata": {"name": "fed"}, "spec": {**s, "namespace": "team-a"}}
    out = compose.manifests(compose.federation(bare))
    pols = [m for k, m in out.items() if k.startswith("networkpolicy-")]
    node = pod("other", names.pool_labels("fed", "x"))
    assert allowed(pols, node, SUPERLINK, 9092)
    assert not allowed(pols, pod("other", {"app": "x"}), SUPERLINK, 9092)


def test_policies_can_be_turned_off():
    assert not [k for k in manifests(spec(BASE, networkPolicy={"enabled": False})) if k.startswith("networkpolicy-")]


def test_remote_pools_without_fleet_cidrs_are_warned_about():
    def warnings(s):
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update(xr(s))
        return [r.message for r in fn.run(req).results if r.severity == fnv1.SEVERITY_WARNING]

    without = {**REMOTE, "networkPolicy": {}}
    assert any("spec.networkPolicy.fleetCIDRs" in w for w in warnings(without))
    assert not any("fleetCIDRs" in w for w in warnings(REMOTE))
