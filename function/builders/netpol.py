"""NetworkPolicies that admit only the traffic Flower needs.

The SuperLink takes Fleet traffic from its SuperNodes (and listed remote
ranges) and, only where the Control API leaves the pod's loopback, Control
traffic from listed namespaces and ranges; SuperNode pods
take no traffic and reach only the SuperLink, DNS, HTTPS when apps may
install their dependencies, and what the user adds.
In-pod links (AppIO, health) never leave the pod.

The rules name the SuperLink's container ports, which follow its Flower
release: from 1.40 the Fleet API proxy's port, which passes the Fleet API
alone, and the Control port only when that listener is opened.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from function.api import names
from function.builders import key_gatherer
from function.federation.value import Federation
from function.releases.flower import CONTROL_PORT

# The EndpointSlice every API server keeps of itself (its Service `kubernetes`), read to admit it.
KUBE_API_ENDPOINTS: dict[str, Any] = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {"name": "kubernetes", "namespace": "default"},
}

NAMESPACE_LABEL = "kubernetes.io/metadata.name"


def supernode_selector(federation: str) -> dict[str, Any]:
    """The SuperNode pods of every pool of a Federation."""
    return {"matchLabels": {"app.kubernetes.io/instance": federation, "app.kubernetes.io/name": "supernode"}}


def pool_pods_selector(federation: str) -> dict[str, Any]:
    """The pods of a Federation in a pool namespace: its SuperNodes, and the gatherer of their keys."""
    return {
        "matchLabels": {"app.kubernetes.io/instance": federation},
        "matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": sorted(["supernode", key_gatherer.NAME])}
        ],
    }


def superlink_selector(federation: str) -> dict[str, Any]:
    """The SuperLink pod of a Federation."""
    return {"matchLabels": names.superlink_labels(federation)}


def _namespace(name: str) -> dict[str, Any]:
    return {"matchLabels": {NAMESPACE_LABEL: name}}


def superlink_policy(fed: Federation, pool_namespaces: list[str]) -> dict[str, Any]:
    """Ingress to the SuperLink pod. pool_namespaces: namespaces of its cluster with pools.

    SuperNodes reach the Fleet ports of the releases they run; when the user
    opened the Control API in the cluster, controlNamespaces and controlCIDRs reach it.
    """
    federation, namespace, spec = fed.name, fed.namespace, fed.spec
    fleet_ports, control = fed.flower.fleet_ports, fed.control_open
    policy = spec.networkPolicy
    fleet_from: list[dict[str, Any]] = []
    for ns in sorted(set(pool_namespaces)):
        peer: dict[str, Any] = {"podSelector": supernode_selector(federation)}
        if ns != namespace:
            peer["namespaceSelector"] = _namespace(ns)
        fleet_from.append(peer)
    fleet_from += [{"ipBlock": {"cidr": cidr}} for cidr in policy.fleetCIDRs]
    control_from: list[dict[str, Any]] = []
    if control:
        control_from += [{"namespaceSelector": _namespace(ns)} for ns in policy.controlNamespaces]
        control_from += [{"ipBlock": {"cidr": cidr}} for cidr in policy.controlCIDRs]
    ingress = []
    if fleet_from:
        ingress.append({"from": fleet_from, "ports": [{"port": port, "protocol": "TCP"} for port in fleet_ports]})
    if control_from:
        ingress.append({"from": control_from, "ports": [{"port": CONTROL_PORT, "protocol": "TCP"}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.superlink(federation),
            "namespace": namespace,
            "labels": names.superlink_labels(federation),
        },
        "spec": {"podSelector": superlink_selector(federation), "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _external_peer(address: str) -> tuple[list[dict[str, Any]], int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        # A DNS name resolves to addresses a policy cannot name: any address, on that port.
        return [], int(port)
    return [{"ipBlock": {"cidr": f"{ip}/{ip.max_prefixlen}"}}], int(port)


def supernode_policy(
    fed: Federation,
    namespace: str,
    superlink_namespace: str | None,
    external: str | None,
    *,
    kube_api: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SuperNode pods of one namespace: no ingress; egress to DNS, the SuperLink and what the user allows.

    superlink_namespace: the SuperLink's namespace when it runs in this cluster;
    external: the address pools dial when it does not; kube_api: the rule to
    the cluster's API server, where the pods publish their keys (kube_api_egress).
    """
    federation, spec, fleet_ports = fed.name, fed.spec, fed.flower.fleet_ports
    egress: list[dict[str, Any]] = [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
    ]
    if superlink_namespace is not None:
        peer: dict[str, Any] = {"podSelector": superlink_selector(federation)}
        if superlink_namespace != namespace:
            peer["namespaceSelector"] = _namespace(superlink_namespace)
        egress.append({"to": [peer], "ports": [{"port": port, "protocol": "TCP"} for port in fleet_ports]})
    if external is not None:
        to, port = _external_peer(external)
        rule: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"}]}
        if to:
            rule["to"] = to
        egress.append(rule)
    if kube_api is not None:
        egress.append(kube_api)
    if spec.allowRuntimeDependencyInstallation:
        # Package indexes have no fixed addresses: any, on HTTPS only.
        egress.append({"ports": [{"port": 443, "protocol": "TCP"}]})
    egress += spec.networkPolicy.supernodeEgress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{federation}-supernode",
            "namespace": namespace,
            "labels": names.labels(federation, "supernode", "network-policy"),
        },
        "spec": {"podSelector": pool_pods_selector(federation), "policyTypes": ["Ingress", "Egress"], "egress": egress},
    }


def kube_api_egress(endpoints: Any) -> dict[str, Any] | None:
    """Egress to a cluster's API servers, from its observed EndpointSlice default/kubernetes; None if unknown.

    The addresses and ports the API server publishes for itself: CNIs judge
    egress to a Service after its translation to an endpoint, so the
    Service's own address would not do. Only the SuperNode pods' identity
    containers hold a token; the rest of the pod reaches an API that answers
    it nothing.
    """
    if not isinstance(endpoints, dict):
        return None
    addresses: set[str] = set()
    for endpoint in endpoints.get("endpoints") or []:
        for text in (endpoint.get("addresses") or []) if isinstance(endpoint, dict) else []:
            try:
                address = ipaddress.ip_address(str(text))
            except ValueError:
                continue
            addresses.add(f"{address}/{address.max_prefixlen}")
    ports = sorted(
        {p["port"] for p in endpoints.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("port"), int)}
    )
    if not addresses or not ports:
        return None
    return {
        "to": [{"ipBlock": {"cidr": cidr}} for cidr in sorted(addresses)],
        "ports": [{"port": port, "protocol": "TCP"} for port in ports],
    }
