"""FederationRuns as the function knows them once read: which Federation each asks for, and what to run.

A run's own call reads it with `run` (refusing what it cannot be); a
Federation's call reads the runs Crossplane answered with `of_federation`,
keeping those that name it and leaving out any its own call refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from function.api import refusals
from function.api.refusals import SpecError
from function.api.run_spec import FederationRunSpec

KINDS = ("FederationRun", "XFederationRun")
CLAIM_NAME = "crossplane.io/claim-name"
CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
# Fields Crossplane adds to a composite's spec (v1: compositionRef, claimRef...; v2: crossplane).
_OURS = frozenset(FederationRunSpec.model_fields)


@dataclasses.dataclass(frozen=True)
class Run:
    """A checked FederationRun: its name and namespace as its user sees them, its uid and spec."""

    name: str
    namespace: str
    uid: str
    spec: FederationRunSpec
    # A Crossplane v2 namespaced XR, rather than a claim's cluster-scoped composite.
    namespaced: bool
    created: str = ""


def is_run(xr: dict[str, Any]) -> bool:
    """Whether the composite is a FederationRun (either flavour)."""
    return xr.get("kind") in KINDS


def run(xr: dict[str, Any]) -> Run:
    """Read a FederationRun composite; raise SpecError naming the field.

    A claim's name, namespace and uid are the claim's (what its user sees and
    deletes); a namespaced XR's its own. A cluster-scoped composite without a
    claim belongs to no namespace, so to no Federation's.
    """
    metadata = xr.get("metadata") or {}
    labels = metadata.get("labels") or {}
    given = xr.get("spec") or {}
    spec = refusals.run_spec({k: v for k, v in given.items() if k in _OURS} if isinstance(given, dict) else given)
    if labels.get(CLAIM_NAME) and labels.get(CLAIM_NAMESPACE):
        # The composite's uid: a claim deleted and applied again is a new composite, so a new run.
        return Run(labels[CLAIM_NAME], labels[CLAIM_NAMESPACE], metadata.get("uid") or "", spec, namespaced=False,
                   created=metadata.get("creationTimestamp") or "")  # fmt: skip
    if metadata.get("namespace"):
        return Run(metadata.get("name") or "", metadata["namespace"], metadata.get("uid") or "", spec,
                   namespaced=True, created=metadata.get("creationTimestamp") or "")  # fmt: skip
    raise refusals.unclaimed_run()


def of_federation(name: str, namespace: str, answered: Iterable[dict[str, Any]]) -> list[Run]:
    """The runs of the Federation name in namespace, oldest first; those their own call refuses left out."""
    out = []
    for xr in answered:
        try:
            found = run(xr)
        except SpecError:
            continue
        if found.namespace == namespace and found.spec.federation == name and found.uid:
            out.append(found)
    return sorted(out, key=lambda r: (r.created, r.name))
