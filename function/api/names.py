"""Names and labels of generated objects, as the flower-operator makes them."""

from __future__ import annotations

import re

from function.api.spec import FederationSpec

MANAGED_BY = "flower-operator"
"""The operator's value, so `kubectl get ... -l app.kubernetes.io/managed-by=flower-operator`
keeps finding Flower workloads after a move to this function."""

POOL_LABEL = "flower.flwr.ai/pool"
INSTANCE_LABEL = "app.kubernetes.io/instance"

# A StatefulSet's pods carry controller-revision-hash=<name>-<hash>, a label
# value of at most 63 characters, which leaves 52 for the name.
MAX_STATEFULSET_NAME = 52
# The least a pool that selects clusters adds to its name: "-", a character
# of the cluster's name, "-" and a hash of five (function/topology/clusters.py).
SELECTED_SUFFIX = "-x-xxxxx"
MAX_NAME = 63

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def superlink(federation: str) -> str:
    """Name of the SuperLink's StatefulSet and Service."""
    return f"{federation}-superlink"


def pool(federation: str, pool_name: str) -> str:
    """Name of a pool's DaemonSet or StatefulSet."""
    return f"{federation}-supernode-{pool_name}"


def labels(federation: str, name: str, component: str, pool_name: str | None = None) -> dict[str, str]:
    """The app.kubernetes.io labels of an object, and its pool's label if it has one."""
    out = {
        "app.kubernetes.io/component": component,
        INSTANCE_LABEL: federation,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/name": name,
    }
    if pool_name is not None:
        out[POOL_LABEL] = pool_name
    return out


def superlink_labels(federation: str) -> dict[str, str]:
    """Labels of the SuperLink's objects; its pods are selected by them."""
    return labels(federation, "superlink", "superlink")


def pool_labels(federation: str, pool_name: str) -> dict[str, str]:
    """Labels of a pool's objects; its pods are selected by them."""
    return labels(federation, "supernode", f"pool-{pool_name}", pool_name)


def generated(federation: str, spec: FederationSpec) -> list[tuple[str, str, str]]:
    """(field the name comes from, name, kind) for every object the function names."""
    out = [
        ("metadata.name", superlink(federation), "StatefulSet"),
        ("metadata.name", superlink(federation), "Service"),
    ]
    for i, p in enumerate(spec.supernodes.pools):
        # A selector pool's names grow by a part of each cluster's name (function/topology/clusters.py).
        name = p.name + SELECTED_SUFFIX if p.clusterSelector is not None else p.name
        out.append((f"spec.supernodes.pools[{i}].name", pool(federation, name), spec.mode))
    return out


def problem(name: str, kind: str) -> str | None:
    """Why name is not a valid name for kind, or None."""
    limit = MAX_STATEFULSET_NAME if kind == "StatefulSet" else MAX_NAME
    if len(name) > limit:
        return f"is {len(name)} characters long; a {kind} name may have at most {limit}"
    pattern = _DNS_1035 if kind == "Service" else _DNS_LABEL
    if not pattern.match(name):
        if kind == "Service":
            return "is not a DNS-1035 label (lower-case letters, digits, '-', starting with a letter)"
        return "is not a DNS-1123 label (lower-case letters, digits and '-')"
    return None
