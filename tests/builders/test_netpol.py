"""NetworkPolicies, judged by np-guard's connectivity analyzer (tests/support/netpol_judge.py)."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api import names
from function.composition import compose
from function.federation import read
from function.releases.flower import CONTROL_PORT
from function.serving import fn, render
from support.helpers import ANY_NAMESPACE_POLICY, BASE, manifests, spec, xr
from support.netpol_judge import allowed, connections, external, pod, ports, probe
from support.peers import CLAIMS, ROOT, load_all, policy_for

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


def test_supernodes_reach_the_superlink_and_others_do_not(netpolicy):
    assert allowed(netpolicy, hub(), SUPERNODE, SUPERLINK, 9092)
    assert not allowed(netpolicy, hub(), STRANGER, SUPERLINK, 9092)
    assert not allowed(netpolicy, hub(), OTHER_FED, SUPERLINK, 9092)
    assert not allowed(netpolicy, hub(), SUPERNODE, SUPERLINK, 9093)


def test_remote_ranges_reach_only_the_fleet_port(netpolicy):
    assert allowed(netpolicy, hub(), external("198.51.100.23"), SUPERLINK, 9092)
    assert not allowed(netpolicy, hub(), external("198.51.101.23"), SUPERLINK, 9092)
    assert not allowed(netpolicy, hub(), external("198.51.100.23"), SUPERLINK, 9093)


def test_control_api_from_no_one_unless_opened_then_from_listed_namespaces_and_ranges_only(netpolicy):
    # Listed, but the Control API is on the pod's loopback: kubectl port-forward is the way in.
    assert not allowed(netpolicy, hub(), pod("ml-users", {"app": "notebook"}), SUPERLINK, 9093)
    assert not allowed(netpolicy, hub(), external("192.0.2.5"), SUPERLINK, 9093)
    opened = hub(spec(REMOTE, superlink__inClusterControlAPI=True))
    assert allowed(netpolicy, opened, pod("ml-users", {"app": "notebook"}), SUPERLINK, 9093)
    assert allowed(netpolicy, opened, external("192.0.2.5"), SUPERLINK, 9093)
    assert not allowed(netpolicy, opened, pod("default", {"app": "notebook"}), SUPERLINK, 9093)
    assert not allowed(netpolicy, opened, external("192.0.2.100"), SUPERLINK, 9093)
    assert not allowed(netpolicy, opened, SUPERNODE, SUPERLINK, 9093)


def test_supernodes_reach_dns_and_what_the_user_allows_and_nothing_else(netpolicy):
    assert allowed(netpolicy, hub(), SUPERNODE, external("10.96.0.10"), 53, "UDP")
    assert allowed(netpolicy, hub(), SUPERNODE, external("10.1.2.3"), 5432)
    assert not allowed(netpolicy, hub(), SUPERNODE, external("93.184.216.34"), 443)
    assert not allowed(netpolicy, hub(), STRANGER, SUPERNODE, 9094)  # no ingress to SuperNodes


def test_allowing_dependency_installation_opens_https_for_supernodes_alone(netpolicy):
    # Package indexes have no fixed addresses: HTTPS anywhere, and nothing more.
    allowing = spec(REMOTE, version="1.41.0", superlink__image=None, supernodes__image=None)
    allowing["allowRuntimeDependencyInstallation"] = True
    assert allowed(netpolicy, hub(allowing), SUPERNODE, external("93.184.216.34"), 443)
    assert not allowed(netpolicy, hub(allowing), SUPERNODE, external("93.184.216.34"), 80)
    assert not allowed(netpolicy, hub(allowing), STRANGER, SUPERNODE, 9094)
    assert not allowed(netpolicy, hub(REMOTE), SUPERNODE, external("93.184.216.34"), 443)


def test_beside_the_grpc_fleet_adapter_supernodes_reach_both_fleet_listeners(netpolicy):
    # A 1.41 SuperLink serving a 1.25 pool over gRPC (9092) and a 1.41 pool over HTTP (its proxy, 9099).
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
    for port in (9092, 9099):
        assert allowed(netpolicy, hub(upgrading), SUPERNODE, SUPERLINK, port), port
        assert not allowed(netpolicy, hub(upgrading), STRANGER, SUPERLINK, port), port
    assert not allowed(netpolicy, hub(upgrading), SUPERNODE, SUPERLINK, 9093)


def test_remote_supernodes_reach_the_external_address(netpolicy):
    remote_node = pod("fl", names.pool_labels("fed", "eu"))
    assert allowed(netpolicy, spoke(), remote_node, external("203.0.113.7"), 9092)
    assert not allowed(netpolicy, spoke(), remote_node, external("203.0.113.8"), 9092)


def test_pools_in_other_namespaces_of_the_hub_are_admitted(netpolicy):
    s = {
        **REMOTE,
        "supernodes": {**REMOTE["supernodes"], "pools": [{"name": "x", "replicas": 1, "namespace": "other"}]},
    }
    bare = {"metadata": {"name": "fed"}, "spec": {**s, "namespace": "team-a"}}
    out = compose.manifests(read.federation(bare))
    pols = [m for k, m in out.items() if k.startswith("networkpolicy-")]
    node = pod("other", names.pool_labels("fed", "x"))
    assert allowed(netpolicy, pols, node, SUPERLINK, 9092)
    assert not allowed(netpolicy, pols, pod("other", {"app": "x"}), SUPERLINK, 9092)


def test_policies_can_be_turned_off():
    assert not [k for k in manifests(spec(BASE, networkPolicy={"enabled": False})) if k.startswith("networkpolicy-")]


def test_remote_pools_without_fleet_cidrs_are_warned_about():
    def warnings(s):
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update(xr(s))
        req.input.update(ANY_NAMESPACE_POLICY)
        return [r.message for r in fn.run(req).results if r.severity == fnv1.SEVERITY_WARNING]

    without = {**REMOTE, "networkPolicy": {}}
    assert any("spec.networkPolicy.fleetCIDRs" in w for w in warnings(without))
    assert not any("fleetCIDRs" in w for w in warnings(REMOTE))


def test_warnings_reach_the_claim_too():
    # Crossplane records a result targeted at both on the XR and on its claim, where a claim's user looks.
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr({**REMOTE, "networkPolicy": {}}))
    req.input.update(ANY_NAMESPACE_POLICY)
    results = [r for r in fn.run(req).results if r.severity == fnv1.SEVERITY_WARNING]
    assert results
    assert {r.target for r in results} == {fnv1.TARGET_COMPOSITE_AND_CLAIM}


# -- every example, judged whole ---------------------------------------------------------------
# The intended matrix, written once: SuperNodes reach the SuperLink on the Fleet ports pools
# dial, DNS, and only what their spec opens (HTTPS for dependency installation, the user's
# supernodeEgress, a remote SuperLink's address); nothing reaches a SuperNode; the SuperLink
# takes the Control API only where it leaves the pod's loopback (inClusterControlAPI: node
# authentication's registrar dials the loopback), then only from the listed namespaces and ranges, and
# nothing from anyone else. The SuperLink's own egress is not narrowed (its ServerApps'
# needs are the user's), so the matrix says nothing of it.

DNS = {("UDP", 53), ("TCP", 53)}


def _example_clusters(example):
    """The XR's spec, and per cluster the rendered manifests."""
    claim = load_all(example)[0]
    docs, _ = render.render(claim, [], policy=policy_for(example))
    clusters: dict[str, list] = {}
    for doc in (d for d in docs[1:] if d["kind"] == "Object"):
        clusters.setdefault(doc["spec"]["providerConfigRef"]["name"], []).append(doc["spec"]["forProvider"]["manifest"])
    return claim["spec"], clusters


def _role(manifest):
    if manifest["kind"] not in {"DaemonSet", "StatefulSet", "Deployment"}:
        return None
    return manifest["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name")


def _key(manifest):
    return f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}[{manifest['kind']}]"


def _dialled(manifest):
    args = next(c["args"] for c in manifest["spec"]["template"]["spec"]["containers"] if c["name"] == "supernode")
    return next(a for a in args if a.startswith("--superlink=")).partition("=")[2]


def _pod_port(manifests, address):
    """The SuperLink pod's port behind an address: a Service's port is translated to its
    targetPort before policies see it; another address (a remote SuperLink) stays as is."""
    host, _, port = address.rpartition(":")
    name, _, rest = host.partition(".")
    namespace = rest.partition(".")[0]
    for m in manifests:
        if m["kind"] == "Service" and (m["metadata"]["name"], m["metadata"]["namespace"]) == (name, namespace):
            entry = next(p for p in m["spec"]["ports"] if p["port"] == int(port))
            target = entry.get("targetPort", entry["port"])
            if isinstance(target, str):  # a named port of the SuperLink's containers
                pods = [w["spec"]["template"]["spec"] for w in manifests if _role(w) == "superlink"]
                target = next(cp["containerPort"] for pod in pods for c in pod["containers"]
                              for cp in c.get("ports", []) if cp.get("name") == target)  # fmt: skip
            return ("TCP", int(target))
    return ("TCP", int(port))


def _tcp_ports(rules):
    return {("TCP", p["port"]) for r in rules for p in r.get("ports", []) if p.get("protocol", "TCP") == "TCP"}


def _reach(conn):
    return {(protocol, n) for protocol, numbers in ports(conn).items() for n in numbers}


def _within(source, ranges):
    first, _, last = source.partition("-")
    return any(ipaddress.ip_address(first) in r and ipaddress.ip_address(last) in r for r in ranges)


@dataclasses.dataclass
class Intent:
    """What a Federation's spec and status say may connect, in one cluster."""

    manifests: list
    supernodes: dict
    superlinks: list
    fleet: set  # the SuperLink pod's ports SuperNodes may reach
    control: tuple  # the SuperLink pod's Control API port
    opened: set  # what SuperNodes may reach anywhere: DNS, HTTPS for installs, the user's egress
    control_namespaces: list  # the namespaces that may reach the Control API
    listed: list  # the namespaces the spec lists (probed, whether or not they may)
    ranges: list


def intent(spec_, manifests) -> Intent:
    policy = spec_.get("networkPolicy") or {}
    opened = DNS | _tcp_ports(policy.get("supernodeEgress", []))
    if spec_.get("allowRuntimeDependencyInstallation"):
        opened.add(("TCP", 443))
    supernodes = {_key(m): m for m in manifests if _role(m) == "supernode"}
    superlinks = [_key(m) for m in manifests if _role(m) == "superlink"]
    if not superlinks:  # the SuperLink is in another cluster: its address, on the port pools dial
        opened |= {_pod_port(manifests, _dialled(m)) for m in supernodes.values()}
    control = ("TCP", CONTROL_PORT)
    # What the pools dial: never the Control API, node authentication or not.
    fleet = {_pod_port(manifests, _dialled(m)) for m in supernodes.values()}
    control_open = bool((spec_.get("superlink") or {}).get("inClusterControlAPI"))
    listed = policy.get("controlNamespaces", [])
    cidrs = policy.get("fleetCIDRs", []) + (policy.get("controlCIDRs", []) if control_open else [])
    return Intent(manifests, supernodes, superlinks, fleet, control, opened, listed if control_open else [],
                  listed, [ipaddress.ip_network(c) for c in cidrs])  # fmt: skip


def violations(conns, want: Intent) -> list[str]:
    """The analyzer's connections that break the intended matrix, and the intended ones missing."""
    out = [f"{c['src']} reaches a SuperNode" for c in conns if c["dst"] in want.supernodes]
    return out + _supernode_violations(conns, want) + _superlink_violations(conns, want)


def _supernode_violations(conns, want: Intent) -> list[str]:
    out = []
    for key, manifest in want.supernodes.items():
        mine = {c["dst"]: _reach(c["conn"]) for c in conns if c["src"] == key}
        if not any(DNS <= reach for reach in mine.values()):
            out.append(f"{key} has no DNS")
        for dst, reach in mine.items():
            if dst not in want.superlinks:
                out += [f"{key} reaches {dst} on {sorted(reach - want.opened)[:3]}"] if reach - want.opened else []
            elif _pod_port(want.manifests, _dialled(manifest)) not in reach or not reach <= want.fleet:
                out.append(f"{key} reaches {dst} on {sorted(reach)}, not {sorted(want.fleet)}")
    return out


def _superlink_violations(conns, want: Intent) -> list[str]:
    out = []
    for superlink in want.superlinks:
        for c in conns:
            if c["dst"] != superlink or c["src"] in want.supernodes:
                continue  # SuperNodes: judged from their side
            if "[" not in c["src"]:  # an address range outside the cluster
                out += [] if _within(c["src"], want.ranges) else [f"{c['src']} reaches {superlink}"]
            elif c["src"].partition("/")[0] not in want.control_namespaces or _reach(c["conn"]) != {want.control}:
                out.append(f"{c['src']} reaches {superlink} on {c['conn']}")
        notebooks = {c["src"] for c in conns if c["dst"] == superlink and c["src"].endswith("/notebook[Pod]")}
        if notebooks != {f"{n}/notebook[Pod]" for n in want.control_namespaces}:
            out.append(f"the Control API is reached from {sorted(notebooks)}, not {want.control_namespaces}")
    return out


def judge_example(netpolicy, spec_, clusters) -> dict[str, list[str]]:
    """Per cluster, what the analyzer finds against the intended matrix (probe pods added)."""
    out = {}
    for cluster, rendered in clusters.items():
        want = intent(spec_, rendered)
        assert want.supernodes or want.superlinks, cluster
        namespaces = sorted({m["metadata"]["namespace"] for m in rendered if m["metadata"].get("namespace")})
        probes = [probe("stranger", n, {"app": "stranger"}) for n in [*namespaces, "elsewhere"]]
        probes += [probe("notebook", n, {"app": "notebook"}) for n in want.listed]
        out[cluster] = violations(connections(netpolicy, rendered + probes), want)
    return out


EXAMPLES = [*CLAIMS, ROOT / "examples" / "xr.yaml", ROOT / "examples" / "v2" / "federation.yaml"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{p.parent.name}/{p.stem}" for p in EXAMPLES])
def test_every_example_allows_the_intended_connections_and_no_more(netpolicy, example):
    spec_, clusters = _example_clusters(example)
    assert judge_example(netpolicy, spec_, clusters) == {c: [] for c in clusters}, example.name


def _without(kind_prefix):
    return lambda ms: [
        m for m in ms if not (m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith(kind_prefix))
    ]


def _open_egress(rendered):
    theirs = next(m for m in rendered if m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith("-supernode"))
    stray = {**theirs, "metadata": {**theirs["metadata"], "name": "stray"}, "spec": {**theirs["spec"], "egress": [{}]}}
    return [*rendered, stray]


@pytest.mark.parametrize(
    ("why", "change", "found"),
    [
        ("SuperNodes unisolated take anything", _without("-supernode"), "reaches a SuperNode"),
        ("the SuperLink unisolated takes anything", _without("-superlink"), "stranger[Pod] reaches"),
        ("a stray rule opening SuperNodes' egress", _open_egress, "reaches ml-users/notebook[Pod]"),
    ],
)
def test_the_matrix_can_fail(netpolicy, why, change, found):
    spec_, clusters = _example_clusters(ROOT / "examples" / "claims" / "production.yaml")
    hub_cluster = next(iter(clusters))
    clusters = {hub_cluster: change(clusters[hub_cluster])}
    problems = judge_example(netpolicy, spec_, clusters)[hub_cluster]
    assert any(found in p for p in problems), (why, problems)


RELEASES = sorted(p.stem for p in (ROOT / "tests" / "flower").glob("*.txt"))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("opened", [False, True], ids=["loopback", "in-cluster"])
def test_per_release_what_the_control_namespaces_reach(netpolicy, release, opened):
    """A listed namespace reaches nothing while the Control API stays on the pod's loopback; opened,
    it reaches the Control port alone, never the port SuperNodes use, whatever the release (from
    1.40 the Fleet API proxy's port passes the Fleet API alone)."""
    s = spec(BASE, version=release, superlink__image=None, supernodes__image=None,
             superlink__inClusterControlAPI=opened, networkPolicy={"controlNamespaces": ["ml-users"]})  # fmt: skip
    claim = xr(s)
    docs, _ = render.render(claim, [])
    rendered = [d["spec"]["forProvider"]["manifest"] for d in docs[1:]]
    assert judge_example(netpolicy, s, {"hub": rendered}) == {"hub": []}, release
    want = intent(s, rendered)
    conns = connections(netpolicy, [*rendered, probe("notebook", "ml-users", {"app": "notebook"})])
    superlink = want.superlinks[0]
    notebook = [_reach(c["conn"]) for c in conns if c["src"] == "ml-users/notebook[Pod]" and c["dst"] == superlink]
    supernode = next(_reach(c["conn"]) for c in conns if c["src"] in want.supernodes and c["dst"] == superlink)
    assert notebook == ([{want.control}] if opened else []), release
    assert want.control not in supernode, (release, supernode)
