"""Where each part of a Federation runs, and how remote pools reach the SuperLink.

The SuperLink runs in the cluster of spec.superlink.providerConfigRef (the
hub); each pool in the cluster of its own providerConfigRef. A pool whose
cluster differs from the hub's is remote: it cannot resolve the Service's
cluster DNS name and dials an external address instead.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from function.api.spec import FederationSpec, PoolSpec, pool_ref

_HAS_PORT = re.compile(r"(^\[.*\]:\d+$)|(^[^\[\]:]+:\d+$)")


def pool_cluster(spec: FederationSpec, pool: PoolSpec) -> str:
    """The name of a pool's cluster, as the {cluster} placeholder gives it."""
    return pool_ref(spec, pool).name


def pool_namespace(namespace: str, pool: PoolSpec) -> str:
    """A pool's namespace in its cluster: its own, else the Federation's."""
    return pool.namespace or namespace


@dataclasses.dataclass(frozen=True)
class External:
    """The Fleet address remote pools dial, and where it came from."""

    address: str | None
    source: str  # spec, loadBalancer, nodePort, remembered, or none
    waiting_for: str = ""


def _with_port(host: str, port: int) -> str:
    return host if _HAS_PORT.match(host) else f"{host}:{port}"


def _live_service(live: Any) -> dict[str, Any]:
    return live if isinstance(live, dict) else {}


def _load_balancer_address(service: dict[str, Any], grpc: int) -> External | None:
    """The first ingress address of an observed LoadBalancer Service."""
    status = service.get("status")
    balancer = status.get("loadBalancer") if isinstance(status, dict) else None
    ingress = balancer.get("ingress") if isinstance(balancer, dict) else None
    for entry in ingress if isinstance(ingress, list) else []:
        host = entry.get("ip") or entry.get("hostname") if isinstance(entry, dict) else None
        if isinstance(host, str) and host:
            return External(_with_port(host if ":" not in host else f"[{host}]", grpc), "loadBalancer")
    return None


def _node_port_address(service: dict[str, Any], node_address: str) -> External | None:
    """node_address at the Fleet port's node port of an observed NodePort Service."""
    ports = (service.get("spec") or {}).get("ports") if isinstance(service.get("spec"), dict) else None
    for port in ports if isinstance(ports, list) else []:
        if isinstance(port, dict) and port.get("name") == "fleet" and isinstance(port.get("nodePort"), int):
            return External(f"{node_address}:{port['nodePort']}", "nodePort")
    return None


def external(spec: FederationSpec, live_service: Any, remembered: Any) -> External:
    """The external Fleet address: given, observed, or remembered from the XR status.

    Remembering keeps remote pools' arguments steady through a moment when
    the Service is not observed; a new observation always wins.
    """
    link = spec.superlink
    if link.externalAddress:
        return External(_with_port(link.externalAddress, link.service.ports.grpc), "spec")
    service = _live_service(live_service)
    kind = link.service.type
    if kind == "LoadBalancer":
        observed = _load_balancer_address(service, link.service.ports.grpc)
        waiting = "the LoadBalancer address of the SuperLink Service"
    elif kind == "NodePort":
        if not link.service.nodeAddress:
            return External(None, "none", "spec.superlink.service.nodeAddress (or spec.superlink.externalAddress)")
        observed = _node_port_address(service, link.service.nodeAddress)
        waiting = "the node port of the SuperLink Service"
    else:
        return External(None, "none", "spec.superlink.externalAddress, or service type LoadBalancer or NodePort")
    if observed is not None:
        return observed
    if isinstance(remembered, str) and remembered:
        return External(remembered, "remembered")
    return External(None, "none", waiting)
