"""The Federation as the function knows it once read: what was asked, what is written, where each pool lands.

The front door (function/federation/read.py) makes it once per call from the
XR; the builders take it, not the name, namespace, spec and release apart.
"""

from __future__ import annotations

import dataclasses
import enum
import functools

from function.api.spec import FederationSpec, PoolSpec, ProviderConfigRef, generates_identity, superlink_ref
from function.api.versions import Images
from function.releases import flower
from function.releases.flower import Dialect
from function.topology import clusters


@dataclasses.dataclass(frozen=True)
class Federation:
    """A checked Federation: its name and namespace as deployed, its spec and the Flower releases it runs."""

    name: str
    namespace: str
    spec: FederationSpec
    flower: flower.Releases
    # A Crossplane v2 namespaced XR, rather than a cluster-scoped one (claimed or not).
    namespaced: bool = False
    # The spec as written, where spec has each selector pool replaced by its clusters' pools.
    declared: FederationSpec | None = None
    selection: clusters.Selection = dataclasses.field(default_factory=lambda: clusters.Selection([], [], []))
    # Bound to its namespace: a claim's, or a namespaced XR's, which is its author's.
    bound: bool = False
    # A FederationCluster: one remote cluster of the Federation, and what the Federation worked out for it.
    part: ClusterPart | None = None
    # Every part's image, named: the builders take them as given.
    images: Images = dataclasses.field(kw_only=True)

    @property
    def written(self) -> FederationSpec:
        """The spec as written: selector pools not yet expanded."""
        return self.declared or self.spec

    def member(self, pool: str) -> clusters.Member | None:
        """The selected cluster a pool of spec stands for, if it comes from a selector."""
        return self.selection.by_name.get(pool)

    @property
    def hub(self) -> ProviderConfigRef:
        """The SuperLink's cluster."""
        return superlink_ref(self.spec)

    @property
    def superlink_dialect(self) -> Dialect:
        """How the SuperLink's release is started."""
        return self.flower.superlink_dialect

    @property
    def control_open(self) -> bool:
        """Whether the Control API listens on the SuperLink pod's address, not its loopback alone: the user's opt-in."""
        return self.spec.superlink.inClusterControlAPI

    @functools.cached_property
    def registers_keys(self) -> bool:
        """Whether the SuperLink's registrar registers published keys: when any pool makes its own."""
        return any(generates_identity(self.spec, pool) for pool in self.spec.supernodes.pools)

    @property
    def keys_sharded(self) -> bool:
        """Whether remote clusters' keys reach the SuperLink in shards, one per group: with any selector pool.

        Decided by the spec as written, not by which clusters match: joins and leaves never change the SuperLink's pod.
        """
        return self.registers_keys and any(p.clusterSelector is not None for p in self.written.supernodes.pools)


@dataclasses.dataclass(frozen=True)
class ClusterPart:
    """What a FederationCluster's Federation worked out for it (function/api/cluster_spec.py)."""

    cluster: ProviderConfigRef
    # The SuperLink's Fleet address its pools dial.
    fleet: str
    # With TLS, the CA its pools trust unless they name one.
    ca: str | None
    # Each pool's first global SuperNode id, and how many ids there are (StatefulSet mode).
    offsets: dict[str, int]
    total: int | None
    # By pool namespace, the digests of the keys the SuperLink retired.
    retired: dict[str, list[str]]


class Hold(enum.Enum):
    """What a pool waits for before it is composed; the value is how status names it."""

    ADDRESS = "the SuperLink's external address"
    CA = "the CA certificate"


@dataclasses.dataclass(frozen=True)
class Trust:
    """With TLS, where a pool's pods find the CA certificate they trust: a Secret and its key."""

    secret: str
    key: str


@dataclasses.dataclass(frozen=True)
class PlacedPool:
    """A pool, where it runs, the Fleet address it dials, the CA it trusts, or what it waits for."""

    spec: PoolSpec
    provider_config: ProviderConfigRef
    namespace: str
    # In another cluster than the SuperLink.
    remote: bool
    # None while a remote pool has no external address to dial.
    fleet: str | None
    # With TLS, the CA the pool's pods trust.
    trust: Trust | None
    # Whether that CA is the function's copy, composed from the SuperLink's Secret.
    copies_ca: bool
    hold: Hold | None
    # With node authentication: its SuperNodes make their own keys and publish them.
    makes_identity: bool = False

    @property
    def name(self) -> str:
        """The pool's name in the spec."""
        return self.spec.name
