"""The FederationClusters of a Federation: one per remote cluster its selector pools run in.

Each carries what its function call needs to compose that cluster's part as
the Federation itself would (function/api/cluster_spec.py): the spec as
written, cut to the selector pools with a member there, and what only the
whole Federation knows. The cluster's objects then travel in that call, not
in the Federation's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.api.spec import FederationSpec, ProviderConfigRef
from function.builders import identity
from function.composition.compose import Plan
from function.composition.kept import live
from function.composition.placing import global_offsets
from function.composition.resource_names import REGISTRATIONS
from function.federation.value import Federation
from function.topology import clusters


def cluster_resource(ref: ProviderConfigRef, *, namespaced: bool) -> str:
    """Composition resource name of a cluster's FederationCluster: its ProviderConfig's kind and name."""
    kind = "cluster" if namespaced and ref.kind == "ClusterProviderConfig" else "config"
    return f"cluster-{kind}-{ref.name}"


def remote_members(fed: Federation) -> dict[str, list[clusters.Member]]:
    """The composed members of selector pools outside the SuperLink's cluster, by cluster resource name."""
    out: dict[str, list[clusters.Member]] = {}
    for m in fed.selection.placed:
        if m.cluster != fed.hub:
            out.setdefault(cluster_resource(m.cluster, namespaced=fed.namespaced), []).append(m)
    return out


def specs(fed: Federation, built: Plan, observed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each remote cluster's FederationCluster spec, by its composition resource name.

    Only for clusters whose pools are not held: a FederationCluster composes
    with the address and CA it is given, so it waits with them.
    """
    if built.external.address is None or (built.needs_ca and built.ca is None):
        return {}
    offsets, total = global_offsets(fed)
    reported = identity.reported_retired(live(observed, REGISTRATIONS)) if fed.registers_keys else []
    out = {}
    for name, members in remote_members(fed).items():
        ref = members[0].cluster
        selectors = {m.selector for m in members}
        out[name] = {
            "federation": fed.name,
            "namespace": fed.namespace,
            "bound": fed.bound,
            "providerConfigRef": ref.model_dump(mode="json"),
            "annotations": members[0].settings,
            "federationSpec": _carried(fed.written, selectors),
            "selected": [_selected(m, offsets.get(m.name)) for m in members],
            "totalReplicas": total,
            "fleetAddress": built.external.address,
            "caCertificate": built.ca,
            "retiredKeys": _retired(reported, ref.name, [m.namespace or fed.namespace for m in members]),
        }
    return {name: {k: v for k, v in spec.items() if v is not None} for name, spec in out.items()}


def _selected(member: clusters.Member, offset: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"selector": member.selector, "index": member.index}
    if offset is not None:
        out["offset"] = offset
    return out


def _carried(written: FederationSpec, selectors: set[str]) -> dict[str, Any]:
    """The spec as written, with only those selector pools and of the SuperLink only what pools read: its release."""
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
