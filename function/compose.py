"""From an observed XR to the desired composed resources: pure, no gRPC."""

from __future__ import annotations

import dataclasses
from typing import Any

from function import names, netpol, nodeconfig, placement, pods, readiness, superlink, supernodes, tls, validation
from function.spec import FederationSpec, PoolSpec, ProviderConfigRef
from function.validation import SpecError

OBJECT_API = "kubernetes.crossplane.io/v1alpha2"
# Crossplane v2 namespaced XRs compose namespaced Objects.
NAMESPACED_OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
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

SUPERLINK = "superlink"
SERVICE = "superlink-service"
CERTIFICATE = "superlink-certificate"


def pool_resource(pool_name: str) -> str:
    """Composition resource name of a pool's workload."""
    return f"pool-{pool_name}"


@dataclasses.dataclass(frozen=True)
class Federation:
    """A checked Federation: its name and namespace as deployed, and its spec."""

    name: str
    namespace: str
    spec: FederationSpec
    # A Crossplane v2 namespaced XR, rather than a cluster-scoped one (claimed or not).
    namespaced: bool = False


def federation(xr: dict[str, Any]) -> Federation:
    """Read the XR into a checked Federation; raise SpecError naming the field."""
    metadata = xr.get("metadata") or {}
    raw = {k: v for k, v in (xr.get("spec") or {}).items() if k not in CROSSPLANE_SPEC_FIELDS}
    spec = validation.parse(raw)
    labels = metadata.get("labels") or {}
    claim_ref = (xr.get("spec") or {}).get("claimRef") or {}
    claim_name = labels.get(CLAIM_NAME) or claim_ref.get("name")
    claim_namespace = labels.get(CLAIM_NAMESPACE) or claim_ref.get("namespace")
    namespaced = False
    if claim_name and claim_namespace:
        name, namespace = claim_name, claim_namespace
    elif metadata.get("namespace"):
        # A Crossplane v2 namespaced XR: like a claim, it owns one namespace.
        name, namespace, namespaced = metadata.get("name") or "", metadata["namespace"], True
    else:
        name, namespace = metadata.get("name") or "", spec.namespace or "default"
    if not name:
        raise SpecError([("metadata.name", "is required")])
    if namespaced or claim_name:
        _stay_in(namespace, spec)
    errors = validation.check_names(name, spec)
    if errors:
        raise SpecError(errors)
    return Federation(name, namespace, spec, namespaced)


def _stay_in(namespace: str, spec: FederationSpec) -> None:
    """A claim or namespaced XR deploys into its own namespace in the SuperLink's cluster."""
    errors = []
    if spec.namespace and spec.namespace != namespace:
        errors.append(("spec.namespace", f"must be empty or {namespace!r}: a claim deploys into its own namespace"))
    hub = placement.superlink_ref(spec)
    for i, pool in enumerate(spec.supernodes.pools):
        if pool.namespace and pool.namespace != namespace and placement.pool_ref(spec, pool) == hub:
            errors.append(
                (
                    f"spec.supernodes.pools[{i}].namespace",
                    f"must be empty or {namespace!r}: a claim's pools in the SuperLink's cluster stay in its namespace",
                )
            )
    if errors:
        raise SpecError(errors)


def live(observed: dict[str, Any], name: str) -> Any:
    """status.atProvider.manifest of an observed Object: the live object."""
    node: Any = observed.get(name)
    for key in ("status", "atProvider", "manifest"):
        node = node.get(key) if isinstance(node, dict) else None
    return node


@dataclasses.dataclass(frozen=True)
class Composed:
    """One composed Kubernetes object and the cluster (ProviderConfig) it goes to."""

    manifest: dict[str, Any]
    provider_config: ProviderConfigRef


@dataclasses.dataclass
class Plan:
    """What to compose, and what had to wait."""

    resources: dict[str, Composed]
    # Observed Objects of held-back pools, returned unchanged so Crossplane keeps them.
    kept: dict[str, dict[str, Any]]
    # Held-back pools and what they wait for: "address" or "ca".
    held: dict[str, str]
    external: placement.External
    remote: bool
    # Whether the SuperLink's TLS Secret must be read (to copy its CA elsewhere),
    # whether it was, and the pools that need that copy.
    needs_ca: bool = False
    ca_known: bool = False
    ca_pools: list[str] = dataclasses.field(default_factory=list)


def plan(
    fed: Federation, observed: dict[str, Any] | None = None, remembered: Any = None, tls_secret: Any = None
) -> Plan:
    """The composed resources of a Federation, keyed by composition resource name.

    Everything follows from the spec, except what remote pools need first: the
    address they dial (from the observed Service) and, with TLS, the CA they
    trust (from the SuperLink's Secret, a required resource).
    """
    observed = observed or {}
    spec = fed.spec
    hub = placement.superlink_ref(spec)
    resources = {
        SUPERLINK: Composed(superlink.statefulset(fed.name, fed.namespace, spec), hub),
        SERVICE: Composed(superlink.service(fed.name, fed.namespace, spec), hub),
    }
    _add_service_account(resources, fed, hub, fed.namespace)
    external = placement.external(spec, live(observed, SERVICE), remembered)
    if spec.tls is not None and spec.tls.certManager is not None:
        resources[CERTIFICATE] = Composed(tls.certificate(fed.name, fed.namespace, spec, external.address), hub)
    ca = tls.ca_from_secret(tls_secret) if spec.tls is not None else None
    local_fleet = f"{superlink.service_address(fed.name, fed.namespace)}:{spec.superlink.service.ports.grpc}"
    kept: dict[str, dict[str, Any]] = {}
    held: dict[str, str] = {}
    ca_pools: list[str] = []
    remote_pools = False
    offsets = global_offsets(spec)
    total = sum(p.replicas or 0 for p in spec.supernodes.pools) if spec.mode == "StatefulSet" else None
    places: dict[tuple[str, str], tuple[ProviderConfigRef, bool]] = {}
    for pool in spec.supernodes.pools:
        name = pool_resource(pool.name)
        ref = placement.pool_ref(spec, pool)
        namespace = placement.pool_namespace(fed.namespace, pool)
        fleet = local_fleet
        remote = placement.remote(spec, pool)
        remote_pools = remote_pools or remote
        if remote:
            if external.address is None:
                held[pool.name] = "address"
            else:
                fleet = external.address
        trust, copy_ca = _trust(fed, pool, namespace, remote=remote)
        if copy_ca:
            ca_pools.append(pool.name)
            if ca is None:
                held.setdefault(pool.name, "ca")
        if pool.name in held:
            # Never emitted with a wrong address or no CA; one that exists is kept as it is.
            previous = _as_observed(observed.get(name))
            if previous is not None:
                kept[name] = previous
            continue
        context = nodeconfig.Context(pool.name, pool.replicas, ref.name, total)
        workload = supernodes.workload(
            fed.name,
            namespace,
            spec,
            pool,
            fleet=fleet,
            context=context,
            offset=offsets.get(pool.name, 0),
            trust=trust,
        )
        resources[name] = Composed(workload, ref)
        places.setdefault((ref.name, namespace), (ref, remote))
        _add_pool_place(resources, fed, pool, ref, namespace, ca_copy=ca if copy_ca else None)
    if spec.networkPolicy.enabled:
        _add_network_policies(resources, fed, hub, places, external.address)
    return Plan(resources, kept, held, external, remote_pools, bool(ca_pools), ca is not None, ca_pools)


def _add_pool_place(
    resources: dict[str, Composed],
    fed: Federation,
    pool: PoolSpec,
    ref: ProviderConfigRef,
    namespace: str,
    *,
    ca_copy: str | None,
) -> None:
    """What a pool's cluster and namespace need besides its workload, each object once.

    Its ServiceAccount; ca_copy, if given, as a Secret the pool's pods trust;
    and the Namespace itself if the pool asks for it.
    """
    _add_service_account(resources, fed, ref, namespace)
    if ca_copy is not None:
        resources.setdefault(f"ca-{ref.name}-{namespace}", Composed(tls.ca_secret(fed.name, namespace, ca_copy), ref))
    if pool.createNamespace:
        resources[namespace_resource(ref.name, namespace)] = Composed(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, ref
        )


def _trust(fed: Federation, pool: PoolSpec, namespace: str, *, remote: bool) -> tuple[dict[str, Any] | None, bool]:
    """With TLS, the volume of the CA a pool trusts, and whether it is the function's copy of it.

    Beside the SuperLink a pool mounts ca.crt of its Secret; elsewhere the
    Secret the user names, or else the copy the function composes.
    """
    if fed.spec.tls is None:
        return None, False
    if not remote and namespace == fed.namespace:
        return tls.pool_volume(tls.secret_name(fed.name, fed.spec), tls.CA_FILE), False
    if pool.caSecretRef is not None:
        return tls.pool_volume(pool.caSecretRef.name, pool.caSecretRef.key), False
    return tls.pool_volume(tls.ca_secret_name(fed.name), tls.CA_FILE), True


def _as_observed(obj: Any) -> dict[str, Any] | None:
    """An observed Object's apiVersion, kind and spec, to return it unchanged; None if it has no spec."""
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return None
    return {k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj}


def _add_network_policies(
    resources: dict[str, Composed],
    fed: Federation,
    hub: ProviderConfigRef,
    places: dict[tuple[str, str], tuple[ProviderConfigRef, bool]],
    external: str | None,
) -> None:
    local = [namespace for (_, namespace), (_, remote) in places.items() if not remote]
    resources["networkpolicy-superlink"] = Composed(
        netpol.superlink_policy(fed.name, fed.namespace, fed.spec, local), hub
    )
    for (cluster, namespace), (ref, remote) in sorted(places.items()):
        policy = netpol.supernode_policy(
            fed.name, namespace, fed.spec, None if remote else fed.namespace, external if remote else None
        )
        resources[f"networkpolicy-supernode-{cluster}-{namespace}"] = Composed(policy, ref)


def global_offsets(spec: FederationSpec) -> dict[str, int]:
    """Each StatefulSet pool's first global SuperNode index: pools count in spec order."""
    if spec.mode != "StatefulSet":
        return {}
    offsets, running = {}, 0
    for pool in spec.supernodes.pools:
        offsets[pool.name] = running
        running += pool.replicas or 0
    return offsets


def namespace_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of a pool's Namespace in one cluster."""
    return f"namespace-{cluster}-{namespace}"


def _add_service_account(
    resources: dict[str, Composed], fed: Federation, ref: ProviderConfigRef, namespace: str
) -> None:
    """The Federation's ServiceAccount, once per cluster and namespace its pods run in."""
    labels = names.labels(fed.name, "flower", "serviceaccount")
    resources.setdefault(
        f"serviceaccount-{ref.name}-{namespace}",
        Composed(pods.service_account_manifest(fed.name, namespace, labels), ref),
    )


def manifests(fed: Federation) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of a Federation with nothing observed yet."""
    return {name: c.manifest for name, c in plan(fed).resources.items()}


def wrap(manifest: dict[str, Any], ref: ProviderConfigRef, *, namespaced: bool = False) -> dict[str, Any]:
    """A provider-kubernetes Object that applies manifest to the chosen cluster.

    A namespaced XR composes namespaced Objects, which name the kind of their
    provider config; cluster-scoped Objects only take its name.
    """
    return {
        "apiVersion": NAMESPACED_OBJECT_API if namespaced else OBJECT_API,
        "kind": "Object",
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"kind": ref.kind, "name": ref.name} if namespaced else {"name": ref.name},
            "readiness": readiness.policy(manifest),
        },
    }


def desired(fed: Federation, built: Plan) -> dict[str, dict[str, Any]]:
    """The Objects to return: the planned ones wrapped, the kept ones as observed."""
    out = {name: wrap(c.manifest, c.provider_config, namespaced=fed.namespaced) for name, c in built.resources.items()}
    out.update(built.kept)
    return out
