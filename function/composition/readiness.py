"""When a composed workload counts as ready, said twice.

Once as a CEL query that provider-kubernetes evaluates on the live object (so
`kubectl get objects` agrees), and once as the same rule in Python, which the
function applies to what Crossplane observed (so the XR's Ready condition
means what the operator's meant). tests/composition/test_readiness.py holds the two to
each other through cel-go.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def _field(path: str) -> str:
    """A status counter, 0 when absent (Kubernetes omits zero counters)."""
    return f"(has(object.status.{path}) ? object.status.{path} : 0)"


_CURRENT = (
    "has(object.status) && has(object.status.observedGeneration) && "
    "object.status.observedGeneration == object.metadata.generation"
)

CEL = {
    "StatefulSet": " && ".join(
        [
            _CURRENT,
            f"{_field('readyReplicas')} == object.spec.replicas",
            f"{_field('updatedReplicas')} == object.spec.replicas",
        ]
    ),
    "DaemonSet": " && ".join(
        [
            _CURRENT,
            f"{_field('numberReady')} == {_field('desiredNumberScheduled')}",
            f"{_field('updatedNumberScheduled')} == {_field('desiredNumberScheduled')}",
        ]
    ),
    "LoadBalancer": (
        "has(object.status) && has(object.status.loadBalancer) && "
        "has(object.status.loadBalancer.ingress) && size(object.status.loadBalancer.ingress) > 0"
    ),
    # cert-manager's Certificate: ready once issued, not once created (its Secret may never come).
    "Certificate": (
        "has(object.status) && has(object.status.conditions) && "
        "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"
    ),
}


# What a list's readiness says while its place's SuperNodes change.
UNSETTLED = (
    "// its SuperNodes are not all ready and up to date, or one replaces a retired key, as last observed: "
    "not Ready until they are done"
)


def keys_list(keys: int, *, settled: bool) -> dict[str, str]:
    """The spec.readiness of a keys gatherer's list: Ready once its place has settled and it holds a key each.

    Not for the XR's sake (the status counts the keys awaited itself) but the provider's: it polls
    an Object that is not Ready every 30 s and one that is at its --poll (10 minutes by default).
    So the list is looked at as often as its place's workloads while their pods start, roll,
    fail or replace a retired key (settled False: each publishes a new key), and at the
    provider's poll after. keys: a key for each SuperNode of the place, by its gatherer's count
    (gather_program.COUNT_FIELD).
    """
    if not settled:
        return {"policy": "DeriveFromCelQuery", "celQuery": f"false {UNSETTLED}"}
    if keys <= 0:
        return {"policy": "SuccessfulCreate"}
    count = "object.data.count"
    query = f"has(object.data) && has({count}) && {count}.matches('^[0-9]{{1,9}}$') && int({count}) >= {keys}"
    return {"policy": "DeriveFromCelQuery", "celQuery": query}


def expected_pods(mode: str, replicas: int | None, o: Observed) -> int:
    """How many pods a pool's workload runs: as observed, else what the spec asks (unknowable for a DaemonSet)."""
    if o.desired is not None:
        return o.desired
    return (replicas or 0) if mode == "StatefulSet" else 0


def policy(manifest: dict[str, Any]) -> dict[str, str]:
    """The Object's spec.readiness for a manifest the function composes."""
    kind = manifest["kind"]
    if kind == "Service":
        kind = manifest["spec"]["type"] if manifest["spec"]["type"] == "LoadBalancer" else "Service"
    if kind in CEL:
        return {"policy": "DeriveFromCelQuery", "celQuery": CEL[kind]}
    # A ClusterIP or NodePort Service is usable once it exists.
    return {"policy": "SuccessfulCreate"}


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the live object says: ready or not, counts, and why, if not."""

    ready: bool
    desired: int | None = None  # replicas or scheduled pods; None when not observed
    ready_count: int = 0
    detail: str = ""
    unknown: bool = False
    settled: bool = False  # the controller has seen the latest spec


def _count(status: dict[str, Any], key: str) -> int:
    value = status.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"status.{key} is {value!r}, not a count"
        raise ValueError(msg)
    return value


def observe(manifest: dict[str, Any], live: Any) -> Observed:
    """Judge the observed object live (status.atProvider.manifest) for manifest."""
    if not isinstance(live, dict) or not live:
        return Observed(ready=False, detail="not created yet")
    try:
        return _observe(manifest, live)
    except (ValueError, TypeError, AttributeError) as err:
        return Observed(ready=False, detail=f"status unknown: {err}", unknown=True)


def _observe(manifest: dict[str, Any], live: dict[str, Any]) -> Observed:
    kind = manifest["kind"]
    if kind not in ("StatefulSet", "DaemonSet", "Service", "Certificate"):
        # A ServiceAccount or Namespace is ready once it exists.
        return Observed(ready=True)
    status = live.get("status") or {}
    metadata = live.get("metadata") or {}
    if not isinstance(status, dict) or not isinstance(metadata, dict):
        msg = "status or metadata is not an object"
        raise ValueError(msg)
    if kind == "Certificate":
        return _certificate(status)
    if kind == "Service":
        if manifest["spec"]["type"] != "LoadBalancer":
            return Observed(ready=True)
        ingress = (status.get("loadBalancer") or {}).get("ingress") or []
        return Observed(bool(ingress), detail="" if ingress else "no load-balancer address yet")
    generation = metadata.get("generation")
    observed_generation = status.get("observedGeneration")
    current = generation is not None and observed_generation == generation
    if kind == "StatefulSet":
        desired = (live.get("spec") or {}).get("replicas", manifest["spec"].get("replicas", 1))
        if isinstance(desired, bool) or not isinstance(desired, int):
            msg = f"spec.replicas is {desired!r}"
            raise ValueError(msg)
        ready, updated = _count(status, "readyReplicas"), _count(status, "updatedReplicas")
    else:
        desired = _count(status, "desiredNumberScheduled")
        ready, updated = _count(status, "numberReady"), _count(status, "updatedNumberScheduled")
    ok = current and ready == desired and updated == desired
    if ok or ready != desired:
        detail = ""
    elif not current:
        detail = "the latest spec is not rolled out yet"
    else:
        detail = f"rolling update in progress ({updated}/{desired} updated)"
    return Observed(ok, desired, ready, detail, settled=current)


def _certificate(status: dict[str, Any]) -> Observed:
    """Issued (its Ready condition True), or why not in cert-manager's own words."""
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        msg = "status.conditions is not a list of conditions"
        raise ValueError(msg)
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return Observed(ready=False, detail="not issued yet")
    if ready.get("status") == "True":
        return Observed(ready=True)
    why = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
    return Observed(ready=False, detail=f"not issued: {why}" if why else "not issued yet")
