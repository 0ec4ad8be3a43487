"""From an observed XR to the desired composed resources: pure, no gRPC."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from function.api import names, nodeconfig
from function.api import spec as api_spec
from function.api.spec import PoolSpec, ProviderConfigRef, generates_identity
from function.builders import (
    fleet_proxy,
    gpu,
    identity,
    netpol,
    pods,
    published_keys,
    superlink,
    supernodes,
    tls,
)
from function.composition import readiness
from function.federation.read import pool_resource
from function.federation.value import Federation, Hold, PlacedPool, Trust
from function.releases.flower import CONTROL_PORT, FLEET_PROXY_PORT, LOOPBACK
from function.topology import clusters, placement

OBJECT_API = "kubernetes.crossplane.io/v1alpha2"
# Crossplane v2 namespaced XRs compose namespaced Objects.
NAMESPACED_OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"


SUPERLINK = "superlink"
SERVICE = "superlink-service"
CERTIFICATE = "superlink-certificate"
FLEET_PROXY_CONFIG = "superlink-fleet-proxy"
AUTHORIZED_KEYS = "superlink-authorized-keys"
REGISTRATIONS = "superlink-registrations"
SUPERLINK_SERVICEACCOUNT = "superlink-serviceaccount"
REGISTRATIONS_ROLE = "superlink-registrations-role"
REGISTRATIONS_BINDING = "superlink-registrations-binding"
# The actions provider-kubernetes takes on a create-only Object: never an update, which would undo the writer's.
CREATE_ONLY = ["Observe", "Create", "Delete"]


def live(observed: Mapping[str, Any], name: str) -> Any:
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
    # Read from the cluster, never written: an observe-only Object.
    observe: bool = False
    # Created once, then only read: its data belongs to whoever writes it in the cluster.
    create_only: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to compose, and what had to wait."""

    resources: dict[str, Composed]
    # Observed Objects of held-back pools, returned unchanged so Crossplane keeps them.
    kept: dict[str, dict[str, Any]]
    pools: list[PlacedPool]
    external: placement.External
    # Whether the CA was read from the SuperLink's TLS Secret.
    ca_known: bool
    # Crossplane resources returned as they are, not in an Object: the key collections.
    direct: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def held(self) -> dict[str, Hold]:
        """Held-back pools by name, and what each waits for."""
        return {p.name: p.hold for p in self.pools if p.hold is not None}

    @property
    def remote(self) -> bool:
        """Whether any pool runs in another cluster than the SuperLink."""
        return any(p.remote for p in self.pools)

    @property
    def ca_pools(self) -> list[str]:
        """The pools that trust the function's copy of the CA."""
        return [p.name for p in self.pools if p.copies_ca]

    @property
    def needs_ca(self) -> bool:
        """Whether the SuperLink's TLS Secret must be read, to copy its CA."""
        return bool(self.ca_pools)


def plan(
    fed: Federation,
    observed: dict[str, Any] | None = None,
    remembered: Any = None,
    tls_secret: Any = None,
    key_members: list[dict[str, Any]] | None = None,
) -> Plan:
    """The composed resources of a Federation, keyed by composition resource name.

    Everything follows from the spec, except what remote pools need first: the
    address they dial (from the observed Service) and, with TLS, the CA they
    trust (from the SuperLink's Secret, a required resource). A pool that
    lacks either is held back. key_members: the Objects the key collections
    made (a required resource), whose keys the SuperLink is told.
    """
    observed = observed or {}
    external = placement.external(fed.spec, live(observed, SERVICE), remembered)
    ca = tls.ca_from_secret(tls_secret) if fed.spec.tls is not None else None
    pools = [place_pool(fed, pool, external, ca_known=ca is not None) for pool in fed.spec.supernodes.pools]
    composed = [p for p in pools if p.hold is None]
    resources = {
        **superlink_resources(fed, external),
        **service_accounts(fed, composed),
        **identity_programs(fed, composed),
        **workloads(fed, composed),
        **ca_secrets(fed, composed, ca),
        **namespaces(composed),
        **network_policies(fed, composed, external, observed),
        **key_publishers(fed, composed),
        **api_endpoints(fed, composed),
        **authorized_keys(fed, pools, key_members or []),
        **registrations(fed),
        **retired_keys(fed, composed, observed),
    }
    direct = key_collections(fed, composed)
    kept = {**kept_objects(pools, observed), **kept_clusters(fed, observed, {**resources, **direct})}
    return Plan(resources, kept, pools, external, ca is not None, direct)


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


def superlink_resources(fed: Federation, external: placement.External) -> dict[str, Composed]:
    """The SuperLink, its Service, from 1.40 its Fleet proxy's configuration and, from cert-manager, its certificate."""
    hub = fed.hub
    out = {
        SUPERLINK: Composed(superlink.statefulset(fed, registration=_registration(fed)), hub),
        SERVICE: Composed(superlink.service(fed), hub),
    }
    if fed.superlink_dialect.fleet_api == "http":
        out[FLEET_PROXY_CONFIG] = Composed(fleet_proxy.configmap(fed), hub)
    if fed.spec.tls is not None and fed.spec.tls.certManager is not None:
        out[CERTIFICATE] = Composed(tls.certificate(fed, external.address), hub)
    return out


def _registration(fed: Federation) -> identity.Registration | None:
    """With a registrar, its Control API: the SuperLink pod's loopback, where the Control API always listens."""
    return identity.registration(fed, f"{LOOPBACK}:{CONTROL_PORT}") if fed.registers_keys else None


def _once_per_place(
    places: list[tuple[ProviderConfigRef, str]],
    resource: Callable[[str, str], str],
    make: Callable[[str], dict[str, Any]],
) -> dict[str, Composed]:
    """One object per cluster and namespace of places (the first of repeats), by its composition resource name."""
    out: dict[str, Composed] = {}
    for ref, namespace in places:
        out.setdefault(resource(ref.name, namespace), Composed(make(namespace), ref))
    return out


def service_accounts(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """The SuperLink's ServiceAccount beside it, and the pools' once per cluster and namespace they run in."""
    superlink = pods.service_account_manifest(
        pods.superlink_service_account(fed.name),
        fed.namespace,
        names.labels(fed.name, "superlink", "serviceaccount"),
    )
    labels = names.labels(fed.name, "flower", "serviceaccount")
    places = [(p.provider_config, p.namespace) for p in pools]
    account = pods.service_account(fed.name)
    return {
        SUPERLINK_SERVICEACCOUNT: Composed(superlink, fed.hub),
        **_once_per_place(
            places, serviceaccount_resource, lambda ns: pods.service_account_manifest(account, ns, labels)
        ),
    }


def identity_programs(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """The identity containers' program, once per cluster and namespace they run in (identity.program_configmap)."""
    labels = names.labels(fed.name, "flower", "identity-program")
    places = [(fed.hub, fed.namespace)] if fed.registers_keys else []
    places += [(p.provider_config, p.namespace) for p in pools if generates_identity(fed.spec, p.spec)]
    return _once_per_place(
        places, identity_program_resource, lambda ns: identity.program_configmap(fed.name, ns, labels)
    )


def key_places(fed: Federation, pools: list[PlacedPool]) -> dict[str, tuple[ProviderConfigRef, str]]:
    """By composition resource name, each cluster and namespace where SuperNodes publish their keys."""
    out: dict[str, tuple[ProviderConfigRef, str]] = {}
    for p in pools:
        if generates_identity(fed.spec, p.spec):
            out.setdefault(
                key_collection_resource(p.provider_config.name, p.namespace), (p.provider_config, p.namespace)
            )
    return out


def key_publishers(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """The Role that lets the pools' ServiceAccount publish keys, and its binding, where pools publish."""
    labels = names.labels(fed.name, "flower", "supernode-keys")
    claims = fed.spec.mode == "StatefulSet"
    out: dict[str, Composed] = {}
    for ref, namespace in key_places(fed, pools).values():
        role = identity.publisher_role(fed.name, namespace, labels, claims=claims)
        out[key_role_resource(ref.name, namespace)] = Composed(role, ref)
        binding = identity.publisher_binding(fed.name, namespace, labels)
        out[key_binding_resource(ref.name, namespace)] = Composed(binding, ref)
    return out


def api_endpoints(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """Where pools publish keys behind a NetworkPolicy, the cluster's API server endpoints, observed only."""
    if not fed.spec.networkPolicy.enabled:
        return {}
    out: dict[str, Composed] = {}
    for ref, _ in key_places(fed, pools).values():
        out.setdefault(api_endpoints_resource(ref.name), Composed(netpol.KUBE_API_ENDPOINTS, ref, observe=True))
    return out


def key_collections(fed: Federation, pools: list[PlacedPool]) -> dict[str, dict[str, Any]]:
    """Where pools publish keys, the provider-kubernetes collection that observes them."""
    labels = names.labels(fed.name, "flower", "supernode-keys")
    out = {}
    for name, (ref, namespace) in key_places(fed, pools).items():
        config = {"kind": ref.kind, "name": ref.name} if fed.namespaced else {"name": ref.name}
        place = published_keys.Place(ref.name, namespace)
        out[name] = published_keys.collection(fed.name, fed.namespace, place, config, labels, namespaced=fed.namespaced)
    return out


def authorized_keys(fed: Federation, pools: list[PlacedPool], members: list[dict[str, Any]]) -> dict[str, Composed]:
    """With identities made in pods, the ConfigMap beside the SuperLink of the keys their pods published.

    pools: every pool, held back or not: a held pool's pods keep running, and
    their keys stay.
    """
    if not fed.registers_keys:
        return {}
    places = {
        published_keys.collection_name(fed.name, fed.namespace, ref.name, namespace): published_keys.Place(
            ref.name, namespace
        )
        for ref, namespace in key_places(fed, pools).values()
    }
    keys = published_keys.published(fed.name, fed.namespace, places, members)
    labels = names.labels(fed.name, "superlink", "supernode-keys")
    manifest = published_keys.authorized_keys(fed.name, fed.namespace, labels, keys)
    return {AUTHORIZED_KEYS: Composed(manifest, fed.hub)}


def registrations(fed: Federation) -> dict[str, Composed]:
    """With a registrar, its report of retired keys beside the SuperLink, and its right to write that alone."""
    if not fed.registers_keys:
        return {}
    hub = fed.hub
    labels = names.labels(fed.name, "superlink", "supernode-keys")
    return {
        REGISTRATIONS: Composed(identity.registrations(fed.name, fed.namespace, labels), hub, create_only=True),
        REGISTRATIONS_ROLE: Composed(identity.registrations_role(fed.name, fed.namespace, labels), hub),
        REGISTRATIONS_BINDING: Composed(identity.registrations_binding(fed.name, fed.namespace, labels), hub),
    }


def retired_keys(fed: Federation, pools: list[PlacedPool], observed: Mapping[str, Any]) -> dict[str, Composed]:
    """The registrar's report, as observed, split by the place of each retired key's holder: only where it names one.

    A holder reads `<cluster>/<namespace>/<kind>/<name>` (published_keys.PublishedKey).
    """
    reported = identity.reported_retired(live(observed, REGISTRATIONS)) if fed.registers_keys else []
    labels = names.labels(fed.name, "supernode", "retired-keys")
    out: dict[str, Composed] = {}
    for ref, namespace in key_places(fed, pools).values():
        digests = [digest for digest, holder in reported if holder.startswith(f"{ref.name}/{namespace}/")]
        if digests:
            manifest = identity.retired_keys(fed.name, namespace, labels, digests)
            out[retired_keys_resource(ref.name, namespace)] = Composed(manifest, ref)
    return out


def workloads(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """Each pool's StatefulSet or DaemonSet of SuperNodes."""
    offsets, total = global_offsets(fed)
    out = {}
    for p in pools:
        member = fed.member(p.name)
        context = nodeconfig.Context(
            member.selector if member else p.name,
            p.spec.replicas,
            p.provider_config.name,
            total,
            member.index if member else None,
        )
        workload = supernodes.workload(fed, p, context=context, offset=offsets.get(p.name, 0))
        if member is not None:
            # Which selector pool the workload stands for, and its cluster's index, remembered here.
            workload["metadata"].setdefault("annotations", {}).update(
                {clusters.SELECTED_BY_ANNOTATION: member.selector, clusters.INDEX_ANNOTATION: str(member.index)}
            )
        out[pool_resource(p.name)] = Composed(workload, p.provider_config)
    return out


def ca_secrets(fed: Federation, pools: list[PlacedPool], ca: str | None) -> dict[str, Composed]:
    """The CA alone, as a Secret, once per cluster and namespace whose pools trust the function's copy."""
    out: dict[str, Composed] = {}
    if ca is None:
        return out
    for p in pools:
        if p.copies_ca:
            out.setdefault(
                ca_resource(p.provider_config.name, p.namespace),
                Composed(tls.ca_secret(fed.name, p.namespace, ca), p.provider_config),
            )
    return out


# The Pod Security admission modes a Namespace of ours is labelled for: refuse,
# warn the applier and audit-log anything that breaks its level.
POD_SECURITY_MODES = ("audit", "enforce", "warn")


def namespaces(pools: list[PlacedPool]) -> dict[str, Composed]:
    """The Namespaces pools ask the function to create (createNamespace).

    Each is labelled for Pod Security admission at the strictest level every
    pool placed in it meets, so the API server refuses pods that break it:
    restricted, or privileged where a pool needs AMD's device files.
    """
    privileged = {(p.provider_config.name, p.namespace) for p in pools if gpu.needs_privilege(p.spec.gpu)}
    out = {}
    for p in pools:
        if not p.spec.createNamespace:
            continue
        level = "privileged" if (p.provider_config.name, p.namespace) in privileged else "restricted"
        labels = {f"pod-security.kubernetes.io/{mode}": level for mode in POD_SECURITY_MODES}
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": p.namespace, "labels": labels}}
        out[namespace_resource(p.provider_config.name, p.namespace)] = Composed(manifest, p.provider_config)
    return out


def network_policies(
    fed: Federation, pools: list[PlacedPool], external: placement.External, observed: Mapping[str, Any]
) -> dict[str, Composed]:
    """With spec.networkPolicy.enabled, the SuperLink's policy and one per pool cluster and namespace.

    Where pools publish keys, their policy admits the cluster's API server
    once its endpoints are observed (api_endpoints).
    """
    if not fed.spec.networkPolicy.enabled:
        return {}
    places: dict[tuple[str, str], tuple[ProviderConfigRef, bool]] = {}
    for p in pools:
        places.setdefault((p.provider_config.name, p.namespace), (p.provider_config, p.remote))
    local = [namespace for (_, namespace), (_, remote) in places.items() if not remote]
    out = {
        "networkpolicy-superlink": Composed(
            netpol.superlink_policy(fed, local),
            fed.hub,
        )
    }
    publishing = set(key_places(fed, pools))
    for (cluster, namespace), (ref, remote) in sorted(places.items()):
        endpoints = live(observed, api_endpoints_resource(cluster))
        policy = netpol.supernode_policy(
            fed,
            namespace,
            None if remote else fed.namespace,
            external.address if remote else None,
            kube_api=netpol.kube_api_egress(endpoints)
            if key_collection_resource(cluster, namespace) in publishing
            else None,
        )
        out[networkpolicy_resource(cluster, namespace)] = Composed(policy, ref)
    return out


def kept_objects(pools: list[PlacedPool], observed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The observed Objects of held-back pools, to return unchanged: one that exists is kept as it is."""
    out = {}
    for p in pools:
        name = pool_resource(p.name)
        previous = _as_observed(observed.get(name)) if p.hold is not None else None
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
        previous = _as_observed(observed.get(name))
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
        api_endpoints_resource(cluster),
        key_role_resource(cluster, namespace),
        key_binding_resource(cluster, namespace),
        retired_keys_resource(cluster, namespace),
        *sorted({identity_program_resource(cluster, namespace), *programs}),
    ]


def _as_observed(obj: Any) -> dict[str, Any] | None:
    """An observed Object's apiVersion, kind and spec, to return it unchanged; None if it has no spec."""
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return None
    return {k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj}


def global_offsets(fed: Federation) -> tuple[dict[str, int], int | None]:
    """Each StatefulSet pool's first global SuperNode index, and how many indices there are.

    Pools count in spec order. A selector pool takes maxClusters blocks of
    `replicas` indices, one per cluster index, so a cluster that joins or
    leaves moves no other SuperNode's index and {totalReplicas} stays put.
    """
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


def serviceaccount_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the Federation's ServiceAccount in one cluster and namespace."""
    return f"serviceaccount-{cluster}-{namespace}"


def identity_program_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the identity program in one cluster and namespace.

    The program's digest is part of it: a new program is a new Object, and the
    old one, no longer desired, is deleted rather than left behind under its old name.
    """
    return f"identity-program-{identity.PROGRAM_DIGEST}-{cluster}-{namespace}"


def key_collection_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the collection of keys published in one cluster and namespace."""
    return f"supernode-keys-{cluster}-{namespace}"


def api_endpoints_resource(cluster: str) -> str:
    """Composition resource name of the observed endpoints of one cluster's API server."""
    return f"kube-api-endpoints-{cluster}"


def retired_keys_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the retired keys of one cluster and pool namespace."""
    return f"retired-keys-{cluster}-{namespace}"


def key_role_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the Role that lets pods publish keys in one cluster and namespace."""
    return f"supernode-keys-role-{cluster}-{namespace}"


def key_binding_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of that Role's binding."""
    return f"supernode-keys-binding-{cluster}-{namespace}"


def ca_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the CA copy in one cluster and namespace."""
    return f"ca-{cluster}-{namespace}"


def networkpolicy_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the SuperNodes' NetworkPolicy in one cluster and namespace."""
    return f"networkpolicy-supernode-{cluster}-{namespace}"


def namespace_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of a pool's Namespace in one cluster."""
    return f"namespace-{cluster}-{namespace}"


def manifests(fed: Federation) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of a Federation with nothing observed yet."""
    return {name: c.manifest for name, c in plan(fed).resources.items()}


def wrap(
    manifest: dict[str, Any],
    ref: ProviderConfigRef,
    *,
    namespaced: bool = False,
    observe: bool = False,
    create_only: bool = False,
) -> dict[str, Any]:
    """A provider-kubernetes Object that applies manifest to the chosen cluster (or only observes it).

    A namespaced XR composes namespaced Objects, which name the kind of their
    provider config; cluster-scoped Objects only take its name.
    """
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": ref.kind, "name": ref.name} if namespaced else {"name": ref.name},
    }
    if observe:
        spec["managementPolicies"] = ["Observe"]
    else:
        spec["readiness"] = readiness.policy(manifest)
    if create_only:
        spec["managementPolicies"] = CREATE_ONLY
    return {"apiVersion": NAMESPACED_OBJECT_API if namespaced else OBJECT_API, "kind": "Object", "spec": spec}


def desired(fed: Federation, built: Plan) -> dict[str, dict[str, Any]]:
    """The Objects to return: the planned ones wrapped, the kept ones as observed."""
    out = {
        name: wrap(
            c.manifest, c.provider_config, namespaced=fed.namespaced, observe=c.observe, create_only=c.create_only
        )
        for name, c in built.resources.items()
    }
    out.update(built.direct)
    out.update(built.kept)
    return out
