"""Where each pool lands in this reconcile, and its first global SuperNode index.

A pool's cluster and namespace, the Fleet address it dials, the CA it
trusts and what it waits for (function/federation/value.py, PlacedPool).
"""

from __future__ import annotations

from function.api import spec as api_spec
from function.api.spec import PoolSpec, generates_identity
from function.builders import superlink, tls
from function.federation.value import Federation, Hold, PlacedPool, Trust
from function.releases.flower import FLEET_PROXY_PORT
from function.topology import placement


def place_pool(fed: Federation, pool: PoolSpec, external: placement.External, *, ca_known: bool) -> PlacedPool:
    """Where a pool runs, what it dials and trusts, and whether it must wait."""
    namespace = placement.pool_namespace(fed.namespace, pool)
    remote = api_spec.remote(fed.spec, pool)
    fleet = fleet_address(fed, pool, external, remote=remote)
    trust, copies_ca = trusted_ca(fed, pool, namespace, remote=remote)
    return PlacedPool(
        pool,
        api_spec.pool_ref(fed.spec, pool),
        namespace,
        remote,
        fleet,
        trust,
        copies_ca,
        hold_reason(fleet, copies_ca=copies_ca, ca_known=ca_known),
        makes_identity=generates_identity(fed.spec, pool),
    )


def fleet_address(fed: Federation, pool: PoolSpec, external: placement.External, *, remote: bool) -> str | None:
    """The Fleet address a pool dials: the Service's cluster DNS name, or else the external address.

    Beside Flower's gRPC Fleet adapter an HTTP pool dials the `fleet-http`
    port, the Fleet API proxy's (flower.Releases.legacy_fleet).
    """
    if remote:
        return external.address
    port = FLEET_PROXY_PORT if fed.flower.dials_proxy_port(pool.name) else fed.spec.superlink.service.ports.grpc
    return f"{superlink.service_address(fed.name, fed.namespace)}:{port}"


def trusted_ca(fed: Federation, pool: PoolSpec, namespace: str, *, remote: bool) -> tuple[Trust | None, bool]:
    """With TLS, the CA a pool trusts, and whether it is the function's copy of it.

    Beside the SuperLink a pool mounts ca.crt of its Secret; elsewhere the
    Secret the user names, or else the copy the function composes.
    """
    if fed.spec.tls is None:
        return None, False
    if not remote and namespace == fed.namespace:
        return Trust(tls.secret_name(fed.name, fed.spec), tls.CA_FILE), False
    if pool.caSecretRef is not None:
        return Trust(pool.caSecretRef.name, pool.caSecretRef.key), False
    return Trust(tls.ca_secret_name(fed.name), tls.CA_FILE), True


def hold_reason(fleet: str | None, *, copies_ca: bool, ca_known: bool) -> Hold | None:
    """What a pool waits for, the address first: never composed with a wrong address or no CA."""
    if fleet is None:
        return Hold.ADDRESS
    if copies_ca and not ca_known:
        return Hold.CA
    return None


def global_offsets(fed: Federation) -> tuple[dict[str, int], int | None]:
    """Each StatefulSet pool's first global SuperNode index, and how many indices there are.

    Pools count in spec order. A selector pool takes maxClusters blocks of
    `replicas` indices, one per cluster index, so a cluster that joins or
    leaves moves no other SuperNode's index and {totalReplicas} stays put.
    A FederationCluster holds only some pools: its Federation counted for it.
    """
    if fed.part is not None:
        return fed.part.offsets, fed.part.total
    written = fed.written
    if written.mode != "StatefulSet":
        return {}, None
    offsets, running = {}, 0
    for pool in written.supernodes.pools:
        replicas = pool.replicas or 0
        if pool.clusterSelector is None:
            offsets[pool.name] = running
            running += replicas
            continue
        for m in fed.selection.placed:
            if m.selector == pool.name and m.index is not None:
                offsets[m.name] = running + m.index * replicas
        running += pool.clusterSelector.maxClusters * replicas
    return offsets, running
