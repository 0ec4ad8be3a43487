"""NetworkPolicy semantics, written from the Kubernetes API reference, as an
evaluator: is a connection allowed by a set of policies?"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any


@dataclasses.dataclass(frozen=True)
class Endpoint:
    namespace: str | None = None  # None: outside the cluster
    labels: tuple[tuple[str, str], ...] = ()
    ip: str = "10.0.0.1"

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def pod(namespace: str, labels: dict[str, str], ip: str = "10.0.0.1") -> Endpoint:
    return Endpoint(namespace, tuple(sorted(labels.items())), ip)


def external(ip: str) -> Endpoint:
    return Endpoint(None, (), ip)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except", []))
    if other.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": other.namespace}):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or _selects(peer["podSelector"], other.label_map)


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    return not ports or any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports)


def _allowed(policies, subject: Endpoint, other: Endpoint, port: int, protocol: str, direction: str) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    relevant = [
        p
        for p in policies
        if p["metadata"]["namespace"] == subject.namespace
        and _selects(p["spec"]["podSelector"], subject.label_map)
        and direction in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not relevant:
        return True  # not isolated
    for p in relevant:
        for rule in p["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if (
                not peers or any(_peer_matches(peer, p["metadata"]["namespace"], other) for peer in peers)
            ) and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(
    policies: list[dict[str, Any]], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """Both the source's egress and the destination's ingress must allow it."""
    egress = source.namespace is None or _allowed(policies, source, destination, port, protocol, "Egress")
    ingress = destination.namespace is None or _allowed(policies, destination, source, port, protocol, "Ingress")
    return egress and ingress
