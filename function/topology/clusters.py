"""Pools that follow clusters by label: one pool per selected ProviderConfig.

A pool with a clusterSelector names no cluster. The function asks Crossplane
for the ProviderConfigs that carry its labels (a required resource) and
stands the pool in for one pool per cluster found, named <pool>-<cluster>, so
clusters join and leave the federation by their labels alone.

Per-cluster settings come from the ProviderConfig's annotations, so a
platform team sets them where it names the cluster:

- flower.flwr.ai/replicas: the cluster's SuperNodes (StatefulSet mode);
- flower.flwr.ai/cluster-index: the cluster's {clusterIndex}, pinned;
- node-config.flower.flwr.ai/<key>: a nodeConfig value, over the pool's.

Each cluster of a pool has an index, {clusterIndex}: pinned by annotation,
else the one its workload already carries, else the lowest free one. A
cluster that joins never renumbers the others; one that leaves frees its
index. Stability comes before density.

A cluster whose settings are wrong is held: its pool is not composed, what
exists is kept unchanged, and status says why.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

from function.api import cluster_settings, names, nodeconfig
from function.api.cluster_settings import INDEX_ANNOTATION as INDEX_ANNOTATION  # noqa: PLC0414 - read here by name
from function.api.cluster_settings import NODE_CONFIG_PREFIX, REPLICAS_ANNOTATION
from function.api.spec import FederationSpec, NodeConfigValue, PoolSpec, ProviderConfigRef

ProviderConfigKind = Literal["ProviderConfig", "ClusterProviderConfig"]
CLUSTER_API = "kubernetes.crossplane.io/v1alpha1"
NAMESPACED_API = "kubernetes.m.crossplane.io/v1alpha1"

# On a selected pool's workload: the spec pool it stands in for. Its
# cluster-index annotation is how the index is remembered.
SELECTED_BY_ANNOTATION = "flower.flwr.ai/selected-by"

# names.SELECTED_SUFFIX leaves room for "-", a character of the cluster's
# name, "-" and this many characters of hash.
HASH_LENGTH = 5


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One required-resource request: the ProviderConfigs of one kind with a pool's labels."""

    key: str
    api_version: str
    kind: str
    labels: dict[str, str]
    namespace: str | None = None


def requirements(spec: FederationSpec, namespace: str, *, namespaced: bool) -> list[Requirement]:
    """What to ask Crossplane for: per selector pool, the ProviderConfigs (of both kinds for a namespaced XR)."""
    out = []
    for pool in spec.supernodes.pools:
        if pool.clusterSelector is None:
            continue
        labels = dict(pool.clusterSelector.matchLabels)
        if namespaced:
            out.append(Requirement(requirement_key(pool.name, "ClusterProviderConfig"), NAMESPACED_API,
                                   "ClusterProviderConfig", labels))  # fmt: skip
            out.append(Requirement(requirement_key(pool.name, "ProviderConfig"), NAMESPACED_API,
                                   "ProviderConfig", labels, namespace))  # fmt: skip
        else:
            out.append(Requirement(requirement_key(pool.name, "ProviderConfig"), CLUSTER_API, "ProviderConfig", labels))
    return out


def requirement_key(pool: str, kind: str) -> str:
    """The name of a pool's requirement for one kind of ProviderConfig."""
    return f"clusters-{pool}" if kind == "ProviderConfig" else f"clusters-{pool}-{kind.lower()}"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A selected ProviderConfig: the cluster it names and its annotations."""

    ref: ProviderConfigRef
    annotations: dict[str, str]

    @property
    def key(self) -> str:
        """The cluster's identity: its ProviderConfig's kind and name."""
        return f"{self.ref.kind}/{self.ref.name}"


def found(
    spec: FederationSpec, required: Mapping[str, list[dict[str, Any]] | None], *, namespaced: bool
) -> dict[str, list[Cluster] | None]:
    """Per selector pool, the clusters Crossplane found; None while it has not answered yet."""
    out: dict[str, list[Cluster] | None] = {}
    kinds: tuple[ProviderConfigKind, ...] = (
        ("ClusterProviderConfig", "ProviderConfig") if namespaced else ("ProviderConfig",)
    )
    for pool in spec.supernodes.pools:
        if pool.clusterSelector is None:
            continue
        answers = [required.get(requirement_key(pool.name, kind)) for kind in kinds]
        if any(a is None for a in answers):
            out[pool.name] = None
            continue
        clusters = []
        for kind, items in zip(kinds, answers, strict=True):
            for item in items or []:
                metadata = item.get("metadata") or {}
                name = metadata.get("name")
                if isinstance(name, str) and name:
                    annotations = metadata.get("annotations") or {}
                    # A cluster-scoped Object names no kind: its ref keeps the default one.
                    ref = ProviderConfigRef(name=name, kind=kind) if namespaced else ProviderConfigRef(name=name)
                    clusters.append(Cluster(ref, {k: str(v) for k, v in annotations.items()}))
        out[pool.name] = sorted(clusters, key=lambda c: (c.ref.name, c.ref.kind))
    return out


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def pool_name(federation: str, pool: str, ref: ProviderConfigRef, *, mode: str, namespaced: bool) -> str:
    """The name of a pool in one cluster: <pool>-<cluster>, the same whoever else is selected.

    A hash of the cluster's identity is added when its name had to change
    (dots, length) or when a namespaced ProviderConfig and a
    ClusterProviderConfig could share it, so two clusters never share a name.
    """
    identity = f"{ref.kind}/{ref.name}" if namespaced and ref.kind == "ClusterProviderConfig" else ref.name
    slug = ref.name.replace(".", "-")
    limit = names.MAX_STATEFULSET_NAME if mode == "StatefulSet" else names.MAX_NAME
    room = limit - len(names.pool(federation, pool)) - 1
    if slug == identity and len(slug) <= room:
        return f"{pool}-{slug}"
    keep = slug[: max(room - HASH_LENGTH - 1, 1)].rstrip("-")
    return f"{pool}-{keep}-{_hash(identity)}"


@dataclasses.dataclass(frozen=True)
class Member:
    """One cluster a selector pool runs in, and the pool it becomes there (None while held)."""

    selector: str
    cluster: ProviderConfigRef
    index: int | None
    name: str
    pool: PoolSpec | None
    problem: str = ""
    # The selector pool's namespace setting (None: the Federation's).
    namespace: str | None = None
    # The cluster's settings: its ProviderConfig's annotations this function reads, but the index.
    settings: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Selection:
    """What the selectors stand for in this reconcile."""

    members: list[Member]
    # Selector pools that match no cluster, and those whose clusters are not known yet.
    unmatched: list[str]
    pending: list[str]

    @functools.cached_property
    def placed(self) -> list[Member]:
        """The members composed in this reconcile."""
        return [m for m in self.members if m.pool is not None]

    @functools.cached_property
    def held(self) -> list[Member]:
        """The members held back by their cluster's settings."""
        return [m for m in self.members if m.pool is None]

    @functools.cached_property
    def by_name(self) -> dict[str, Member]:
        """The composed members by pool name."""
        return {m.name: m for m in self.placed}


def _remembered(observed: dict[str, Any], resource: str) -> int | None:
    """The cluster index an observed workload Object carries."""
    node: Any = observed.get(resource)
    for key in ("spec", "forProvider", "manifest", "metadata", "annotations", INDEX_ANNOTATION):
        node = node.get(key) if isinstance(node, dict) else None
    return int(node) if isinstance(node, str) and node.isdigit() else None


def _remembered_index(
    observed: dict[str, Any], context: Context, selector: str, name: str, ref: ProviderConfigRef
) -> int | None:
    """A cluster's index as its workload carries it, else as its FederationCluster was given it."""
    index = _remembered(observed, context.resource(name))
    if index is not None or context.part is None:
        return index
    given = context.part(ref)
    node = given.get("selected") if isinstance(given, dict) else None
    for entry in node if isinstance(node, list) else []:
        if isinstance(entry, dict) and entry.get("selector") == selector and isinstance(entry.get("index"), int):
            return int(entry["index"])
    return None


def _node_config(cluster: Cluster) -> dict[str, NodeConfigValue]:
    return {
        k[len(NODE_CONFIG_PREFIX) :]: v
        for k, v in sorted(cluster.annotations.items())
        if k.startswith(NODE_CONFIG_PREFIX)
    }


def numbered(spec: FederationSpec) -> bool:
    """Whether any pool numbers its SuperNodes federation-wide ({globalIndex}, {totalReplicas})."""
    return any(
        isinstance(v, str) and any(p in v for p in nodeconfig.FEDERATION_WIDE)
        for pool in spec.supernodes.pools
        for v in pool.nodeConfig.values()
    )


@dataclasses.dataclass(frozen=True)
class Context:
    """What a selector's expansion needs beyond the spec."""

    federation: str
    namespaced: bool
    resource: Callable[[str], str]  # pool name -> composition resource name of its workload
    # A claim or namespaced XR: the namespace its pools in the SuperLink's cluster must stay in.
    stay_in: str | None = None
    hub: ProviderConfigRef | None = None
    # Cluster -> what its FederationCluster was last given (its selected pools and indices), if any.
    part: Callable[[ProviderConfigRef], Mapping[str, Any] | None] | None = None


def _indices(
    pool: PoolSpec, clusters: list[Cluster], remembered: dict[str, int | None]
) -> tuple[dict[str, int], dict[str, str]]:
    """Each cluster's index, and why a cluster has none: pinned, then remembered, then the lowest free."""
    limit = pool.clusterSelector.maxClusters if pool.clusterSelector else 1
    indices: dict[str, int] = {}
    problems: dict[str, str] = {}
    taken: dict[int, str] = {}
    for c in clusters:
        key = c.key
        text = c.annotations.get(INDEX_ANNOTATION)
        if text is None:
            continue
        pinned, problem = cluster_settings.pinned_index(text, limit, taken)
        if pinned is None:
            problems[key] = problem
        else:
            indices[key], taken[pinned] = pinned, c.ref.name
    for c in clusters:
        key = c.key
        index = remembered.get(key)
        if key in indices or key in problems or index is None or index >= limit or index in taken:
            continue
        indices[key], taken[index] = index, c.ref.name
    free = (i for i in range(limit) if i not in taken)
    for c in clusters:
        key = c.key
        if key not in indices and key not in problems:
            index = next(free)
            indices[key], taken[index] = index, c.ref.name
    return indices, problems


def _member(
    spec: FederationSpec, pool: PoolSpec, cluster: Cluster, index: int | None, name: str, problem: str, *, ids: bool
) -> Member:
    """The pool in one cluster, or why its settings hold it back.

    ids: whether the Federation numbers SuperNodes federation-wide (numbered).
    """
    replicas = pool.replicas
    text = cluster.annotations.get(REPLICAS_ANNOTATION)
    if not problem and text is not None and spec.mode == "StatefulSet":
        replicas, problem = cluster_settings.replicas(text, pool.replicas, numbered=ids)
    extra = _node_config(cluster)
    if not problem and extra:
        problem = cluster_settings.node_config(extra, spec.mode)
    if problem:
        return Member(pool.name, cluster.ref, index, name, None, problem, pool.namespace, _settings(cluster))
    expanded = pool.model_copy(
        update={
            "name": name,
            "replicas": replicas,
            "providerConfigRef": cluster.ref,
            "clusterSelector": None,
            "nodeConfig": {**pool.nodeConfig, **extra},
        }
    )
    return Member(pool.name, cluster.ref, index, name, expanded, "", pool.namespace, _settings(cluster))


def _settings(cluster: Cluster) -> dict[str, str]:
    """The annotations of a cluster that set what its pools run: replicas and nodeConfig values."""
    return {
        k: v
        for k, v in sorted(cluster.annotations.items())
        if k == REPLICAS_ANNOTATION or k.startswith(NODE_CONFIG_PREFIX)
    }


def _escapes(pool: PoolSpec, cluster: Cluster, context: Context) -> bool:
    """Whether a claim's pool would leave the claim's namespace in the SuperLink's cluster."""
    if context.stay_in is None or not pool.namespace or pool.namespace == context.stay_in:
        return False
    hub = context.hub
    return hub is not None and cluster.ref.name == hub.name and (not context.namespaced or cluster.ref.kind == hub.kind)


def expand(
    spec: FederationSpec,
    clusters: dict[str, list[Cluster] | None],
    observed: dict[str, Any],
    context: Context,
) -> Selection:
    """Each selector pool's members: its clusters, with their index, pool or problem.

    No selector may match more than its maxClusters (refusals.cluster_counts).
    """
    members: list[Member] = []
    unmatched, pending = [], []
    taken_names = {p.name for p in spec.supernodes.pools}
    ids = numbered(spec)
    for pool in spec.supernodes.pools:
        if pool.clusterSelector is None:
            continue
        chosen = clusters.get(pool.name)
        if chosen is None:
            pending.append(pool.name)
            continue
        if not chosen:
            unmatched.append(pool.name)
            continue
        members += _members(spec, pool, chosen, observed, context, taken_names=taken_names, ids=ids)
    return Selection(members, unmatched, pending)


def _members(
    spec: FederationSpec,
    pool: PoolSpec,
    chosen: list[Cluster],
    observed: dict[str, Any],
    context: Context,
    *,
    taken_names: set[str],
    ids: bool,
) -> list[Member]:
    """One selector pool's members, one per chosen cluster; the names they take are added to taken_names."""
    named = {
        c.key: pool_name(context.federation, pool.name, c.ref, mode=spec.mode, namespaced=context.namespaced)
        for c in chosen
    }
    refs = {c.key: c.ref for c in chosen}
    remembered = {key: _remembered_index(observed, context, pool.name, name, refs[key]) for key, name in named.items()}
    indices, problems = _indices(pool, chosen, remembered)
    members = []
    for cluster in chosen:
        key = cluster.key
        name = named[key]
        problem = problems.get(key, "")
        if not problem and name in taken_names:
            problem = f"its pool name {name!r} is taken by another pool"
        if not problem and _escapes(pool, cluster, context):
            problem = (
                f"it is the SuperLink's cluster, where a claim's pools stay in namespace {context.stay_in!r}, "
                f"not {pool.namespace!r}"
            )
        taken_names.add(name)
        members.append(_member(spec, pool, cluster, indices.get(key), name, problem, ids=ids))
    return members


def expanded(spec: FederationSpec, selection: Selection) -> FederationSpec:
    """The spec with each selector pool replaced by its composed members, in index order."""
    pools: list[PoolSpec] = []
    for pool in spec.supernodes.pools:
        if pool.clusterSelector is None:
            pools.append(pool)
            continue
        mine = sorted((m for m in selection.placed if m.selector == pool.name), key=lambda m: m.index or 0)
        pools.extend(m.pool for m in mine if m.pool is not None)
    supernodes = spec.supernodes.model_copy(update={"pools": pools})
    return spec.model_copy(update={"supernodes": supernodes})
