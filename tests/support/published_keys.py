"""Published SuperNode keys as Crossplane observes them: a Federation's names, two keys, a collection's member.

Shared by the tests of the key publication (test_published_keys.py) and of remote clusters' keys (test_key_shards.py).
"""

from __future__ import annotations

from typing import Any

from function.builders import identity, published_keys
from function.composition import objects
from function.programs import key_publications
from support.helpers import BASE, spec

TLS = spec(BASE, tls={"secretName": "superlink-tls"})
AUTH = spec(TLS, nodeAuthentication={"enabled": True})
# The claim helper names the XR fed-x7k2p, claimed as fed in team-a.
FED, NAMESPACE = "fed", "team-a"
KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBP0="
OTHER_KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBQ1="
COLLECTION = published_keys.collection_name(FED, NAMESPACE, "default", NAMESPACE)
CARRIED = published_keys.carried_label(FED, NAMESPACE)


def member(  # noqa: PLR0913 - a keyword per field a case changes
    key: str = KEY,
    *,
    collection: str = COLLECTION,
    carried: str = CARRIED,
    namespace: str = NAMESPACE,
    owner_kind: str = "PersistentVolumeClaim",
    uid: str = "2f1c",
    holder: str = "supernode-identity-fed-default-0",
    created: str = "2026-12-01T10:00:00Z",
    pool: str = "default",
    **changes: Any,
) -> dict[str, Any]:
    """A member Object of a key collection, observing the ConfigMap a SuperNode pod of pool published."""
    configmap = key_publications.key_configmap(
        key_publications.Owner(owner_kind, holder, uid),
        namespace,
        identity.publication_labels(FED, pool),
        key,
    )
    configmap["metadata"]["creationTimestamp"] = created
    for path, value in changes.items():
        node = configmap
        *parents, last = path.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return {
        "apiVersion": objects.OBJECT_API,
        "kind": "Object",
        "metadata": {"labels": {published_keys.MEMBER_LABEL: collection, published_keys.CARRIED_LABEL: carried}},
        "status": {"atProvider": {"manifest": configmap}},
    }
