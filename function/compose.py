"""From an observed XR to the desired composed resources: pure, no gRPC."""

from __future__ import annotations

import dataclasses
from typing import Any

from function import readiness, superlink, supernodes, validation
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
            "readiness": readiness.policy(manifest),
        },
    }


def desired(fed: Federation, built: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Objects for the manifests built for fed."""
    provider_config = fed.spec.providerConfigRef.name
    return {name: wrap(m, provider_config) for name, m in built.items()}
