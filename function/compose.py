"""From an observed XR to the desired composed resources: pure, no gRPC."""

from __future__ import annotations

import dataclasses
from typing import Any

from function import superlink, supernodes, validation
from function.spec import FederationSpec
from function.validation import SpecError

OBJECT_API = "kubernetes.crossplane.io/v1alpha2"
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


def pool_resource(pool_name: str) -> str:
    return f"pool-{pool_name}"


@dataclasses.dataclass(frozen=True)
class Federation:
    name: str
    namespace: str
    spec: FederationSpec


def federation(xr: dict[str, Any]) -> Federation:
    """Read the XR into a checked Federation; raise SpecError naming the field."""
    metadata = xr.get("metadata") or {}
    raw = {k: v for k, v in (xr.get("spec") or {}).items() if k not in CROSSPLANE_SPEC_FIELDS}
    spec = validation.parse(raw)
    labels = metadata.get("labels") or {}
    claim_ref = (xr.get("spec") or {}).get("claimRef") or {}
    claim_name = labels.get(CLAIM_NAME) or claim_ref.get("name")
    claim_namespace = labels.get(CLAIM_NAMESPACE) or claim_ref.get("namespace")
    if claim_name and claim_namespace:
        # A claim deploys into its own namespace and nowhere else.
        if spec.namespace and spec.namespace != claim_namespace:
            raise SpecError(
                [("spec.namespace", f"must be empty or {claim_namespace!r}: a claim deploys into its own namespace")]
            )
        name, namespace = claim_name, claim_namespace
    else:
        name = metadata.get("name") or ""
        namespace = spec.namespace or "default"
    if not name:
        raise SpecError([("metadata.name", "is required")])
    errors = validation.check_names(name, spec)
    if errors:
        raise SpecError(errors)
    return Federation(name, namespace, spec)


def manifests(fed: Federation) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of a Federation, keyed by composition resource name."""
    out = {
        SUPERLINK: superlink.statefulset(fed.name, fed.namespace, fed.spec),
        SERVICE: superlink.service(fed.name, fed.namespace, fed.spec),
    }
    for pool in fed.spec.supernodes.pools:
        out[pool_resource(pool.name)] = supernodes.workload(fed.name, fed.namespace, fed.spec, pool)
    return out


def wrap(manifest: dict[str, Any], provider_config: str) -> dict[str, Any]:
    """A provider-kubernetes Object that applies manifest to the chosen cluster."""
    return {
        "apiVersion": OBJECT_API,
        "kind": "Object",
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"name": provider_config},
        },
    }


def desired(fed: Federation) -> dict[str, dict[str, Any]]:
    provider_config = fed.spec.providerConfigRef.name
    return {name: wrap(m, provider_config) for name, m in manifests(fed).items()}


def _observed_manifest(observed: dict[str, Any], name: str) -> dict[str, Any]:
    obj = observed.get(name) or {}
    manifest = ((obj.get("status") or {}).get("atProvider") or {}).get("manifest")
    return manifest if isinstance(manifest, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def status(fed: Federation, observed: dict[str, dict[str, Any]], generation: Any) -> dict[str, Any]:
    """XR status: endpoints, and SuperNode counts from what Crossplane observed."""
    ports = fed.spec.superlink.service.ports
    address = superlink.service_address(fed.name, fed.namespace)
    pools = []
    for pool in fed.spec.supernodes.pools:
        live = _observed_manifest(observed, pool_resource(pool.name)).get("status") or {}
        if fed.spec.mode == "StatefulSet":
            desired_count, ready = pool.replicas or 0, _count(live.get("readyReplicas"))
        else:
            desired_count, ready = _count(live.get("desiredNumberScheduled")), _count(live.get("numberReady"))
        pools.append({"name": pool.name, "kind": fed.spec.mode, "desired": desired_count, "ready": ready})
    ready_total = sum(p["ready"] for p in pools)
    desired_total = sum(p["desired"] for p in pools)
    out: dict[str, Any] = {
        "supernodes": f"{ready_total}/{desired_total}",
        "readySupernodes": ready_total,
        "desiredSupernodes": desired_total,
        "endpoints": {"superlinkService": f"{address}:{ports.extra}", "fleet": f"{address}:{ports.grpc}"},
        "pools": pools,
    }
    if isinstance(generation, int):
        out["observedGeneration"] = generation
    return out


