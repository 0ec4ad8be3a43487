"""SuperNode keys published through Kubernetes, carried to the SuperLink's side by Crossplane.

Each SuperNode pod publishes its public key in its own cluster as a ConfigMap
(function/programs/identity_program.py): Kubernetes' authorization is the
proof that the key belongs to one of the pool's pods. Here:

* gathered: per cluster and pool namespace, the list that namespace's keys
  gatherer wrote (function/builders/key_gatherer.py), as its Object observed
  it, each line checked again (listed_before: what a place keeps until its
  list is written).
* authorized_keys: the ConfigMap beside the SuperLink that lists them, one line
  per key, sorted: what the SuperLink's registrar will register.
* shards: a Federation's remote clusters' keys do not pass through its own
  call. Each FederationCluster reads only its own gatherers' lists and
  reports the keys it checked in its status (reported); each
  FederationClusterGroup lists its clusters' reports in a ConfigMap of its
  own beside the SuperLink (shard, checked again by reported_lines). A
  Federation of 10,000 SuperNodes would otherwise carry 10,000 Objects in
  every call and list some 3 MB of keys in one ConfigMap, where one Object
  carries about 800: provider-kubernetes keeps what it applied in an
  annotation, and an object's annotations hold 256 KiB. The Federation's own
  list names the shards that should be there (SHARDS_FIELD), so the
  registrar can tell a shard that is missing for a moment from one whose
  clusters left.

Only the pools' own namespaces are observed, never all namespaces: there the
pool's ServiceAccount is the publisher the Federation's Role names; a key
anywhere else is not a proof of anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from function.api import names
from function.builders import identity
from function.programs import gather_program, key_publications

# The label the collections' template puts on each member Object; its value names the Federation.
CARRIED_LABEL = "flower.flwr.ai/federation-keys"
AUTHORIZED_KEYS = identity.AUTHORIZED_KEYS_FILE
# Where the published keys are gathered, beside the SuperLink.
OWNERS = key_publications.OWNERS
_KEY = key_publications.KEY_PATTERN


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def carried_label(federation: str, namespace: str, cluster: str | None = None) -> str:
    """The member Objects' label value: the Federation's name, and a digest of where it lives.

    Two claims of one name in two namespaces must not see each other's keys;
    a label value is at most 63 characters. cluster: for the collections of a
    FederationCluster, its cluster (`<ProviderConfig kind>/<name>`), so that
    its call reads its own members and the Federation's does not read them.
    """
    where = (namespace, federation) if cluster is None else (namespace, federation, cluster)
    return f"{federation[:40]}-{_digest(*where)[:10]}"


@dataclasses.dataclass(frozen=True)
class Place:
    """One cluster and pool namespace whose published keys a gatherer lists, and the pools placed there.

    pools: whose keys alone it observes: two ProviderConfigs naming one cluster (a test fleet, a
    cluster reached two ways) must not each observe, and claim as their own, the other's keys.
    """

    cluster: str
    namespace: str
    pools: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, order=True)
class PublishedKey:
    """A public key and whose it is (cluster, namespace, the owner's kind and name)."""

    public_key: str
    holder: str

    @property
    def line(self) -> str:
        """The key as the registrar reads it: `<key> <cluster>/<namespace>/<owner kind>/<owner name> -`.

        The last field once carried the node ID a SuperNode had registered
        itself as; the registrar no longer trusts it (a publication could name
        another's node), so it is always `-`.
        """
        return f"{self.public_key} {self.holder} -"


def expected(federation: str, place: Place) -> key_publications.Expected:
    """What a publication of the Federation's pools in place carries: the namespace, its labels, a pool of place's."""
    labels = {names.INSTANCE_LABEL: federation, identity.KEY_LABEL: "true"}
    return key_publications.Expected(place.namespace, labels, names.POOL_LABEL, place.pools)


# A line of a gatherer's list: `<key> <namespace>/<owner kind>/<owner name>` (gather_program).
GATHERED_LINE = re.compile(f"(?P<key>{_KEY}) (?P<holder>{key_publications.HOLDER_PATTERN})")


def gathered(place: Place, live: Any) -> list[PublishedKey] | None:
    """The keys place's gatherer listed, as its Object observed the list: each line checked, of the place alone.

    Only the gatherer writes the list (function/builders/key_gatherer.py);
    each line is checked again so that nothing else there becomes a key, and
    named with its cluster. None while the list is not observed or not written
    yet: that says nothing of the keys there (listed_before).
    """
    if not isinstance(live, dict) or (live.get("metadata") or {}).get("namespace") != place.namespace:
        return None
    text = (live.get("data") or {}).get(gather_program.GATHERED_FIELD)
    if not isinstance(text, str):
        return None
    out = []
    for line in text.splitlines():
        match = GATHERED_LINE.fullmatch(line)
        if match is not None and match["holder"].split("/", 1)[0] == place.namespace:
            out.append(PublishedKey(match["key"], f"{place.cluster}/{match['holder']}"))
    return out


def listed_before(place: Place, lines: Any) -> list[PublishedKey]:
    """Of the lines listed before (the list beside the SuperLink, a FederationCluster's report), place's.

    What a place whose gatherer's list is not observed yet keeps: a new list Object (an
    upgrade from the collections, a recreated Object) must not take every key of its place out of
    the SuperLink's list until the provider's next poll, which may outlast the registrar's grace.
    """
    out = []
    for line in lines if isinstance(lines, list) else []:
        match = REPORTED.fullmatch(line) if isinstance(line, str) else None
        if match is not None and match["holder"].startswith(f"{place.cluster}/{place.namespace}/"):
            out.append(PublishedKey(match["key"], match["holder"]))
    return out


def one_per_key(keys: Iterable[PublishedKey]) -> list[PublishedKey]:
    """Sorted, each key once (its first holder): a key two places list is one SuperNode's."""
    out: dict[str, PublishedKey] = {}
    for key in sorted(keys):
        out.setdefault(key.public_key, key)
    return sorted(out.values())


def authorized_keys_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink that lists the published keys."""
    return identity.authorized_keys_name(federation)


def authorized_keys(
    federation: str, namespace: str, labels: dict[str, str], keys: list[PublishedKey], shards: list[str] | None = None
) -> dict[str, Any]:
    """The published keys, one line each (PublishedKey.line); with shards, the groups' lists that should be there.

    shards: the shard ids (shard_id) of the groups the Federation composes or keeps.
    """
    data = {AUTHORIZED_KEYS: _lines(k.line for k in keys)}
    if shards is not None:
        data[SHARDS_FIELD] = _lines(identity.shard_file(s) for s in sorted(shards))
    return _listing(identity.authorized_keys_name(federation), namespace, labels, data)


def _lines(lines: Iterable[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _listing(name: str, namespace: str, labels: dict[str, str], data: dict[str, str]) -> dict[str, Any]:
    """A list the registrar reads, beside the SuperLink."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data,
    }


# The Federation's list of the shard files that should be there, beside its own keys.
SHARDS_FIELD = identity.AUTHORIZED_SHARDS_FILE
# What a FederationCluster reports of a key: a registrar's line, of a holder in its own cluster.
REPORTED = re.compile(
    f"(?P<key>{_KEY}) (?P<holder>(?P<cluster>[^/\\s]+)/[a-z0-9-]+/(?:{'|'.join(OWNERS)})/[a-z0-9.-]+) (?:[0-9]+|-)"
)


def shard_id(group: str) -> str:
    """A group's shard: the number of its share (function/federation/read.py group_resource)."""
    return group.rsplit("-", 1)[-1]


def reported(keys: list[PublishedKey]) -> list[str]:
    """What a FederationCluster reports in its status: the lines of the keys its own call checked."""
    return [k.line for k in keys]


def reported_lines(cluster: str, lines: Any) -> list[str]:
    """The lines of a FederationCluster's report a group lists: well-formed, of holders in its own cluster.

    The report is the function's own writing, read back from the composite's
    status; checked again so that nothing else there becomes a key.
    """
    out = []
    for line in lines if isinstance(lines, list) else []:
        match = REPORTED.fullmatch(line) if isinstance(line, str) else None
        if match is not None and match["cluster"] == cluster:
            out.append(line)
    return out


def shard(federation: str, namespace: str, labels: dict[str, str], shard: str, lines: list[str]) -> dict[str, Any]:
    """A group's ConfigMap beside the SuperLink: its clusters' keys, one line each, sorted, one per key."""
    by_key: dict[str, str] = {}
    for line in sorted(lines):
        by_key.setdefault(line.rsplit(" ", 2)[0], line)
    return _listing(
        identity.shard_name(federation, shard), namespace, labels, {AUTHORIZED_KEYS: _lines(sorted(by_key.values()))}
    )
