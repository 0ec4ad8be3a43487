"""A FederationCluster: what one remote cluster of a Federation runs, as the Federation composes it.

A Federation whose selector pools run in many clusters composes one of these
per remote cluster, and each is rendered by a function call of its own: no
call carries the whole federation, and a cluster's objects are composed,
observed and kept by its own composite. The function writes it and reads it
back; nobody else should (tenants get no RBAC for it, see docs/multicluster.md).

It holds the Federation's spec as written, cut to the selector pools with a
member in this cluster, and what only the whole Federation can work out: the
cluster's index and first global SuperNode id in each pool, the address the
pools dial, the CA they trust, and the keys the SuperLink retired.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from function.api.spec import DNS_LABEL_PATTERN, Model, ObjectName, ProviderConfigRef


class SelectedPool(Model):
    selector: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN, description="The selector pool of the spec."
    )
    index: int = Field(ge=0, description="The cluster's {clusterIndex} in that pool, as the Federation keeps it.")
    offset: int | None = Field(
        default=None, ge=0, description="StatefulSet mode: the global id of the cluster's first SuperNode there."
    )


class FederationClusterSpec(Model):
    federation: ObjectName = Field(description="The Federation's name, as its objects are named.")
    namespace: ObjectName = Field(description="The Federation's namespace.")
    bound: bool = Field(default=False, description="A claim's or namespaced Federation: bound to its namespace.")
    providerConfigRef: ProviderConfigRef = Field(description="The cluster.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="The cluster's settings: its ProviderConfig's Flower annotations."
    )
    federationSpec: dict[str, Any] = Field(
        description="The Federation's spec as written, with only the selector pools that run in this cluster.",
        # Checked by the function as a Federation's spec is (refusals.cluster_spec), so kept whole here.
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    selected: list[SelectedPool] = Field(min_length=1, description="Those pools, with this cluster's index.")
    totalReplicas: int | None = Field(default=None, ge=0, description="StatefulSet mode: the global ids there are.")
    fleetAddress: str = Field(min_length=1, description="The SuperLink's Fleet address the pools dial.")
    caCertificate: str | None = Field(
        default=None, description="With TLS: the CA the pools trust unless they name one, base64 as a Secret holds it."
    )
    retiredKeys: dict[str, list[str]] = Field(
        default_factory=dict, description="By pool namespace: digests of keys the SuperLink retired."
    )


class GroupedCluster(Model):
    name: str = Field(
        min_length=1, max_length=253, description="The FederationCluster's composition resource name: its cluster's."
    )
    providerConfigRef: ProviderConfigRef = Field(description="The cluster.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="The cluster's settings: its ProviderConfig's Flower annotations."
    )
    selected: list[SelectedPool] = Field(min_length=1, description="The selector pools with a member there.")
    retiredKeys: dict[str, list[str]] = Field(
        default_factory=dict, description="By pool namespace: digests of keys the SuperLink retired."
    )


class GroupKeys(Model):
    shard: str = Field(pattern=r"^[0-9]{2}$", description="The group's shard of the SuperLink's list of keys.")
    providerConfigRef: ProviderConfigRef = Field(description="The SuperLink's cluster, where the shard is.")


class FederationClusterGroupSpec(Model):
    """A FederationClusterGroup: the FederationClusters of a share of a Federation's remote clusters.

    A Federation composes its remote clusters' FederationClusters through a
    fixed number of groups, so that no composite applies more than a few dozen
    resources in one reconcile (Crossplane gives a reconcile two minutes, and
    applies one resource after another). What every cluster shares is written
    once: the FederationClusters it composes are its fields plus each entry's.
    """

    federation: ObjectName = Field(description="The Federation's name, as its objects are named.")
    namespace: ObjectName = Field(description="The Federation's namespace.")
    bound: bool = Field(default=False, description="A claim's or namespaced Federation: bound to its namespace.")
    federationSpec: dict[str, Any] = Field(
        description="The Federation's spec as written, with only the selector pools that run in these clusters.",
        # Each FederationCluster's call checks its cut of it as a Federation's spec is.
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    totalReplicas: int | None = Field(default=None, ge=0, description="StatefulSet mode: the global ids there are.")
    fleetAddress: str = Field(min_length=1, description="The SuperLink's Fleet address the pools dial.")
    caCertificate: str | None = Field(
        default=None, description="With TLS: the CA the pools trust unless they name one, base64 as a Secret holds it."
    )
    clusters: list[GroupedCluster] = Field(default_factory=list, description="The clusters composed, one each.")
    kept: list[str] = Field(
        default_factory=list,
        description="FederationClusters of clusters held by their settings: kept as they are, not composed anew.",
    )
    authorizedKeys: GroupKeys | None = Field(
        default=None,
        description=(
            "With node authentication: where the group lists the keys its FederationClusters report, "
            "a ConfigMap beside the SuperLink that its registrar reads."
        ),
    )
