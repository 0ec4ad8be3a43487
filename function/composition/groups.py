"""A FederationClusterGroup: the FederationClusters of a share of a Federation's remote clusters.

Crossplane gives a composite's reconcile two minutes to read and apply every
resource it composes, one after another. A Federation of 1,000 clusters that
composed 1,000 FederationClusters itself ran out of that time on a busy hub
(docs/operations.md, Large federations); through 32 groups, no composite
applies more than a few dozen. A group is pure fan-out: each FederationCluster
is the group's shared fields plus its entry, exactly what the Federation would
have written, and each is checked by its own call (function/federation/read.py).
The group's status rolls up theirs for the Federation to read. With node
authentication it also lists the keys its FederationClusters report in its
shard beside the SuperLink (function/builders/published_keys.py), so that no
call and no ConfigMap carries every key of a large federation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from crossplane.function.resource import Condition

from function.api import names, refusals
from function.api.cluster_spec import FederationClusterGroupSpec, GroupedCluster
from function.api.status_model import FederationClusterGroupStatus, PoolStatus
from function.builders import published_keys
from function.composition import reachability
from function.composition.kept import as_observed
from function.composition.objects import wrap
from function.composition.resource_names import AUTHORIZED_KEYS
from function.federation.read import CLUSTER_API, CROSSPLANE_SPEC_FIELDS

# The fields every FederationCluster of a group is given alike, in the order a Federation wrote them.
# The FederationClusters a condition names of those not Ready yet.
SHOWN_WAITING = 5
SHARED = ("federation", "namespace", "bound", "totalReplicas", "fleetAddress", "caCertificate")


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a group composes, whether each is ready, and the group's status."""

    desired: dict[str, dict[str, Any]]
    ready: dict[str, bool]
    status: FederationClusterGroupStatus
    # Every FederationCluster Ready with every key it expects listed, as observed: what changes next
    # reaches the group by watch, with nothing else waking it (outcome.SETTLED_GROUP_TTL).
    settled: bool = False

    @property
    def condition(self) -> Condition:
        """SuperNodesReady: whether every FederationCluster of the group is Ready, with the counts."""
        s = self.status
        counts = f"{s.readyClusters}/{s.clusters} clusters ready, {s.supernodes} SuperNodes ready"
        if s.readyClusters >= s.clusters:
            return Condition("SuperNodesReady", "True", "Available", counts)
        waiting = sorted(name for name, ready in self.ready.items() if not ready)
        more = len(waiting) - SHOWN_WAITING
        shown = ", ".join(waiting[:SHOWN_WAITING]) + (f" and {more} more" if more > 0 else "")
        return Condition("SuperNodesReady", "False", "Creating", f"{counts}; waiting for {shown}")


def read(xr: Mapping[str, Any]) -> FederationClusterGroupSpec:
    """A group's spec, refused naming the field where it is not what a Federation writes."""
    given = xr.get("spec") or {}
    ours = {k: v for k, v in given.items() if k not in CROSSPLANE_SPEC_FIELDS} if isinstance(given, dict) else given
    spec = refusals.group_spec(ours)
    own_namespace = (xr.get("metadata") or {}).get("namespace")
    if own_namespace:
        refusals.cluster_namespace(own_namespace, spec, "FederationClusterGroup")
    return spec


def compose(xr: Mapping[str, Any], observed: Mapping[str, Any]) -> Answer:
    """The group's FederationClusters (the kept ones as observed), their readiness, and the group's status."""
    spec = read(xr)
    namespaced = xr.get("kind") == "FederationClusterGroup"
    kind = "FederationCluster" if namespaced else "XFederationCluster"
    desired = {name: {"apiVersion": CLUSTER_API, "kind": kind, "spec": s} for name, s in expand(spec).items()}
    for name in spec.kept:
        previous = as_observed(observed.get(name))
        if previous is not None and name not in desired:
            desired[name] = previous
    ready = {name: is_ready(observed.get(name)) for name in desired}
    generation = (xr.get("metadata") or {}).get("generation")
    status = rolled_up(desired, ready, observed, generation)
    settled = all(ready.values()) and not any(_keys_awaited(observed.get(name)) for name in desired)
    if spec.authorizedKeys is not None:
        # Ready once made, as the Federation's own list: it gates nothing, the keys come when they come.
        desired[AUTHORIZED_KEYS] = _shard(spec, desired, observed, namespaced=namespaced)
        ready[AUTHORIZED_KEYS] = True
    return Answer(desired, ready, status, settled)


def _shard(
    spec: FederationClusterGroupSpec, clusters: Mapping[str, Any], observed: Mapping[str, Any], *, namespaced: bool
) -> dict[str, Any]:
    """The Object of the group's shard beside the SuperLink: the keys each FederationCluster reports of its cluster."""
    keys = spec.authorizedKeys
    if keys is None:
        msg = "a group without authorizedKeys lists no keys"
        raise ValueError(msg)
    lines = []
    for name, composite in sorted(clusters.items()):
        ref = ((composite.get("spec") or {}).get("providerConfigRef") or {}).get("name")
        report = ((observed.get(name) or {}).get("status") or {}).get("publishedKeys")
        lines += published_keys.reported_lines(str(ref), report)
    labels = names.labels(spec.federation, "superlink", "supernode-keys")
    manifest = published_keys.shard(spec.federation, spec.namespace, labels, keys.shard, lines)
    return wrap(manifest, keys.providerConfigRef, namespaced=namespaced)


def expand(spec: FederationClusterGroupSpec) -> dict[str, dict[str, Any]]:
    """Each FederationCluster's spec, by composition resource name: the shared fields and its entry."""
    given = spec.model_dump(mode="json", exclude_none=True)
    shared = {k: given[k] for k in SHARED if k in given}
    return {entry.name: _cluster_spec(shared, spec.federationSpec, entry) for entry in spec.clusters}


def _cluster_spec(shared: dict[str, Any], carried: dict[str, Any], entry: GroupedCluster) -> dict[str, Any]:
    selectors = {s.selector for s in entry.selected}
    out: dict[str, Any] = {
        **{k: shared[k] for k in ("federation", "namespace", "bound") if k in shared},
        "providerConfigRef": entry.providerConfigRef.model_dump(mode="json"),
        "annotations": entry.annotations,
        "federationSpec": _cut(carried, selectors),
        "selected": [s.model_dump(mode="json", exclude_none=True) for s in entry.selected],
        **{k: shared[k] for k in ("totalReplicas", "fleetAddress", "caCertificate") if k in shared},
        "retiredKeys": entry.retiredKeys,
    }
    return {k: v for k, v in out.items() if v != {}}


def _cut(carried: dict[str, Any], selectors: set[str]) -> dict[str, Any]:
    """The carried spec with only those selector pools (the group's holds every pool of its clusters)."""
    supernodes: Any = carried.get("supernodes")
    pools = supernodes.get("pools") if isinstance(supernodes, dict) else None
    if not isinstance(pools, list):
        return carried  # refused by the FederationCluster's own call, which names the field
    mine = [p for p in pools if isinstance(p, dict) and p.get("name") in selectors]
    return {**carried, "supernodes": {**supernodes, "pools": mine}}


def _keys_awaited(obj: Any) -> bool:
    """Whether an observed FederationCluster reports SuperNodes whose keys are not listed yet.

    None reported: no node authentication (or a release that did not report it). Not a count: awaited.
    """
    awaited = ((obj or {}).get("status") or {}).get("keysAwaited") if isinstance(obj, dict) else None
    if awaited is None:
        return False
    return not isinstance(awaited, int) or isinstance(awaited, bool) or awaited != 0


def is_ready(obj: Any) -> bool:
    """Whether an observed composite says it is Ready."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") if isinstance(obj, dict) else None
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


def rolled_up(
    desired: Mapping[str, Any], ready: Mapping[str, bool], observed: Mapping[str, Any], generation: Any
) -> FederationClusterGroupStatus:
    """The group's status: its FederationClusters' pools as they report them, and the counts."""
    pools = [pool for name in sorted(desired) for pool in _reported(observed.get(name))]
    ready_total, desired_total = sum(p.ready for p in pools), sum(p.desired for p in pools)
    unreached = [u for name in sorted(desired) for u in reachability.reported(observed.get(name))]
    return FederationClusterGroupStatus(
        observedGeneration=generation if isinstance(generation, int) else None,
        clusters=len(desired),
        readyClusters=sum(1 for name in desired if ready.get(name)),
        supernodes=f"{ready_total}/{desired_total}",
        readySupernodes=ready_total,
        desiredSupernodes=desired_total,
        pools=pools,
        unreachableClusters=[u.entry() for u in unreached] or None,
    )


def _reported(obj: Any) -> list[PoolStatus]:
    """The pools an observed FederationCluster reports; an entry that is not one is left out."""
    entries = ((obj or {}).get("status") or {}).get("pools") if isinstance(obj, dict) else None
    out = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            out.append(PoolStatus.model_validate(entry))
        except ValueError:
            continue
    return out
