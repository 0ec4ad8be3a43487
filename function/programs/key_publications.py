"""A SuperNode key's publication: the ConfigMap its pod makes, and which ones count.

Standard library only, shipped inside the programs' archive like flwr_control:
the publisher (identity_program) writes publications, the gatherer
(gather_program) reads a namespace's, and the function's builders
(function/builders/published_keys.py) check what Crossplane carried back, all
with this one definition.

A publication is an immutable ConfigMap `flwr-key-<owner uid>-<key digest>` in
the pool's namespace, owned by the pod (or the StatefulSet claim the key lives
on), labelled with the Federation and pool, holding one P-384 public key in
OpenSSH's one-line form. The API server's admission policy lets a pool's
ServiceAccount create nothing else (function/builders/identity.py
publication_policy). One holder counts once, with the newest key it published
(a rekeyed pod's new key, not the one it replaced); one key counts once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from typing import Any

PUBLIC_KEY_FIELD = "public-key"
CONFIGMAP_PREFIX = "flwr-key-"
# Whose deletion deletes a publication: the pod, or the claim the key lives on.
OWNERS = ("Pod", "PersistentVolumeClaim")
# What identity_program.ensure_key makes: a P-384 key in OpenSSH's one-line form.
KEY_PATTERN = r"ecdsa-sha2-nistp384 [A-Za-z0-9+/]+={0,2}"
PUBLIC_KEY = re.compile(f"^{KEY_PATTERN}$")
# A holder: `<namespace>/<owner kind>/<owner name>`, as Kubernetes spells each.
HOLDER_PATTERN = f"[a-z0-9-]+/(?:{'|'.join(OWNERS)})/[a-z0-9.-]+"


@dataclasses.dataclass(frozen=True)
class Owner:
    """What holds the key: the pod, or the StatefulSet claim the key lives on."""

    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        """The published ConfigMap's ownerReference: Kubernetes deletes it with its owner."""
        return {"apiVersion": "v1", "kind": self.kind, "name": self.name, "uid": self.uid}


def configmap_name(owner_uid: str, public_key: str) -> str:
    """flwr-key-<owner uid>-<digest of the key>: a key made anew is published anew beside the old one."""
    return f"{CONFIGMAP_PREFIX}{owner_uid}-{hashlib.sha256(public_key.encode()).hexdigest()[:8]}"


def key_configmap(owner: Owner, namespace: str, labels: dict[str, str], public_key: str) -> dict[str, Any]:
    """The ConfigMap that publishes public_key for owner: immutable, named after the owner's uid and the key."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(owner.uid, public_key),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner.reference()],
        },
        "immutable": True,
        "data": {PUBLIC_KEY_FIELD: public_key},
    }


@dataclasses.dataclass(frozen=True, order=True)
class Publication:
    """A publication that counts: when Kubernetes made it, its key, and its holder (HOLDER_PATTERN)."""

    created: str
    public_key: str
    holder: str


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a publication of one place must carry: its namespace, its labels, and its pool (one of pools).

    pool_label: the label naming the pool; pools empty: any pool.
    """

    namespace: str
    labels: dict[str, str]
    pool_label: str
    pools: tuple[str, ...] = ()


def checked(expected: Expected, manifest: Any) -> Publication | None:
    """The publication manifest is, if it is what a pool's pod publishes there; None for anything else."""
    if not isinstance(manifest, dict) or manifest.get("apiVersion") != "v1" or manifest.get("kind") != "ConfigMap":
        return None
    meta = manifest.get("metadata") or {}
    labels = meta.get("labels") or {}
    owners = meta.get("ownerReferences") or []
    text = (manifest.get("data") or {}).get(PUBLIC_KEY_FIELD)
    checks = [
        meta.get("namespace") == expected.namespace,
        all(labels.get(k) == v for k, v in expected.labels.items()),
        not expected.pools or labels.get(expected.pool_label) in expected.pools,
        # One owner, a pod or a claim, whose deletion deletes the publication.
        len(owners) == 1 and isinstance(owners[0], dict) and owners[0].get("kind") in OWNERS,
        isinstance(text, str) and PUBLIC_KEY.match(text) is not None,
    ]
    if not all(checks):
        return None
    owner = owners[0]
    # Named as the publisher names it: the owner's uid and the key.
    if meta.get("name") != configmap_name(str(owner.get("uid")), str(text)):
        return None
    holder = f"{expected.namespace}/{owner['kind']}/{owner.get('name')}"
    return Publication(str(meta.get("creationTimestamp") or ""), str(text), holder)


def counted(publications: Iterable[Publication]) -> list[tuple[str, str]]:
    """(key, holder) of what counts, sorted: of each holder its newest key, each key once (its first holder).

    Creation times are to the second: the key breaks a tie, the same way each time.
    """
    newest: dict[str, Publication] = {}
    for publication in publications:
        held = newest.get(publication.holder)
        if held is None or (publication.created, publication.public_key) > (held.created, held.public_key):
            newest[publication.holder] = publication
    out: dict[str, str] = {}
    for key, holder in sorted((p.public_key, p.holder) for p in newest.values()):
        out.setdefault(key, holder)
    return sorted(out.items())
