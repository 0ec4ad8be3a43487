"""What an exposed SuperLink lets a stranger do that its spec may not mean: warned about, never refused.

Open-source Flower admits any SuperNode that reaches the Fleet API unless
node authentication is on (--enable-supernode-auth): it registers and
activates itself, receives each run's app and model, and sends updates. A
ClusterIP Service is reached from inside its cluster alone; a NodePort or
LoadBalancer Service, or an external address in front of the SuperLink, is
meant for other clusters and opens that door to whoever reaches it. That can
be meant (a closed network, a trial), so the function warns and composes.

The function reports each warning as a result on the XR and its claim
(function/composition/status.py); the verdicts are made here.
"""

from __future__ import annotations

from function.api.spec import FederationSpec, node_authentication

ANYONE_JOINS = (
    "anyone who reaches the Fleet API can join this Federation as a SuperNode, receive the model and send "
    "updates; enable spec.nodeAuthentication"
)


def _exposed_by(spec: FederationSpec) -> list[str]:
    """The fields that put the Fleet API within reach of other clusters, as the warning names them."""
    fields = []
    if spec.superlink.service.type != "ClusterIP":
        fields.append(f"spec.superlink.service.type is {spec.superlink.service.type}")
    if spec.superlink.externalAddress is not None:
        fields.append("spec.superlink.externalAddress is set")
    return fields


def warnings(spec: FederationSpec) -> list[str]:
    """One warning when the Fleet API is reachable from outside the cluster and admits any SuperNode."""
    fields = _exposed_by(spec)
    if not fields or node_authentication(spec):
        return []
    needs_tls = " (it needs spec.tls)" if spec.tls is None else ""
    return [f"{', '.join(fields)} and spec.nodeAuthentication.enabled is false: {ANYONE_JOINS}{needs_tls}"]
