"""An exposed Fleet API without node authentication is warned about: anyone who reaches it can join."""

from __future__ import annotations

import pytest

from function.api import exposure
from function.api.refusals import parse
from support.helpers import BASE, spec

TLS = {"tls": {"secretName": "superlink-tls"}}
AUTH = {**TLS, "nodeAuthentication": {"enabled": True}}
EXTERNAL = "fleet.flower.example.com:443"
WHAT_STRANGERS_DO = (
    "spec.nodeAuthentication.enabled is false: anyone who reaches the Fleet API can join this Federation as a "
    "SuperNode, receive the model and send updates; enable spec.nodeAuthentication"
)


def warned(exposed: str, *, tls: bool) -> list[str]:
    return [f"{exposed} and {WHAT_STRANGERS_DO}{'' if tls else ' (it needs spec.tls)'}"]


@pytest.mark.parametrize(
    ("reason", "s", "want"),
    [
        ("ClusterIP, no external address: only the cluster reaches the Fleet API", spec(BASE), []),
        ("ClusterIP with TLS: still only the cluster", spec(BASE, **TLS), []),
        (
            "LoadBalancer without TLS: whoever reaches it joins, and authentication needs TLS first",
            spec(BASE, superlink__service={"type": "LoadBalancer"}),
            warned("spec.superlink.service.type is LoadBalancer", tls=False),
        ),
        (
            "LoadBalancer with TLS: TLS proves the SuperLink to SuperNodes, not SuperNodes to it",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, **TLS),
            warned("spec.superlink.service.type is LoadBalancer", tls=True),
        ),
        (
            "LoadBalancer narrowed to known ranges: a stranger inside them still joins",
            spec(
                BASE, superlink__service={"type": "LoadBalancer", "loadBalancerSourceRanges": ["192.0.2.0/24"]}, **TLS
            ),
            warned("spec.superlink.service.type is LoadBalancer", tls=True),
        ),
        (
            "NodePort: every node's port leads to the Fleet API",
            spec(BASE, superlink__service={"type": "NodePort", "nodeAddress": "203.0.113.7"}, **TLS),
            warned("spec.superlink.service.type is NodePort", tls=True),
        ),
        (
            "ClusterIP behind an external address (an ingress): the address is for other clusters",
            spec(BASE, superlink__externalAddress=EXTERNAL, **TLS),
            warned("spec.superlink.externalAddress is set", tls=True),
        ),
        (
            "LoadBalancer and an external address: one warning naming both",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, superlink__externalAddress=EXTERNAL, **TLS),
            warned(
                "spec.superlink.service.type is LoadBalancer, spec.superlink.externalAddress is set", tls=True
            ),
        ),
        (
            "nodeAuthentication written but off: the same as unset",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, nodeAuthentication={"enabled": False}, **TLS),
            warned("spec.superlink.service.type is LoadBalancer", tls=True),
        ),
        (
            "LoadBalancer with node authentication: only registered keys join",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, **AUTH),
            [],
        ),
        ("NodePort with node authentication", spec(BASE, superlink__service={"type": "NodePort"}, **AUTH), []),
        ("external address with node authentication", spec(BASE, superlink__externalAddress=EXTERNAL, **AUTH), []),
    ],
)  # fmt: skip
def test_an_exposed_fleet_api_without_node_authentication_is_warned(reason, s, want):
    assert exposure.warnings(parse(s)) == want, reason
