"""provider-kubernetes Objects: each composed manifest wrapped for the cluster it goes to."""

from __future__ import annotations

import dataclasses
from typing import Any

from function.api.spec import ProviderConfigRef
from function.composition import readiness

OBJECT_API = "kubernetes.crossplane.io/v1alpha2"
# Crossplane v2 namespaced XRs compose namespaced Objects.
NAMESPACED_OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
# The actions provider-kubernetes takes on a create-only Object: never an update, which would undo the writer's.
CREATE_ONLY = ["Observe", "Create", "Delete"]


@dataclasses.dataclass(frozen=True)
class Composed:
    """One composed Kubernetes object and the cluster (ProviderConfig) it goes to."""

    manifest: dict[str, Any]
    provider_config: ProviderConfigRef
    # Read from the cluster, never written: an observe-only Object.
    observe: bool = False
    # Created once, then only read: its data belongs to whoever writes it in the cluster.
    create_only: bool = False
    # Labels of the Object itself, by which other composites' calls find it (not the manifest's).
    labels: dict[str, str] | None = None
    # The Object's spec.readiness where the manifest's kind does not decide it (readiness.policy).
    readiness: dict[str, str] | None = None


def wrap(
    manifest: dict[str, Any],
    ref: ProviderConfigRef,
    *,
    namespaced: bool = False,
    observe: bool = False,
    create_only: bool = False,
    labels: dict[str, str] | None = None,
    readiness_policy: dict[str, str] | None = None,
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
        spec["readiness"] = readiness_policy or readiness.policy(manifest)
    if create_only:
        spec["managementPolicies"] = CREATE_ONLY
    out: dict[str, Any] = {"apiVersion": NAMESPACED_OBJECT_API if namespaced else OBJECT_API, "kind": "Object"}
    if labels:
        out["metadata"] = {"labels": labels}
    out["spec"] = spec
    return out
