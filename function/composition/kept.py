"""What is returned as it was observed: the Objects of held pools and clusters, so Crossplane never drops them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.composition.resource_names import (
    api_endpoints_resource,
    ca_resource,
    identity_program_resource,
    key_binding_resource,
    key_collection_resource,
    key_gatherer_resources,
    key_role_resource,
    legacy_key_publisher_resources,
    namespace_resource,
    networkpolicy_resource,
    retired_keys_resource,
    serviceaccount_resource,
)
from function.federation.read import pool_resource
from function.federation.value import Federation, PlacedPool


def live(observed: Mapping[str, Any], name: str) -> Any:
    """status.atProvider.manifest of an observed Object: the live object."""
    return _at(observed.get(name), ("status", "atProvider", "manifest"))


def composed_manifest(observed: Mapping[str, Any], name: str) -> Any:
    """spec.forProvider.manifest of an observed Object: what was last composed for it, as it was sent."""
    return _at(observed.get(name), ("spec", "forProvider", "manifest"))


def _at(node: Any, path: tuple[str, ...]) -> Any:
    """The value at path in nested dicts, None where one is missing."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def kept_objects(pools: list[PlacedPool], observed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The observed Objects of held-back pools, to return unchanged: one that exists is kept as it is."""
    out = {}
    for p in pools:
        name = pool_resource(p.name)
        previous = as_observed(observed.get(name)) if p.hold is not None else None
        if previous is not None:
            out[name] = previous
    return out


def kept_clusters(fed: Federation, observed: dict[str, Any], planned: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What selected clusters keep when their selection cannot be judged in this reconcile.

    While Crossplane has not listed a selector's ProviderConfigs, every
    observed Object not planned is kept: none is dropped for want of an
    answer. A cluster held by its settings keeps its pool's Objects there.
    """
    out: dict[str, dict[str, Any]] = {}
    if fed.selection.pending:
        names = [name for name in observed if name not in planned]
    else:
        names = [
            name
            for m in fed.selection.held
            for name in cluster_resources(m.name, m.cluster.name, m.namespace or fed.namespace, observed)
            if name not in planned
        ]
    for name in names:
        previous = as_observed(observed.get(name))
        if previous is not None:
            out[name] = previous
    return out


def cluster_resources(pool: str, cluster: str, namespace: str, observed: Mapping[str, Any]) -> list[str]:
    """The composition resource names of a pool in one cluster: its workload and what it shares with the cluster.

    Among them any observed identity program there, of this function's release or
    an earlier one: a kept workload still mounts the program it was made with.
    """
    place = f"-{cluster}-{namespace}"
    programs = sorted(n for n in observed if n.startswith("identity-program-") and n.endswith(place))
    return [
        pool_resource(pool),
        serviceaccount_resource(cluster, namespace),
        ca_resource(cluster, namespace),
        namespace_resource(cluster, namespace),
        networkpolicy_resource(cluster, namespace),
        key_collection_resource(cluster, namespace),
        *key_gatherer_resources(cluster, namespace),
        api_endpoints_resource(cluster),
        key_role_resource(cluster, namespace),
        key_binding_resource(cluster, namespace),
        *legacy_key_publisher_resources(cluster, namespace),
        retired_keys_resource(cluster, namespace),
        *sorted({identity_program_resource(cluster, namespace), *programs}),
    ]


def as_observed(obj: Any) -> dict[str, Any] | None:
    """An observed Object's apiVersion, kind and spec, to return it unchanged; None if it has no spec."""
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return None
    return {k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj}
