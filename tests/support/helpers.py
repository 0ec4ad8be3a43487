"""Spec builders shared by the unit tests."""

from __future__ import annotations

import copy
from typing import Any

from function.builders import pods
from function.composition import compose
from function.federation import read

BASE: dict[str, Any] = {
    "mode": "StatefulSet",
    "isolationMode": "subprocess",
    "superlink": {"image": "flwr/superlink:1.25.0"},
    "supernodes": {"image": "flwr/supernode:1.25.0", "pools": [{"name": "default", "replicas": 2}]},
}

PROCESS: dict[str, Any] = {
    "mode": "StatefulSet",
    "isolationMode": "process",
    "superlink": {"image": "flwr/superlink:1.25.0", "superexecImage": "flwr/superexec:1.25.0"},
    "supernodes": {
        "image": "flwr/supernode:1.25.0",
        "pools": [{"name": "default", "replicas": 2, "images": {"superexecClientApp": "flwr/superexec:1.25.0"}}],
    },
}


def spec(base: dict[str, Any] = BASE, **changes: Any) -> dict[str, Any]:
    """A copy of base with changes at paths whose parts are joined by "__".

    Keyword names cannot hold dots, hence "__": spec(superlink__image="x")
    sets superlink.image; a number picks a list item, as in
    spec(supernodes__pools__0__replicas=3).
    """
    out = copy.deepcopy(base)
    for dotted, value in changes.items():
        node = out
        parts = dotted.split("__")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(parts[-1])] = value
        else:
            node[parts[-1]] = value
    return out


def pool(s: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """s with its first pool updated."""
    out = copy.deepcopy(s)
    out["supernodes"]["pools"][0].update(fields)
    return out


def xr(s: dict[str, Any], name: str = "fed", namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederation",
        "metadata": {
            "name": f"{name}-x7k2p",
            "labels": {read.CLAIM_NAME: name, read.CLAIM_NAMESPACE: namespace},
        },
        "spec": s,
    }


def manifests(s: dict[str, Any], name: str = "fed", namespace: str = "team-a") -> dict[str, dict[str, Any]]:
    return compose.manifests(read.federation(xr(s, name, namespace)))


HARDENING_POD_FIELDS = ("securityContext", "serviceAccountName", "automountServiceAccountToken")
HARDENING_CONTAINER_FIELDS = ("readinessProbe", "livenessProbe")


def without_hardening(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec without what function/builders/pods.py adds to every pod (tested in test_pods.py),
    so builder tests see their own concern only."""
    out = {k: v for k, v in pod_spec.items() if k not in HARDENING_POD_FIELDS}
    volumes = [v for v in out.get("volumes", []) if not v["name"].startswith("scratch-")]
    if volumes:
        out["volumes"] = volumes
    else:
        out.pop("volumes", None)
    containers = []
    for original in out["containers"]:
        c = {k: v for k, v in original.items() if k not in HARDENING_CONTAINER_FIELDS}
        c["args"] = [a for a in c["args"] if not a.startswith("--health-server-address=")]
        if c.get("securityContext") == pods.CONTAINER_SECURITY:
            del c["securityContext"]
        mounts = [m for m in c.get("volumeMounts", []) if not m["name"].startswith("scratch-")]
        if mounts:
            c["volumeMounts"] = mounts
        else:
            c.pop("volumeMounts", None)
        containers.append(c)
    out["containers"] = containers
    return out


def pod(s: dict[str, Any], resource: str = "pool-default") -> dict[str, Any]:
    return without_hardening(manifests(s)[resource]["spec"]["template"]["spec"])


def container(s: dict[str, Any], name: str = "supernode", resource: str = "pool-default") -> dict[str, Any]:
    return next(c for c in pod(s, resource)["containers"] if c["name"] == name)


# A platform policy that lets pools use any namespace (but a cluster's own): for tests of
# placement, not of tenancy (tests/api/test_policy.py).
ANY_NAMESPACE_POLICY = {"apiVersion": "flower.fn.crossplane.io/v1alpha1", "kind": "Policy", "namespaces": ["*"]}
