"""The front door: an XR, read once into the typed Federation every builder takes.

Every refusal it applies is in function/api/refusals.py; selector pools
become one pool per selected cluster (function/topology/clusters.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from function.api import refusals, versions
from function.api import spec as api_spec
from function.api.spec import FederationSpec, ProviderConfigRef
from function.federation.value import ClusterPart, Federation
from function.topology import clusters

# The FederationCluster of a Federation's flavour: with claims (cluster-scoped), or namespaced.
CLUSTER_KINDS = ("XFederationCluster", "FederationCluster")
# What composes them: a FederationClusterGroup per share of the remote clusters.
GROUP_KINDS = ("XFederationClusterGroup", "FederationClusterGroup")
# How many shares: fixed, so that a cluster's group never changes as others join or leave (moving a
# FederationCluster to another group would delete and make again its objects, restarting its
# SuperNodes). 32 keeps each group's reconcile to about 30 FederationClusters at 1,000 clusters,
# and the Federation's to 32 groups.
GROUPS = 32
CLUSTER_API = "flower.crossplane.io/v1alpha1"
CLAIM_NAME = "crossplane.io/claim-name"
CLAIM_NAMESPACE = "crossplane.io/claim-namespace"

# Fields Crossplane itself adds to an XR's spec; they are not ours to check.
CROSSPLANE_SPEC_FIELDS = (
    "claimRef",
    "compositionRef",
    "compositionRevisionRef",
    "compositionRevisionSelector",
    "compositionSelector",
    "compositionUpdatePolicy",
    "crossplane",
    "environmentConfigRefs",
    "publishConnectionDetailsTo",
    "resourceRefs",
    "writeConnectionSecretToRef",
)


def pool_resource(pool_name: str) -> str:
    """Composition resource name of a pool's workload."""
    return f"pool-{pool_name}"


def cluster_resource(ref: ProviderConfigRef, *, namespaced: bool) -> str:
    """Composition resource name of the FederationCluster of one remote cluster: its ProviderConfig's kind and name."""
    kind = "cluster" if namespaced and ref.kind == "ClusterProviderConfig" else "config"
    return f"cluster-{kind}-{ref.name}"


def group_resource(cluster: str) -> str:
    """Composition resource name of the group that composes the FederationCluster of that resource name.

    A hash of the name, so that the share does not depend on which other clusters there are.
    """
    share = int.from_bytes(hashlib.sha256(cluster.encode()).digest()[:4], "big") % GROUPS
    return f"cluster-group-{share:02d}"


def grouped(observed: Mapping[str, Any], cluster: str) -> dict[str, Any] | None:
    """What the FederationCluster of that resource name was last given: its entry in its observed group.

    Else its own spec, observed by a Federation of a release that composed
    FederationClusters itself: upgrading keeps each cluster's index.
    """
    group: Any = observed.get(group_resource(cluster))
    entries = ((group or {}).get("spec") or {}).get("clusters") if isinstance(group, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == cluster:
            return entry
    own: Any = observed.get(cluster)
    spec = own.get("spec") if isinstance(own, dict) else None
    return spec if isinstance(spec, dict) else None


def is_group(xr: dict[str, Any]) -> bool:
    """Whether an XR is a FederationClusterGroup (either flavour)."""
    return xr.get("kind") in GROUP_KINDS


def is_cluster(xr: dict[str, Any]) -> bool:
    """Whether an XR is a FederationCluster (either flavour), not a Federation."""
    return xr.get("kind") in CLUSTER_KINDS


def federation(
    xr: dict[str, Any],
    required: Mapping[str, list[dict[str, Any]] | None] | None = None,
    observed: dict[str, Any] | None = None,
) -> Federation:
    """Read the XR into a checked Federation; raise SpecError naming the field.

    required holds Crossplane's answers to clusters.requirements by key
    (absent: not answered yet); observed, the composed resources, from which
    selected clusters keep their index.
    """
    given = xr.get("spec") or {}
    ours = {k: v for k, v in given.items() if k not in CROSSPLANE_SPEC_FIELDS} if isinstance(given, dict) else given
    spec = refusals.parse(ours)
    name, namespace, namespaced, bound = _identity(xr, spec)
    refusals.federation_name(name)
    if not any(p.clusterSelector for p in spec.supernodes.pools):
        return _checked(name, namespace, spec, namespaced=namespaced, bound=bound)
    found = clusters.found(spec, required or {}, namespaced=namespaced)
    refusals.cluster_counts(spec, found)
    return _checked(name, namespace, spec, namespaced=namespaced, bound=bound, found=found, observed=observed or {})


def cluster(xr: dict[str, Any]) -> Federation:
    """Read a FederationCluster into the part of its Federation that runs in its one cluster.

    Its pools are read as the Federation read them: the selector pools it
    carries, each standing for this cluster alone at the index the Federation
    keeps for it; what only the whole Federation knows comes with it.
    """
    given = xr.get("spec") or {}
    ours = {k: v for k, v in given.items() if k not in CROSSPLANE_SPEC_FIELDS} if isinstance(given, dict) else given
    part, spec = refusals.cluster_spec(ours)
    own_namespace = (xr.get("metadata") or {}).get("namespace")
    if own_namespace:
        refusals.cluster_namespace(own_namespace, part)
    namespaced = bool(own_namespace)
    found: dict[str, list[clusters.Cluster] | None] = {
        s.selector: [
            clusters.Cluster(part.providerConfigRef, {**part.annotations, clusters.INDEX_ANNOTATION: str(s.index)})
        ]
        for s in part.selected
    }
    fed = _checked(part.federation, part.namespace, spec, namespaced=namespaced, bound=part.bound, found=found)
    offsets = {
        m.name: s.offset
        for s in part.selected
        for m in fed.selection.placed
        if m.selector == s.selector and s.offset is not None
    }
    facts = ClusterPart(
        part.providerConfigRef, part.fleetAddress, part.caCertificate, offsets, part.totalReplicas, part.retiredKeys
    )
    return dataclasses.replace(fed, part=facts)


def _checked(
    name: str,
    namespace: str,
    spec: FederationSpec,
    *,
    namespaced: bool,
    bound: bool,
    found: dict[str, list[clusters.Cluster] | None] | None = None,
    observed: dict[str, Any] | None = None,
) -> Federation:
    """The Federation of a parsed spec: refused where it must be, its images named, its selectors expanded."""
    if bound:
        refusals.claim_namespace(namespace, spec)
    refusals.generated_names(name, spec)
    releases = refusals.releases(spec)
    declared = versions.with_default_images(spec, releases)
    if found is None:
        return Federation(
            name, namespace, declared, releases, namespaced, bound=bound, images=refusals.images(declared)
        )
    context = clusters.Context(
        name,
        namespaced,
        pool_resource,
        namespace if bound else None,
        api_spec.superlink_ref(spec),
        lambda ref: grouped(observed or {}, cluster_resource(ref, namespaced=namespaced)),
    )
    selection = clusters.expand(declared, found, observed or {}, context)
    # Each pool in a cluster runs its selector pool's release.
    pools = {**releases.pools, **{m.name: releases.pools[m.selector] for m in selection.members}}
    expanded = clusters.expanded(declared, selection)
    return Federation(
        name,
        namespace,
        expanded,
        dataclasses.replace(releases, pools=pools),
        namespaced,
        declared,
        selection,
        bound,
        images=refusals.images(expanded),
    )


def _identity(xr: dict[str, Any], spec: FederationSpec) -> tuple[str, str, bool, bool]:
    """The Federation's name and namespace; whether it is a namespaced XR; whether its namespace binds it.

    A claim's are the claim's; a Crossplane v2 namespaced XR's its own (like a
    claim, it owns one namespace); a cluster-scoped XR's, its name and
    spec.namespace. Claims and namespaced XRs are bound to their namespace.
    """
    metadata = xr.get("metadata") or {}
    labels = metadata.get("labels") or {}
    claim_ref = (xr.get("spec") or {}).get("claimRef") or {}
    claim_name = labels.get(CLAIM_NAME) or claim_ref.get("name")
    claim_namespace = labels.get(CLAIM_NAMESPACE) or claim_ref.get("namespace")
    if claim_name and claim_namespace:
        name, namespace, namespaced = claim_name, claim_namespace, False
    elif metadata.get("namespace"):
        name, namespace, namespaced = metadata.get("name") or "", metadata["namespace"], True
    else:
        name, namespace, namespaced = metadata.get("name") or "", spec.namespace or "default", False
    return name, namespace, namespaced, namespaced or bool(claim_name)
