"""From an observed XR to the desired composed resources: pure, no gRPC."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from function.api import names, nodeconfig
from function.api.spec import ProviderConfigRef, generates_identity
from function.builders import (
    fleet_proxy,
    gpu,
    identity,
    key_gatherer,
    netpol,
    pods,
    published_keys,
    superlink,
    supernodes,
    tls,
)
from function.composition import children, readiness
from function.composition.kept import composed_manifest, kept_clusters, kept_objects, live
from function.composition.objects import Composed, wrap
from function.composition.placing import global_offsets, place_pool
from function.composition.resource_names import (
    AUTHORIZED_KEYS,
    CERTIFICATE,
    FLEET_PROXY_CONFIG,
    REGISTRATIONS,
    REGISTRATIONS_BINDING,
    REGISTRATIONS_ROLE,
    SERVICE,
    SUPERLINK,
    SUPERLINK_SERVICEACCOUNT,
    api_endpoints_resource,
    ca_resource,
    identity_program_resource,
    key_binding_resource,
    key_gathered_resource,
    key_gatherer_resources,
    key_policy_binding_resource,
    key_policy_resource,
    key_role_resource,
    namespace_resource,
    networkpolicy_resource,
    retired_keys_resource,
    serviceaccount_resource,
)
from function.composition.runs import takes_runs
from function.federation.read import pool_resource
from function.federation.value import Federation, Hold, PlacedPool
from function.releases.flower import CONTROL_PORT, LOOPBACK
from function.topology import clusters, placement


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
    # Crossplane resources returned as they are, not in an Object: the FederationClusters.
    direct: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # With TLS, the CA certificate the pools that copy it trust, once known.
    ca: str | None = None
    # Of direct, the FederationClusters: ready when they say so.
    parts: frozenset[str] = frozenset()
    # A FederationCluster's: the keys its pools published, as its own gatherers listed them.
    keys: list[published_keys.PublishedKey] | None = None

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
    wanted_runs: dict[str, Composed] | None = None,
    reported: Any = None,
) -> Plan:
    """The composed resources of a Federation, keyed by composition resource name.

    Everything follows from the spec, except what remote pools need first: the
    address they dial (from the observed Service) and, with TLS, the CA they
    trust (from the SuperLink's Secret, a required resource). A pool that
    lacks either is held back. The keys the SuperLink is told are those the
    pools' gatherers listed, as observed (authorized_keys). wanted_runs:
    what its runs need beside the SuperLink (function/composition/runs.py).
    reported: a FederationCluster's status.publishedKeys as it stands, which a
    list not observed yet keeps (published_keys.listed_before).
    """
    observed = observed or {}
    if fed.part is not None:
        return _plan_cluster(fed, observed, reported)
    external = placement.external(fed.spec, live(observed, SERVICE), remembered)
    ca = tls.ca_from_secret(tls_secret) if fed.spec.tls is not None else None
    pools = [place_pool(fed, pool, external, ca_known=ca is not None) for pool in fed.spec.supernodes.pools]
    # Pools of remote clusters a selector chose are composed by their cluster's FederationCluster.
    here = [p for p in pools if not children.handed(fed, p)]
    composed = [p for p in here if p.hold is None]
    resources = {
        **superlink_resources(fed, external),
        **pool_resources(fed, composed, external, ca, observed),
        **key_gatherers(fed, composed, here, observed),
        **authorized_keys(fed, here, observed),
        **registrations(fed),
        **(wanted_runs or {}),
    }
    needs_ca = any(p.copies_ca for p in pools)
    parts = children.composites(fed, external.address, ca, observed, needs_ca=needs_ca)
    direct = dict(parts)
    kept = {
        **kept_objects(here, observed),
        **children.kept(fed, observed, parts),
        **kept_clusters(fed, observed, {**resources, **direct}),
    }
    return Plan(resources, kept, pools, external, ca is not None, direct, ca, frozenset(parts))


def _plan_cluster(fed: Federation, observed: dict[str, Any], reported: Any) -> Plan:
    """A FederationCluster's part: its pools and what they need in its cluster, with the address and CA given.

    And the keys its pools published, which it reports for its group to list beside the SuperLink.
    """
    if fed.part is None:
        msg = "not a FederationCluster"
        raise ValueError(msg)
    external = placement.External(fed.part.fleet, "federation")
    ca = fed.part.ca if fed.spec.tls is not None else None
    pools = [place_pool(fed, pool, external, ca_known=ca is not None) for pool in fed.spec.supernodes.pools]
    composed = [p for p in pools if p.hold is None]
    resources = {
        **pool_resources(fed, composed, external, ca, observed),
        **key_gatherers(fed, composed, pools, observed),
    }
    keys = _published(fed, pools, observed, reported) if fed.registers_keys else None
    return Plan(resources, kept_objects(pools, observed), pools, external, ca is not None, keys=keys)


def pool_resources(
    fed: Federation, pools: list[PlacedPool], external: placement.External, ca: str | None, observed: dict[str, Any]
) -> dict[str, Composed]:
    """What composed pools run and need in their clusters and namespaces, with the SuperLink's ServiceAccount."""
    return {
        **service_accounts(fed, pools),
        **identity_programs(fed, pools),
        **workloads(fed, pools, observed),
        **ca_secrets(fed, pools, ca),
        **namespaces(pools),
        **network_policies(fed, pools, external, observed),
        **key_publishers(fed, pools),
        **api_endpoints(fed, pools),
        **retired_keys(fed, pools, observed),
    }


def superlink_resources(fed: Federation, external: placement.External) -> dict[str, Composed]:
    """The SuperLink, its Service, from 1.40 its Fleet proxy's configuration and, from cert-manager, its certificate."""
    hub = fed.hub
    out = {
        SUPERLINK: Composed(
            superlink.statefulset(fed, registration=_registration(fed), with_runner=takes_runs(fed)), hub
        ),
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
    beside = {SUPERLINK_SERVICEACCOUNT: Composed(superlink, fed.hub)} if fed.part is None else {}
    return {
        **beside,
        **_once_per_place(
            places, serviceaccount_resource, lambda ns: pods.service_account_manifest(account, ns, labels)
        ),
    }


def identity_programs(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """The identity containers' program, once per cluster and namespace they run in (identity.program_configmap)."""
    labels = names.labels(fed.name, "flower", "identity-program")
    # The SuperLink's registrar and runner run it too; a FederationCluster has no SuperLink.
    beside = (fed.registers_keys or takes_runs(fed)) and fed.part is None
    places = [(fed.hub, fed.namespace)] if beside else []
    places += [(p.provider_config, p.namespace) for p in pools if generates_identity(fed.spec, p.spec)]
    return _once_per_place(
        places, identity_program_resource, lambda ns: identity.program_configmap(fed.name, ns, labels)
    )


def key_places(fed: Federation, pools: list[PlacedPool]) -> dict[str, tuple[ProviderConfigRef, str]]:
    """By composition resource name, each cluster and namespace where SuperNodes publish their keys."""
    out: dict[str, tuple[ProviderConfigRef, str]] = {}
    for p in pools:
        if generates_identity(fed.spec, p.spec):
            out.setdefault(key_gathered_resource(p.provider_config.name, p.namespace), (p.provider_config, p.namespace))
    return out


def key_publishers(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """Where pools publish keys: the Role that lets their ServiceAccount publish, its binding, and its limits.

    The admission policy (identity.publication_policy) narrows the Role's create to each pod's own publication.
    """
    labels = names.labels(fed.name, "flower", "supernode-keys")
    statefulset = fed.spec.mode == "StatefulSet"
    out: dict[str, Composed] = {}
    for ref, namespace in key_places(fed, pools).values():
        claims = [
            identity.claim_name(names.pool(fed.name, p.name), ordinal)
            for p in pools
            if statefulset and (p.provider_config.name, p.namespace) == (ref.name, namespace)
            for ordinal in range(p.spec.replicas or 0)  # required in StatefulSet mode (api/rules.py)
        ]
        publisher = identity.publisher_name(fed.name, fed.namespace, ref.name)
        role = identity.publisher_role(publisher, namespace, labels, claims=claims)
        out[key_role_resource(ref.name, namespace)] = Composed(role, ref)
        binding = identity.publisher_binding(publisher, fed.name, namespace, labels)
        out[key_binding_resource(ref.name, namespace)] = Composed(binding, ref)
        name = identity.publication_policy_name(fed.name, fed.namespace, ref.name, namespace)
        policy = identity.publication_policy(name, fed.name, namespace, labels, claims=statefulset)
        out[key_policy_resource(ref.name, namespace)] = Composed(policy, ref)
        out[key_policy_binding_resource(ref.name, namespace)] = Composed(
            identity.publication_policy_binding(name, labels), ref
        )
    return out


def api_endpoints(fed: Federation, pools: list[PlacedPool]) -> dict[str, Composed]:
    """Where pools publish keys behind a NetworkPolicy, the cluster's API server endpoints, observed only."""
    if not fed.spec.networkPolicy.enabled:
        return {}
    out: dict[str, Composed] = {}
    for ref, _ in key_places(fed, pools).values():
        out.setdefault(api_endpoints_resource(ref.name), Composed(netpol.KUBE_API_ENDPOINTS, ref, observe=True))
    return out


def key_gatherers(
    fed: Federation, pools: list[PlacedPool], every: list[PlacedPool], observed: Mapping[str, Any]
) -> dict[str, Composed]:
    """Where pools publish keys, the gatherer that lists them in one ConfigMap (function/builders/key_gatherer.py).

    every: all pools, held back or not: a gatherer lists the keys of each one
    at its place. It runs the first (by name) composed pool's SuperNode image
    there. Its list is made once and then written only by the gatherer; its
    Object is Ready once the place's workloads are, as observed, no holder
    there replaces a retired key, and the list holds a key for each of their
    SuperNodes (readiness.keys_list: the provider polls it often till then).
    """
    out: dict[str, Composed] = {}
    for ref, namespace in key_places(fed, pools).values():
        place = _place(ref, namespace, every)
        image = fed.images.supernode(min(p.name for p in pools if _at(p, ref, namespace)))
        made = key_gatherer.manifests(fed.name, fed.namespace, ref.name, namespace, image, place.pools, fed.spec)
        there = [p for p in every if _at(p, ref, namespace) and p.makes_identity]
        seen = [_workload(fed, p, observed) for p in there]
        keys = sum(readiness.expected_pods(fed.spec.mode, p.spec.replicas, o) for p, o in zip(there, seen, strict=True))
        # A retired key's holder makes a new one (identity_program.rekey_if_retired): one more to wait for.
        settled = all(o.ready for o in seen) and not _retired_at(fed, ref, namespace, observed)
        policy = readiness.keys_list(keys, settled=settled)
        for resource, manifest in zip(key_gatherer_resources(ref.name, namespace), made, strict=True):
            listing = manifest["kind"] == "ConfigMap"
            out[resource] = Composed(manifest, ref, create_only=listing, readiness=policy if listing else None)
    return out


def _workload(fed: Federation, pool: PlacedPool, observed: Mapping[str, Any]) -> readiness.Observed:
    """A pool's workload as observed: how many SuperNodes it runs, and whether all are ready and up to date."""
    workload = {"kind": fed.spec.mode, "spec": {"replicas": pool.spec.replicas}}
    return readiness.observe(workload, live(observed, pool_resource(pool.name)))


def _at(pool: PlacedPool, ref: ProviderConfigRef, namespace: str) -> bool:
    """Whether pool runs in ref's cluster and namespace."""
    return (pool.provider_config.name, pool.namespace) == (ref.name, namespace)


def _place(ref: ProviderConfigRef, namespace: str, pools: list[PlacedPool]) -> published_keys.Place:
    """A cluster and namespace where keys are published, with the pools placed there (held back or not)."""
    there = sorted({p.name for p in pools if _at(p, ref, namespace)})
    return published_keys.Place(ref.name, namespace, tuple(there))


def _published(
    fed: Federation, pools: list[PlacedPool], observed: Mapping[str, Any], before: Any
) -> list[published_keys.PublishedKey]:
    """The keys pools published, as their gatherers listed them, each checked.

    pools: every pool, held back or not: a held pool's pods keep running, and
    their keys stay (its cluster's gatherer and list are kept as observed).
    before: the lines listed before, which a place whose list is not observed yet keeps.
    """
    found = []
    for name, (ref, namespace) in key_places(fed, pools).items():
        place = _place(ref, namespace, pools)
        listed = published_keys.gathered(place, live(observed, name))
        found += published_keys.listed_before(place, before) if listed is None else listed
    return published_keys.one_per_key(found)


def authorized_keys(fed: Federation, pools: list[PlacedPool], observed: Mapping[str, Any]) -> dict[str, Composed]:
    """With identities made in pods, the ConfigMap beside the SuperLink of the keys their pods published.

    pools: every pool it composes itself, held back or not: a held pool's pods
    keep running, and their keys stay. Remote clusters' keys come in their
    groups' shards, which it names when it has selector pools: their gatherers
    are their FederationClusters', whose lists it never reads.
    """
    if not fed.registers_keys:
        return {}
    before = ((live(observed, AUTHORIZED_KEYS) or {}).get("data") or {}).get(published_keys.AUTHORIZED_KEYS)
    keys = _published(fed, pools, observed, before.splitlines() if isinstance(before, str) else None)
    labels = names.labels(fed.name, "superlink", "supernode-keys")
    shards = [published_keys.shard_id(g) for g in children.groups(fed)] if fed.keys_sharded else None
    manifest = published_keys.authorized_keys(fed.name, fed.namespace, labels, keys, shards)
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
    labels = names.labels(fed.name, "supernode", "retired-keys")
    out: dict[str, Composed] = {}
    for ref, namespace in key_places(fed, pools).values():
        digests = _retired_at(fed, ref, namespace, observed)
        if digests:
            manifest = identity.retired_keys(fed.name, namespace, labels, digests)
            out[retired_keys_resource(ref.name, namespace)] = Composed(manifest, ref)
    return out


def _retired_at(fed: Federation, ref: ProviderConfigRef, namespace: str, observed: Mapping[str, Any]) -> list[str]:
    """The digests of the retired keys the registrar reports of holders in one cluster and namespace."""
    if fed.part is not None:
        # A FederationCluster is told its cluster's share of the report.
        return fed.part.retired.get(namespace, [])
    reported = identity.reported_retired(live(observed, REGISTRATIONS)) if fed.registers_keys else []
    return [digest for digest, holder in reported if holder.startswith(f"{ref.name}/{namespace}/")]


def workloads(fed: Federation, pools: list[PlacedPool], observed: Mapping[str, Any]) -> dict[str, Composed]:
    """Each pool's StatefulSet or DaemonSet of SuperNodes (a StatefulSet keeping its observed pod management)."""
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
        name = pool_resource(p.name)
        workload = supernodes.workload(
            fed,
            p,
            context=context,
            offset=offsets.get(p.name, 0),
            pod_management=supernodes.pod_management_of(composed_manifest(observed, name)),
        )
        if member is not None:
            # Which selector pool the workload stands for, and its cluster's index, remembered here.
            workload["metadata"].setdefault("annotations", {}).update(
                {clusters.SELECTED_BY_ANNOTATION: member.selector, clusters.INDEX_ANNOTATION: str(member.index)}
            )
        out[name] = Composed(workload, p.provider_config)
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
    out: dict[str, Composed] = {}
    if fed.part is None:
        out["networkpolicy-superlink"] = Composed(netpol.superlink_policy(fed, local), fed.hub)
    publishing = set(key_places(fed, pools))
    for (cluster, namespace), (ref, remote) in sorted(places.items()):
        endpoints = live(observed, api_endpoints_resource(cluster))
        policy = netpol.supernode_policy(
            fed,
            namespace,
            None if remote else fed.namespace,
            external.address if remote else None,
            kube_api=netpol.kube_api_egress(endpoints)
            if key_gathered_resource(cluster, namespace) in publishing
            else None,
        )
        out[networkpolicy_resource(cluster, namespace)] = Composed(policy, ref)
    return out


def manifests(fed: Federation) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of a Federation with nothing observed yet."""
    return {name: c.manifest for name, c in plan(fed).resources.items()}


def desired(fed: Federation, built: Plan) -> dict[str, dict[str, Any]]:
    """The Objects to return: the planned ones wrapped, the kept ones as observed."""
    out = {
        name: wrap(
            c.manifest,
            c.provider_config,
            namespaced=fed.namespaced,
            observe=c.observe,
            create_only=c.create_only,
            labels=c.labels,
            readiness_policy=c.readiness,
        )
        for name, c in built.resources.items()
    }
    out.update(built.direct)
    out.update(built.kept)
    return out
