"""SuperNode keys published through Kubernetes, carried to the SuperLink's side by Crossplane.

Each SuperNode pod publishes its public key in its own cluster as a ConfigMap
(function/builders/identity_program.py): Kubernetes' authorization is the
proof that the key belongs to one of the pool's pods. Here:

* collection: per cluster and pool namespace, a provider-kubernetes
  ObservedObjectCollection of those ConfigMaps. The provider makes one
  observe-only Object per ConfigMap it finds, labelled so the function can ask
  Crossplane for them all as required resources.
* published: the keys those Objects observed, each checked to come from a
  collection of this Federation and to be a ConfigMap the pool's pods could
  have made there (owned by a pod or a claim, in the collection's namespace).
* authorized_keys: the ConfigMap beside the SuperLink that lists them, one line
  per key, sorted: what the SuperLink's registrar will register.

Only the pools' own namespaces are observed, never all namespaces: there the
pool's ServiceAccount is the publisher the Federation's Role names; a key
anywhere else is not a proof of anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from function.api import names
from function.builders import identity, identity_program

COLLECTION_API = "kubernetes.crossplane.io/v1alpha1"
NAMESPACED_COLLECTION_API = "kubernetes.m.crossplane.io/v1alpha1"
COLLECTION_KIND = "ObservedObjectCollection"
# The label provider-kubernetes puts on each member Object: the name of its collection.
MEMBER_LABEL = "kubernetes.crossplane.io/owned-by-collection"
# The label the collections' template puts on each member Object; its value names the Federation.
CARRIED_LABEL = "flower.flwr.ai/federation-keys"
REQUIREMENT = "supernode-keys"
AUTHORIZED_KEYS = identity.AUTHORIZED_KEYS_FILE
# Where the published keys are gathered, beside the SuperLink.
OWNERS = ("Pod", "PersistentVolumeClaim")
# What identity_program.ensure_key makes: a P-384 key in OpenSSH's one-line form.
PUBLIC_KEY = re.compile(r"^ecdsa-sha2-nistp384 [A-Za-z0-9+/]+={0,2}$")


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def carried_label(federation: str, namespace: str) -> str:
    """The member Objects' label value for a Federation: its name, and a digest of where it lives.

    Two claims of one name in two namespaces must not see each other's keys;
    a label value is at most 63 characters.
    """
    return f"{federation[:40]}-{_digest(namespace, federation)[:10]}"


def collection_name(federation: str, namespace: str, cluster: str, pool_namespace: str) -> str:
    """A collection's name, unique on the control plane, short enough for the member label (63)."""
    return f"{federation[:30]}-keys-{_digest(namespace, federation, cluster, pool_namespace)[:12]}"


@dataclasses.dataclass(frozen=True)
class Place:
    """One cluster and pool namespace whose published keys a collection observes."""

    cluster: str
    namespace: str


def collection(
    federation: str,
    namespace: str,
    place: Place,
    provider_config: dict[str, str],
    labels: dict[str, str],
    *,
    namespaced: bool,
) -> dict[str, Any]:
    """The ObservedObjectCollection of the keys published in one cluster and pool namespace."""
    metadata: dict[str, Any] = {
        "name": collection_name(federation, namespace, place.cluster, place.namespace),
        "labels": labels,
    }
    if namespaced:
        metadata["namespace"] = namespace
    selector = {names.INSTANCE_LABEL: federation, identity.KEY_LABEL: "true"}
    return {
        "apiVersion": NAMESPACED_COLLECTION_API if namespaced else COLLECTION_API,
        "kind": COLLECTION_KIND,
        "metadata": metadata,
        "spec": {
            "observeObjects": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": place.namespace,
                "selector": {"matchLabels": selector},
            },
            "providerConfigRef": provider_config,
            "objectTemplate": {"metadata": {"labels": {CARRIED_LABEL: carried_label(federation, namespace)}}},
        },
    }


@dataclasses.dataclass(frozen=True, order=True)
class PublishedKey:
    """A public key, whose it is (cluster, namespace, the owner's kind and name) and its node ID if published."""

    public_key: str
    holder: str
    node_id: str | None = None


def published(
    federation: str, namespace: str, places: dict[str, Place], members: list[dict[str, Any]]
) -> list[PublishedKey]:
    """The keys the collections' member Objects observed, each checked; sorted, one per key.

    places: the collections this Federation composes, by name. Anything else
    is left out: an Object of another collection, a ConfigMap of another
    namespace or Federation, one no pod or claim owns, or no P-384 key.
    """
    out: dict[str, PublishedKey] = {}
    for member in members:
        labels = (member.get("metadata") or {}).get("labels") or {}
        place = places.get(str(labels.get(MEMBER_LABEL, "")))
        manifest = ((member.get("status") or {}).get("atProvider") or {}).get("manifest")
        if place is None or labels.get(CARRIED_LABEL) != carried_label(federation, namespace):
            continue
        key = _checked(federation, place, manifest)
        if key is not None and key.public_key not in out:
            out[key.public_key] = key
    return sorted(out.values())


def _checked(federation: str, place: Place, manifest: Any) -> PublishedKey | None:
    """The key a live ConfigMap publishes, if it is what a pool's pod publishes in place."""
    if not isinstance(manifest, dict) or manifest.get("apiVersion") != "v1" or manifest.get("kind") != "ConfigMap":
        return None
    meta = manifest.get("metadata") or {}
    labels = meta.get("labels") or {}
    owners = meta.get("ownerReferences") or []
    data = manifest.get("data") or {}
    text, node_id = data.get(identity_program.PUBLIC_KEY_FIELD), data.get(identity_program.NODE_ID_FIELD)
    checks = [
        meta.get("namespace") == place.namespace and labels.get(names.INSTANCE_LABEL) == federation,
        # One owner, a pod or a claim, whose deletion deletes the publication.
        len(owners) == 1 and isinstance(owners[0], dict) and owners[0].get("kind") in OWNERS,
        isinstance(text, str) and PUBLIC_KEY.match(text) is not None,
        node_id is None or (isinstance(node_id, str) and node_id.isdigit()),
    ]
    if not all(checks):
        return None
    owner = owners[0]
    # Named as the program names it: the owner's uid and the key.
    if meta.get("name") != identity_program.configmap_name(str(owner.get("uid")), str(text)):
        return None
    holder = f"{place.cluster}/{place.namespace}/{owner['kind']}/{owner.get('name')}"
    return PublishedKey(str(text), holder, node_id)


def authorized_keys_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink that lists the published keys."""
    return identity.authorized_keys_name(federation)


def authorized_keys(
    federation: str, namespace: str, labels: dict[str, str], keys: list[PublishedKey]
) -> dict[str, Any]:
    """The published keys, one `<key> <cluster>/<namespace>/<owner kind>/<owner name> <node ID or ->` line each."""
    text = "".join(f"{k.public_key} {k.holder} {k.node_id or '-'}\n" for k in keys)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": authorized_keys_name(federation), "namespace": namespace, "labels": labels},
        "data": {AUTHORIZED_KEYS: text},
    }
