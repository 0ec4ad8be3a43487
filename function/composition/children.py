"""The FederationClusters of a Federation: one per remote cluster its selector pools run in.

Each carries what its own function call needs to compose that cluster's part
as the Federation itself would (function/api/cluster_spec.py): the spec as
written, cut to the selector pools with a member there, and what only the
whole Federation knows. The cluster's objects then travel in that call, not
in the Federation's.

The Federation does not compose them itself but through a fixed number of
FederationClusterGroups (function/composition/groups.py), each composing the
FederationClusters of its share of the clusters: what they share is written
once per group, and no composite applies more than a few dozen resources in
one reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.api.spec import FederationSpec
from function.builders import identity, published_keys
from function.composition.kept import as_observed, live
from function.composition.placing import global_offsets
from function.composition.resource_names import REGISTRATIONS
from function.federation.read import CLUSTER_API, cluster_resource, group_resource
from function.federation.value import Federation, PlacedPool
from function.topology import clusters


def handed(fed: Federation, pool: PlacedPool) -> bool:
    """Whether a pool is composed by its cluster's FederationCluster: a selector's member outside the hub."""
    member = fed.member(pool.name)
    return member is not None and member.cluster != fed.hub


def remote_members(fed: Federation) -> dict[str, list[clusters.Member]]:
    """Every member of a selector pool outside the SuperLink's cluster, held or not, by cluster resource name."""
    out: dict[str, list[clusters.Member]] = {}
    for m in fed.selection.members:
        if m.cluster != fed.hub:
            out.setdefault(cluster_resource(m.cluster, namespaced=fed.namespaced), []).append(m)
    return out


def composites(
    fed: Federation, address: str | None, ca: str | None, observed: Mapping[str, Any], *, needs_ca: bool
) -> dict[str, dict[str, Any]]:
    """The groups of the remote clusters' FederationClusters, by composition resource name.

    None while the pools wait for the address they dial or the CA they trust:
    a FederationCluster composes what it is given, so each group is kept as it
    was (kept). A cluster with a member held by its settings is listed as kept.
    """
    if address is None or (needs_ca and ca is None):
        return {}
    offsets, total = global_offsets(fed)
    reported = identity.reported_retired(live(observed, REGISTRATIONS)) if fed.registers_keys else []
    entries: dict[str, list[dict[str, Any]]] = {}
    held: dict[str, list[str]] = {}
    for name, members in sorted(remote_members(fed).items()):
        group = group_resource(name)
        if any(m.pool is None for m in members):
            held.setdefault(group, []).append(name)
            continue
        ref = members[0].cluster
        entry = {
            "name": name,
            "providerConfigRef": ref.model_dump(mode="json"),
            "annotations": members[0].settings,
            "selected": [_selected(m, offsets.get(m.name)) for m in members],
            "retiredKeys": _retired(reported, ref.name, [m.namespace or fed.namespace for m in members]),
        }
        entries.setdefault(group, []).append(_present(entry))
    shared = {
        "federation": fed.name,
        "namespace": fed.namespace,
        "bound": fed.bound,
        "totalReplicas": total,
        "fleetAddress": address,
        "caCertificate": ca,
    }
    return {
        group: _group(fed, shared, group, entries.get(group, []), held.get(group))
        for group in sorted({*entries, *held})
    }


def _group(
    fed: Federation, shared: dict[str, Any], group: str, mine: list[dict[str, Any]], held: list[str] | None
) -> dict[str, Any]:
    """One group: what its clusters share, the carried spec cut to their pools, their entries and its shard."""
    selectors = {s["selector"] for entry in mine for s in entry["selected"]}
    spec = {
        **shared,
        "federationSpec": _carried(fed.written, selectors),
        "clusters": mine,
        "kept": held,
        "authorizedKeys": _shard(fed, group),
    }
    kind = "FederationClusterGroup" if fed.namespaced else "XFederationClusterGroup"
    return {"apiVersion": CLUSTER_API, "kind": kind, "spec": _present(spec)}


def groups(fed: Federation) -> list[str]:
    """The groups the remote clusters are in, composed or kept, by composition resource name."""
    return sorted({group_resource(name) for name in remote_members(fed)})


def kept(fed: Federation, observed: Mapping[str, Any], composed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The observed groups of remote clusters given nothing new in this reconcile, as they were."""
    out = {}
    for group in groups(fed):
        previous = as_observed(observed.get(group)) if group not in composed else None
        if previous is not None:
            out[group] = previous
    return out


def _shard(fed: Federation, group: str) -> dict[str, Any] | None:
    """Where a group lists its clusters' keys beside the SuperLink, when the SuperLink registers keys."""
    if not fed.keys_sharded:
        return None
    hub = fed.hub
    return {"shard": published_keys.shard_id(group), "providerConfigRef": hub.model_dump(mode="json")}


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields set and not empty: as the API server would keep them."""
    return {k: v for k, v in fields.items() if v is not None and v not in ({}, [])}


def _selected(member: clusters.Member, offset: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"selector": member.selector, "index": member.index}
    if offset is not None:
        out["offset"] = offset
    return out


def _carried(written: FederationSpec, selectors: set[str]) -> dict[str, Any]:
    """The spec as written, with only those selector pools, and of the SuperLink only what pools read: its release."""
    pools = [p for p in written.supernodes.pools if p.name in selectors]
    link = written.superlink
    superlink = type(link)(
        image=link.image, superexecImage=link.superexecImage, providerConfigRef=link.providerConfigRef
    )
    cut = written.model_copy(
        update={"superlink": superlink, "supernodes": written.supernodes.model_copy(update={"pools": pools})}
    )
    dumped: dict[str, Any] = cut.model_dump(mode="json", exclude_defaults=True)
    return dumped


def _retired(reported: list[tuple[str, str]], cluster: str, namespaces: list[str]) -> dict[str, list[str]]:
    """The registrar's report, cut to the holders in one cluster's namespaces."""
    out: dict[str, list[str]] = {}
    for namespace in sorted(set(namespaces)):
        digests = [digest for digest, holder in reported if holder.startswith(f"{cluster}/{namespace}/")]
        if digests:
            out[namespace] = digests
    return out
