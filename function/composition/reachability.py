"""Which clusters provider-kubernetes cannot reach, read from the Objects it failed to sync there.

A cluster whose API server is down, behind a partition, or whose
ProviderConfig's credentials were rotated away leaves its Objects as they were
last seen (status.atProvider keeps the last live object), and provider-kubernetes
says why on each of them: its Synced condition turns False with the client's
error. The function reads that, per cluster, and says it on the Federation: the
readiness it reports for that cluster is its last known state, and a condition
names the cluster and why. Nothing is deleted or composed differently: the
desired resources never depend on this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from function.api.status_model import UnreachableCluster

# The Kubernetes client's words when credentials are refused or cannot be used: an expired or
# rotated token, a CA that does not match, a kubeconfig that does not parse.
_CREDENTIALS = (
    "Unauthorized",
    "provide credentials",
    "invalid bearer token",
    "x509:",
    "certificate signed by unknown authority",
    "cannot create new Kubernetes client",
    "cannot get credentials",
    "cannot build kube client",
)
# Its words when nothing answers: the API server is stopped, unreachable or too slow.
_NETWORK = (
    "connection refused",
    "no route to host",
    "no such host",
    "i/o timeout",
    "context deadline exceeded",
    "TLS handshake timeout",
    "connection reset by peer",
    "network is unreachable",
    "Client.Timeout",
    "dial tcp",
)
# A provider's message can be long (a URL, a wrapped chain): a condition says enough of it.
MAX_MESSAGE = 300

Why = Literal["CredentialsRefused", "Unreachable"]


@dataclasses.dataclass(frozen=True)
class Unreached:
    """A cluster provider-kubernetes cannot reach, why in a word, and the client's own message."""

    cluster: str
    why: Why
    message: str
    objects: int

    def entry(self) -> UnreachableCluster:
        """As a composite's status lists it."""
        return UnreachableCluster(providerConfig=self.cluster, reason=self.why, message=self.message,
                                  objects=self.objects)  # fmt: skip

    def said(self) -> str:
        """The cluster and why, as the condition says it."""
        word = "its credentials are refused" if self.why == "CredentialsRefused" else "its API server does not answer"
        return f"cluster {self.cluster}: {word} ({self.objects} Object(s) not synced): {self.message}"


def classify(message: str) -> Why | None:
    """Why an Object did not sync, if it is its cluster's fault: its credentials, or its reach."""
    if any(m in message for m in _CREDENTIALS):
        return "CredentialsRefused"
    if any(m in message for m in _NETWORK):
        return "Unreachable"
    return None


def _failure(observed: Any) -> str | None:
    """The message of an observed Object's Synced condition when False, else None."""
    status = observed.get("status") if isinstance(observed, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == "Synced" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "")
    return None


def unreached(observed: Mapping[str, Any], clusters: Mapping[str, str]) -> list[Unreached]:
    """The clusters some of whose Objects failed to sync for their cluster's fault, by cluster name.

    clusters: each composed Object's cluster (ProviderConfig name), by composition resource name.
    """
    found: dict[str, list[tuple[Why, str]]] = {}
    for name, cluster in clusters.items():
        message = _failure(observed.get(name))
        why = classify(message) if message is not None else None
        if why is not None and message is not None:
            found.setdefault(cluster, []).append((why, message))
    out = []
    for cluster, failures in sorted(found.items()):
        # Credentials first: a refused token is what a person must fix; a timeout may pass.
        why, message = min(failures, key=lambda f: (f[0] != "CredentialsRefused", f[1]))
        out.append(Unreached(cluster, why, " ".join(message.split())[:MAX_MESSAGE], len(failures)))
    return out


def reported(composite: Any) -> list[Unreached]:
    """The clusters an observed composite (a FederationCluster, or its group) reports unreached in its status."""
    status = composite.get("status") if isinstance(composite, dict) else None
    entries = status.get("unreachableClusters") if isinstance(status, dict) else None
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        cluster, why, message = entry.get("providerConfig"), entry.get("reason"), entry.get("message")
        if isinstance(cluster, str) and why in ("CredentialsRefused", "Unreachable") and isinstance(message, str):
            out.append(Unreached(cluster, why, message[:MAX_MESSAGE], int(entry.get("objects") or 1)))
    return out
