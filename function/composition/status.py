"""XR status, per-resource readiness, conditions and warnings, from what Crossplane observed.

The desired resources never depend on any of this.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crossplane.function.resource import Condition

from function.api import exposure, names
from function.api import spec as api_spec
from function.api.spec import PoolSpec, generates_identity
from function.api.status_model import (
    Endpoints,
    FederationClusterStatus,
    FederationStatus,
    PoolStatus,
)
from function.builders import identity, published_keys, superlink, tls
from function.composition import compose, groups, kept, reachability, readiness, resource_names
from function.federation import read
from function.federation.read import pool_resource
from function.federation.value import Federation, Hold
from function.releases.flower import CONTROL_PORT
from function.topology import placement


@dataclasses.dataclass
class Report:
    """What the function reports besides the desired resources."""

    status: FederationStatus | FederationClusterStatus  # the XR's status
    ready: dict[str, bool]  # by composition resource name
    conditions: list[Condition]  # the SDK's, as response.set_conditions takes them
    warnings: list[str]
    # The clusters provider-kubernetes cannot reach, and whether the SuperLink's is one of them.
    unreached: list[reachability.Unreached] = dataclasses.field(default_factory=list)
    hub_unreached: bool = False
    # A FederationCluster's: SuperNodes of its pools whose keys its collections have not observed yet.
    keys_awaited: int = 0


def _why(what: str, o: readiness.Observed) -> str:
    if o.desired is not None and o.ready_count != o.desired:
        message = f"{what} not fully ready ({o.ready_count}/{o.desired})"
    else:
        message = f"{what} not ready"
    return f"{message}: {o.detail}" if o.detail else message


def _condition(kind: str, judged: list[tuple[str, readiness.Observed]], ok_message: str) -> Condition:
    unknown = [f"{what}: {o.detail}" for what, o in judged if o.unknown]
    if unknown:
        return Condition(kind, "Unknown", "StatusUnknown", "; ".join(unknown))
    waiting = [_why(what, o) for what, o in judged if not o.ready]
    if waiting:
        return Condition(kind, "False", "Creating", "; ".join(waiting))
    return Condition(kind, "True", "Available", ok_message)


def _pool_entry(fed: Federation, pool: PoolSpec, o: readiness.Observed) -> PoolStatus:
    spec = fed.spec
    desired, ready = readiness.expected_pods(spec.mode, pool.replicas, o), o.ready_count
    member = fed.member(pool.name)
    return PoolStatus(
        name=pool.name,
        kind=fed.spec.mode,
        desired=desired,
        ready=ready,
        namespace=placement.pool_namespace(fed.namespace, pool),
        providerConfig=placement.pool_cluster(spec, pool),
        selector=member.selector if member else None,
        clusterIndex=member.index if member else None,
    )


def _manifests(built: compose.Plan) -> dict[str, dict[str, Any]]:
    out = {name: c.manifest for name, c in built.resources.items()}
    for name, obj in built.kept.items():
        manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
        if isinstance(manifest, dict) and manifest.get("kind") in ("StatefulSet", "DaemonSet"):
            out[name] = manifest
    return out


def report(fed: Federation, built: compose.Plan, observed: dict[str, Any], generation: Any) -> Report:
    """Judge the observed resources of a Federation (or of a FederationCluster) against what was planned."""
    manifests = _manifests(built)
    judged = {name: readiness.observe(m, kept.live(observed, name)) for name, m in manifests.items()}
    pools = _pools(fed, built, judged, observed)
    # A key collection is ready once made: it gates nothing, the keys it finds come when they come.
    # So is what is only observed: the API server's endpoints are read when they are there.
    observed_only = [name for name, c in built.resources.items() if c.observe]
    ready = {
        **{name: o.ready for name, o in judged.items()},
        **dict.fromkeys([*built.direct, *observed_only], True),
        **{name: groups.is_ready(observed.get(name)) for name in built.parts},
    }
    if fed.part is not None:
        entries = [entry for entry, _ in pools]
        counts = f"{sum(p.ready for p in entries)}/{sum(p.desired for p in entries)} SuperNodes ready"
        unreached = reachability.unreached(observed, _clusters(built))
        conditions = [_supernodes_condition(fed, pools, counts), _reachable_condition(unreached)]
        part = _part_status(entries, generation, built.keys)
        part.unreachableClusters = [u.entry() for u in unreached] or None
        awaited = _keys_awaited(fed, entries, built.keys)
        part.keysAwaited = None if built.keys is None else awaited
        return Report(part, ready, conditions, _warnings(fed, built, manifests, pools), unreached, keys_awaited=awaited)
    # Its own Objects' clusters, and those its FederationClusters report through their groups.
    unreached = reachability.unreached(observed, _clusters(built))
    unreached += [u for name in sorted(built.parts) for u in reachability.reported(observed.get(name))]
    status = _status(fed, built, [entry for entry, _ in pools], generation)
    status.unreachableClusters = [u.entry() for u in unreached] or None
    warnings = [
        *fed.flower.warnings,
        *superlink.exposure_warnings(fed.spec),
        *exposure.warnings(fed.spec),
        *_warnings(fed, built, manifests, pools),
    ]
    conditions = [*_conditions(fed, built, judged, pools), _reachable_condition(unreached)]
    hub = any(u.cluster == fed.hub.name for u in unreached)
    return Report(status, ready, conditions, warnings, unreached, hub)


def _clusters(built: compose.Plan) -> dict[str, str]:
    """Each composed or kept Object's cluster (ProviderConfig name), by composition resource name."""
    out = {name: c.provider_config.name for name, c in built.resources.items()}
    for name, obj in built.kept.items():
        ref = (obj.get("spec") or {}).get("providerConfigRef") if isinstance(obj, dict) else None
        if isinstance(ref, dict) and isinstance(ref.get("name"), str):
            out[name] = ref["name"]
    return out


def _reachable_condition(unreached: list[reachability.Unreached]) -> Condition:
    """Whether provider-kubernetes reaches every cluster; else which, and why, in the client's words.

    What the other conditions and the pools say of such a cluster is its last known state.
    """
    if not unreached:
        return Condition("ClustersReachable", "True", "Available", "provider-kubernetes reaches every cluster")
    why = "CredentialsRefused" if any(u.why == "CredentialsRefused" for u in unreached) else "Unreachable"
    said = "; ".join(u.said() for u in unreached)
    return Condition("ClustersReachable", "False", why, f"{said}; its pools' status is the last seen")


def _part_status(
    pools: list[PoolStatus], generation: Any, keys: list[published_keys.PublishedKey] | None
) -> FederationClusterStatus:
    ready_total, desired_total = sum(p.ready for p in pools), sum(p.desired for p in pools)
    return FederationClusterStatus(
        observedGeneration=generation if isinstance(generation, int) else None,
        supernodes=f"{ready_total}/{desired_total}",
        readySupernodes=ready_total,
        desiredSupernodes=desired_total,
        pools=pools,
        publishedKeys=None if keys is None else published_keys.reported(keys),
    )


def _pools(
    fed: Federation, built: compose.Plan, judged: dict[str, readiness.Observed], observed: dict[str, Any]
) -> list[tuple[PoolStatus, readiness.Observed]]:
    """Each pool's status entry, and how its workload was judged (waiting for what holds it, if unbuilt).

    A pool its cluster's FederationCluster composes is judged by what that one reports, through its group.
    """
    out = []
    for pool in fed.spec.supernodes.pools:
        hold = built.held.get(pool.name)
        waiting = readiness.Observed(ready=False, detail=f"waiting for {hold.value if hold else ''}")
        member = fed.member(pool.name)
        if hold is None and fed.part is None and member is not None and member.cluster != fed.hub:
            group = read.group_resource(read.cluster_resource(member.cluster, namespaced=fed.namespaced))
            o = _reported(observed.get(group), pool.name)
        else:
            o = judged.get(pool_resource(pool.name), waiting)
        out.append((_pool_entry(fed, pool, o), o))
    return out


def _reported(part: Any, pool: str) -> readiness.Observed:
    """A pool as its FederationCluster reports it, rolled up in its group's status.pools; not ready till then."""
    entries = ((part or {}).get("status") or {}).get("pools") if isinstance(part, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == pool:
            desired, ready = entry.get("desired"), entry.get("ready")
            if isinstance(desired, int) and isinstance(ready, int):
                done = ready >= desired > 0
                return readiness.Observed(ready=done, desired=desired, ready_count=ready)
    return readiness.Observed(ready=False, detail="waiting for its FederationCluster to report it")


def _warnings(
    fed: Federation,
    built: compose.Plan,
    manifests: dict[str, dict[str, Any]],
    pools: list[tuple[PoolStatus, readiness.Observed]],
) -> list[str]:
    """What works but is likely not what was meant: an unscheduled DaemonSet, closed Fleet, held pools."""
    warnings = [
        f"Pool {entry.name}: DaemonSet {manifests[pool_resource(entry.name)]['metadata']['name']} is "
        "scheduled on no node; check the pool's nodeSelector, affinity and tolerations"
        for entry, o in pools
        if fed.spec.mode == "DaemonSet" and o.settled and o.desired == 0
    ]
    if fed.part is None and built.remote and fed.spec.networkPolicy.enabled and not fed.spec.networkPolicy.fleetCIDRs:
        warnings.append(
            "The SuperLink's NetworkPolicy admits Fleet traffic from no other cluster: list the "
            "addresses remote SuperNodes come from in spec.networkPolicy.fleetCIDRs"
        )
    if built.kept:
        warnings.append(
            f"Pools {', '.join(sorted(built.kept))} keep their last applied state until what they "
            "wait for is known again"
        )
    return warnings


def _keys_awaited(fed: Federation, pools: list[PoolStatus], keys: list[published_keys.PublishedKey] | None) -> int:
    """How many of the pools' SuperNodes (as their workloads count them) have no key observed yet."""
    if keys is None:
        return 0
    return max(0, sum(p.desired for p in _identity_pools(fed, pools)) - len(keys))


def _identity_pools(fed: Federation, pools: list[PoolStatus]) -> list[PoolStatus]:
    """The pools whose SuperNodes make and register their own keys."""
    return [p for p, spec in zip(pools, fed.spec.supernodes.pools, strict=True) if generates_identity(fed.spec, spec)]


def _status(fed: Federation, built: compose.Plan, pools: list[PoolStatus], generation: Any) -> FederationStatus:
    """The XR's status: counts, the pools, and where to reach the SuperLink."""
    ready_total = sum(p.ready for p in pools)
    desired_total = sum(p.desired for p in pools)
    identities = _identity_pools(fed, pools)
    address = superlink.service_address(fed.name, fed.namespace)
    ports = fed.spec.superlink.service.ports
    return FederationStatus(
        # metadata.generation as the XR carries it: anything but an integer is no generation.
        observedGeneration=generation if isinstance(generation, int) else None,
        version=str(fed.flower.superlink),
        supernodes=f"{ready_total}/{desired_total}",
        readySupernodes=ready_total,
        desiredSupernodes=desired_total,
        registeredSupernodes=sum(p.ready for p in identities) if identities else None,
        clusters=len({(r.kind, r.name) for r in (api_spec.pool_ref(fed.spec, p) for p in fed.spec.supernodes.pools)}),
        endpoints=Endpoints(
            superlinkService=f"{address}:{ports.extra}"
            if fed.spec.superlink.inClusterControlAPI
            else f"127.0.0.1:{CONTROL_PORT}",
            portForward=(
                f"kubectl -n {fed.namespace} port-forward pod/{names.superlink(fed.name)}-0 "
                f"{CONTROL_PORT}:{CONTROL_PORT}"
            ),
            fleet=f"{address}:{ports.grpc}",
            external=built.external.address or None,
        ),
        pools=pools,
    )


def _conditions(
    fed: Federation,
    built: compose.Plan,
    judged: dict[str, readiness.Observed],
    pools: list[tuple[PoolStatus, readiness.Observed]],
) -> list[Condition]:
    """The XR's conditions: SuperLink and SuperNodes always, the others where they apply."""
    entries = [entry for entry, _ in pools]
    ready_total, desired_total = sum(p.ready for p in entries), sum(p.desired for p in entries)
    conditions = [
        _condition(
            "SuperLinkReady",
            [("SuperLink", judged[resource_names.SUPERLINK]), ("SuperLink Service", judged[resource_names.SERVICE])],
            "SuperLink is ready",
        ),
        _supernodes_condition(fed, pools, f"{ready_total}/{desired_total} SuperNodes ready"),
    ]
    identities = _identity_pools(fed, entries)
    if identities:
        conditions.append(_registration_condition(fed, identities))
    if any(p.clusterSelector for p in fed.written.supernodes.pools):
        conditions.append(_selection_condition(fed))
    if built.remote:
        conditions.append(_external_condition(built))
    certificate = judged.get(resource_names.CERTIFICATE)
    if certificate is not None or built.needs_ca:
        conditions.append(_tls_condition(fed, built, certificate))
    return conditions


def _tls_condition(fed: Federation, built: compose.Plan, certificate: readiness.Observed | None) -> Condition:
    """The SuperLink's certificate, when cert-manager issues it, and the CA pools elsewhere trust: each that waits."""
    waiting = []
    if certificate is not None and not certificate.ready:
        waiting.append(f"Certificate {fed.namespace}/{tls.certificate_name(fed.name)}: {certificate.detail}")
    ca = _ca_condition(fed, built) if built.needs_ca else None
    if ca is not None and ca.status != "True":
        waiting.append(ca.message or "")
    if waiting:
        unknown = certificate is not None and certificate.unknown
        status, reason = ("Unknown", "StatusUnknown") if unknown else ("False", "Waiting")
        return Condition("TLSReady", status, reason, "; ".join(waiting))
    issued = ["the SuperLink's certificate is issued"] if certificate is not None else []
    return Condition("TLSReady", "True", "Available", "; ".join([*issued, *([ca.message or ""] if ca else [])]))


def _supernodes_condition(
    fed: Federation, pools: list[tuple[PoolStatus, readiness.Observed]], counts: str
) -> Condition:
    """Whether every pool's SuperNodes are ready; a pool whose selector places it in no cluster is not."""
    unplaced = [] if fed.selection.pending else fed.selection.unmatched
    if unplaced:
        # Otherwise a Federation whose only pool matches no cluster would say True with 0/0.
        return Condition(
            "SuperNodesReady",
            "False",
            "NoMatchingClusters",
            f"no cluster selected for pool {', '.join(unplaced)}: no ProviderConfig carries its labels; {counts}",
        )
    return _condition("SuperNodesReady", [(f"Pool {entry.name}", o) for entry, o in pools], counts)


def _registration_condition(fed: Federation, pools: list[PoolStatus]) -> Condition:
    """Whether every SuperNode that makes its own key has it registered (function/builders/identity.py)."""
    registered, desired = sum(p.ready for p in pools), sum(p.desired for p in pools)
    if desired and registered >= desired:
        return Condition(
            "SuperNodesRegistered", "True", "Available", f"{registered}/{desired} SuperNode keys registered"
        )
    waiting = [f"{p.name} {p.ready}/{p.desired}" for p in pools if p.ready < p.desired or not p.desired]
    return Condition(
        "SuperNodesRegistered",
        "False",
        "RegistrationPending",
        f"{registered}/{desired} SuperNode keys registered (pools {', '.join(waiting)}): each SuperNode pod publishes "
        f"its key in its {identity.INIT_CONTAINER} init container, Crossplane carries it to "
        f"{identity.authorized_keys_name(fed.name)}, and the SuperLink's {identity.REGISTRAR} registers it; until "
        "then the SuperNode is refused and restarts. Their logs say why",
    )


def _selection_condition(fed: Federation) -> Condition:
    """What the pools' cluster selectors stand for (function/topology/clusters.py)."""
    selection = fed.selection
    if selection.pending:
        return Condition(
            "ClustersSelected",
            "Unknown",
            "Listing",
            f"waiting for Crossplane to list the ProviderConfigs of pools {', '.join(selection.pending)}; "
            "existing pools are kept as they are",
        )
    problems = [f"no ProviderConfig carries the labels of pool {name}" for name in selection.unmatched]
    problems += [f"cluster {m.cluster.name} of pool {m.selector} is held: {m.problem}" for m in selection.held]
    counts = []
    for pool in fed.written.supernodes.pools:
        if pool.clusterSelector is not None:
            chosen = sorted(m.cluster.name for m in selection.placed if m.selector == pool.name)
            counts.append(f"pool {pool.name}: {len(chosen)} clusters" + (f" ({_few(chosen)})" if chosen else ""))
    if problems:
        reason = "ClusterSettingsInvalid" if selection.held else "NoMatchingClusters"
        return Condition("ClustersSelected", "False", reason, "; ".join(problems + counts))
    return Condition("ClustersSelected", "True", "Selected", "; ".join(counts))


def _few(names: list[str], first: int = 5) -> str:
    """Some names, then how many more."""
    if len(names) <= first:
        return ", ".join(names)
    return f"{', '.join(names[:first])} and {len(names) - first} more"


def _external_condition(built: compose.Plan) -> Condition:
    ext = built.external
    if ext.address:
        return Condition(
            "ExternalAddressReady", "True", "Available", f"pools in other clusters dial {ext.address} ({ext.source})"
        )
    waiting = [name for name, hold in built.held.items() if hold is Hold.ADDRESS]
    return Condition(
        "ExternalAddressReady",
        "False",
        "Waiting",
        f"pools {', '.join(waiting)} in other clusters wait for {ext.waiting_for}",
    )


def _ca_condition(fed: Federation, built: compose.Plan) -> Condition:
    secret = f"{fed.namespace}/{tls.secret_name(fed.name, fed.spec)}"
    if built.ca_known:
        return Condition("TLSReady", "True", "Available", f"pools elsewhere trust the CA of Secret {secret}")
    return Condition(
        "TLSReady",
        "False",
        "Waiting",
        f"pools {', '.join(built.ca_pools)} wait for the CA certificate (ca.crt) of Secret {secret}, "
        "read through Crossplane's required resources",
    )
