"""The Federation status: what the function writes, and the source of the XRD's status schema.

As with function/api/spec.py, hack/gen_xrd.py turns this model into the XRD's
status schema and hack/gen_api_docs.py documents it, so the schema the API
server keeps and the status the function writes never drift. Field names are
the API's camelCase, on the wire and in Python alike. Conditions are not here:
Crossplane writes status.conditions from the ones the function returns.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from function.api.run_spec import Phase
from function.api.spec import Model


class PoolStatus(Model):
    name: str
    kind: str
    desired: int
    ready: int
    namespace: str = Field(description="Namespace the pool runs in.")
    providerConfig: str = Field(description="ProviderConfig of the cluster the pool runs in.")
    selector: str | None = Field(
        default=None, description="The pool of the spec whose clusterSelector chose this cluster."
    )
    clusterIndex: int | None = Field(default=None, description="The cluster's {clusterIndex} in that pool.")


class Endpoints(Model):
    superlinkService: str = Field(
        description=(
            "Control API address for `flwr run`: the Service's Control port with "
            "spec.superlink.inClusterControlAPI, else 127.0.0.1 at the local end of portForward."
        )
    )
    portForward: str = Field(
        description="The command that leads the Control API to 127.0.0.1:9093 on your machine (RBAC: pods/portforward)."
    )
    fleet: str = Field(description="Fleet API address SuperNodes dial.")
    external: str | None = Field(
        default=None, description="Fleet API address pools in other clusters dial, once known."
    )


class UnreachableCluster(Model):
    providerConfig: str = Field(description="The cluster's ProviderConfig.")
    reason: str = Field(description="CredentialsRefused or Unreachable.")
    message: str = Field(description="What provider-kubernetes' client said, on the Objects it could not sync.")
    objects: int = Field(default=1, description="How many of its Objects could not be synced.")


class RunsSummary(Model):
    inProgress: int = Field(description="FederationRuns Pending or Running.")
    total: int = Field(description="FederationRuns naming this Federation.")
    latest: str | None = Field(
        default=None, description="The newest FederationRun's name and phase, e.g. `mnist-3 (Running)`."
    )


class CompositeStatus(Model):
    """What the function writes into a composite's status (a Federation's, a FederationCluster's, a group's)."""

    def wire(self) -> dict[str, Any]:
        """The status as it goes into the composite: unset fields left out, never written as null."""
        return self.model_dump(exclude_none=True, mode="json")


class FederationStatus(CompositeStatus):
    # Unset when the XR carries no integer generation (a render of a bare manifest).
    observedGeneration: int | None = Field(default=None, description="Generation last processed.")
    version: str = Field(description="Flower release the SuperLink runs: spec.version, or its image's tag.")
    supernodes: str = Field(description="Ready/desired SuperNodes, e.g. 2/3.")
    readySupernodes: int = Field(description="Ready SuperNodes in all pools.")
    desiredSupernodes: int = Field(description="Desired SuperNodes in all pools.")
    registeredSupernodes: int | None = Field(
        default=None,
        description=(
            "With node authentication: SuperNodes of pools that make their own keys whose key the SuperLink "
            "has confirmed. Such a pod is ready only while its key is registered, so these are its ready pods."
        ),
    )
    clusters: int = Field(description="Clusters SuperNode pools run in.")
    runs: RunsSummary | None = Field(default=None, description="Its FederationRuns, once it has any.")
    unreachableClusters: list[UnreachableCluster] | None = Field(
        default=None,
        description="Clusters provider-kubernetes cannot reach: their pools' status is the last seen.",
    )
    endpoints: Endpoints = Field(description="Where to reach the SuperLink.")
    pools: list[PoolStatus] = Field(description="Per-pool status.")


class FederationClusterStatus(CompositeStatus):
    observedGeneration: int | None = Field(default=None, description="Generation last processed.")
    supernodes: str = Field(description="Ready/desired SuperNodes in this cluster, e.g. 2/3.")
    readySupernodes: int = Field(description="Ready SuperNodes in this cluster.")
    desiredSupernodes: int = Field(description="Desired SuperNodes in this cluster.")
    pools: list[PoolStatus] = Field(description="Per-pool status, as the Federation lists it.")
    unreachableClusters: list[UnreachableCluster] | None = Field(
        default=None,
        description="This cluster, if provider-kubernetes cannot reach it: its pools' status is the last seen.",
    )
    publishedKeys: list[str] | None = Field(
        default=None,
        description=(
            "With node authentication: the keys this cluster's SuperNodes published, checked, one "
            "`<key> <holder> <node ID or ->` line each; its group lists them beside the SuperLink."
        ),
    )
    keysAwaited: int | None = Field(
        default=None,
        description=(
            "With node authentication: SuperNodes of its pools whose keys its gatherer has not listed yet; "
            "its group looks at it each minute until there are none."
        ),
    )


class FederationClusterGroupStatus(CompositeStatus):
    observedGeneration: int | None = Field(default=None, description="Generation last processed.")
    clusters: int = Field(description="FederationClusters composed or kept.")
    readyClusters: int = Field(description="Of those, the ones Ready.")
    supernodes: str = Field(description="Ready/desired SuperNodes in these clusters, e.g. 20/30.")
    readySupernodes: int = Field(description="Ready SuperNodes in these clusters.")
    desiredSupernodes: int = Field(description="Desired SuperNodes in these clusters.")
    pools: list[PoolStatus] = Field(description="Per-pool status, as the FederationClusters report it.")
    unreachableClusters: list[UnreachableCluster] | None = Field(
        default=None, description="Those of these clusters provider-kubernetes cannot reach, as they report it."
    )


class FederationRunStatus(CompositeStatus):
    observedGeneration: int | None = Field(default=None, description="Generation last processed.")
    phase: Phase = Field(description="Pending, Running, Completed, Failed or Stopped, from Flower's record of the run.")
    runId: str | None = Field(default=None, description="Flower's run ID, once the SuperLink accepted the run.")
    flowerStatus: str | None = Field(default=None, description="The run's status as Flower records it.")
    startedAt: str | None = Field(default=None, description="When Flower started the run (RFC 3339).")
    finishedAt: str | None = Field(default=None, description="When Flower finished the run (RFC 3339).")
    reason: str | None = Field(default=None, description="Why the run is Pending, Failed or Stopped, in words.")
    logs: str | None = Field(default=None, description="Where the run's logs are: a command to read them.")
