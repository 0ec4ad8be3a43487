"""Faults on the real control plane: a spoke cluster stopped for longer than every interval, then a spoke's
credentials rotated away, under a Federation whose SuperLink and other pool live elsewhere.

What a user must see (docs/operations.md, When things fail): the Federation names the cluster it cannot
reach and why (condition ClustersReachable, status.unreachableClusters) within a few minutes, and stays
Ready while the SuperLink's cluster answers, since the rest can train; nothing is deleted in any cluster;
when the cluster answers again everything converges, and no workload's generation moved.

These take minutes of waiting by design (the outage outlasts the provider's poll and Crossplane's
intervals), so they run on one plane only (the oldest minor's, whose lane has room beside the others:
hack/stages.py); the API server's release plays no part in them.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
import yaml

from controlplane import CROSSPLANE_NS, ControlPlane, condition, wait_for
from test_e2e import composite_of, generations_of, get_claim, objects_of, ready, wait_ready

pytestmark = pytest.mark.oldest_minor

NAME, NAMESPACE, SITE, POOLS = "federation-faults", "flower", "site-c", "flower-faults"
# Longer than the provider's poll (1m here), Crossplane's intervals and the Federation's own (60 s) together.
OUTAGE_SECONDS = 300
# How soon the Federation must name an unreachable cluster: a provider poll, a client's timeout, a reconcile.
NAMED_WITHIN = 240


def federation() -> dict[str, Any]:
    """The SuperLink and a pool on the hub, a pool in the site: the site can go away while the rest trains."""
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "mode": "StatefulSet", "isolationMode": "subprocess", "version": "1.42.0",
            "providerConfigRef": {"name": "hub"},
            "superlink": {"service": {"type": "LoadBalancer"}},
            "networkPolicy": {"fleetCIDRs": ["198.51.100.0/24"]},
            "supernodes": {"pools": [
                {"name": "near", "replicas": 1},
                {"name": "far", "replicas": 2, "providerConfigRef": {"name": SITE}, "namespace": POOLS,
                 "createNamespace": True},
            ]},
        },
    }  # fmt: skip


def live_objects(plane: ControlPlane, composite: str, but: str = "") -> dict[tuple[str, str, str, str], str]:
    """Every object the Federation's Objects hold, in every cluster but the one named but, by (cluster, kind,
    namespace, name): its uid."""
    out = {}
    for obj in objects_of(plane, composite):
        manifest = obj["spec"]["forProvider"]["manifest"]
        cluster = plane.cluster_of(obj["spec"]["providerConfigRef"]["name"])
        if cluster.name == but:
            continue
        meta = manifest["metadata"]
        kind = f"{manifest['kind'].lower()}.{manifest['apiVersion'].rsplit('/', 1)[0]}".removesuffix(".v1")
        found = cluster.get(kind, meta["name"], meta.get("namespace", ""))
        out[cluster.name, manifest["kind"], meta.get("namespace", ""), meta["name"]] = (
            (found or {}).get("metadata", {}).get("uid", "")
        )
    return out


def reachability(plane: ControlPlane) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The claim's ClustersReachable condition and its status.unreachableClusters."""
    claim = get_claim(plane, NAME, NAMESPACE) or {}
    return condition(claim, "ClustersReachable"), (claim.get("status") or {}).get("unreachableClusters") or []


def named_unreachable(plane: ControlPlane, why: str) -> dict[str, Any] | None:
    """The site's entry in unreachableClusters, once the condition says why; None before."""
    cond, entries = reachability(plane)
    entry = next((e for e in entries if e.get("providerConfig") == SITE), None)
    if cond.get("status") == "False" and cond.get("reason") == why and entry and entry.get("reason") == why:
        return entry
    return None


def converged(plane: ControlPlane, before: dict[str, Any], generations: dict[str, Any]) -> None:
    """Reachable again, the same objects (by uid) in every cluster, and no generation moved."""
    composite = composite_of(plane, get_claim(plane, NAME, NAMESPACE))["metadata"]["name"]
    wait_for("every cluster reachable again", lambda: reachability(plane)[0].get("status") == "True"
             and not reachability(plane)[1], timeout=NAMED_WITHIN, interval=5)  # fmt: skip
    wait_ready(plane, NAME, NAMESPACE)
    assert live_objects(plane, composite) == before, "an object was deleted or made again"
    assert generations_of(plane, [composite]) == generations


@pytest.fixture(scope="module")
def faulted(plane: ControlPlane) -> Any:
    """The Federation the faults happen under, Ready; deleted, with what it made in the site, after the last."""
    plane.hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, federation())
    wait_ready(plane, NAME, NAMESPACE)
    yield plane
    plane.hub.kubectl("delete", "federation", NAME, "-n", NAMESPACE, "--wait=true", timeout=300)
    wait_for("its objects gone from the site",
             lambda: not plane.sites[SITE].get("statefulsets.apps", namespace=POOLS), timeout=240)  # fmt: skip


def test_a_spoke_cluster_stopped_for_five_minutes_is_named_and_loses_nothing(faulted):
    plane = faulted
    site = plane.sites[SITE]
    claim = wait_ready(plane, NAME, NAMESPACE)
    composite = composite_of(plane, claim)["metadata"]["name"]
    before = live_objects(plane, composite)
    assert all(before.values()), [k for k, uid in before.items() if not uid]
    assert any(k[0] == site.name for k in before), "the site holds some of the Federation's objects"
    generations = generations_of(plane, [composite])

    plane.stop_cluster(site)
    stopped = time.monotonic()
    try:
        entry = wait_for(f"{SITE} named unreachable", lambda: named_unreachable(plane, "Unreachable"),
                         timeout=NAMED_WITHIN, interval=5)  # fmt: skip
        assert entry["objects"] > 0 and entry["message"], entry
        # The rest can train: the SuperLink's cluster answers, so the Federation stays Ready throughout.
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            assert ready(get_claim(plane, NAME, NAMESPACE)), get_claim(plane, NAME, NAMESPACE)
            assert named_unreachable(plane, "Unreachable"), reachability(plane)
            time.sleep(15)
        rest = {k: v for k, v in before.items() if k[0] != site.name}
        assert live_objects(plane, composite, but=site.name) == rest, "deleted or made again where the rest runs"
    finally:
        plane.start_cluster(site)
    converged(plane, before, generations)


def test_a_spokes_credentials_rotated_away_are_named_and_lose_nothing(faulted):
    """The site's kubeconfig Secret rewritten with a token its API server refuses, then put back."""
    plane = faulted
    hub = plane.hub
    claim = wait_ready(plane, NAME, NAMESPACE)
    composite = composite_of(plane, claim)["metadata"]["name"]
    before, generations = live_objects(plane, composite), generations_of(plane, [composite])
    secret = hub.get("secret", f"{SITE}-kubeconfig", CROSSPLANE_NS)
    good = secret["data"]["kubeconfig"]
    config = yaml.safe_load(base64.b64decode(good))
    for user in config["users"]:
        user["user"] = {"token": "rotated-away"}
    bad = base64.b64encode(yaml.safe_dump(config).encode()).decode()
    hub.kubectl("patch", "secret", secret["metadata"]["name"], "-n", CROSSPLANE_NS, "--type=merge",
                "-p", f'{{"data": {{"kubeconfig": "{bad}"}}}}')  # fmt: skip
    try:
        entry = wait_for(f"{SITE}'s credentials named", lambda: named_unreachable(plane, "CredentialsRefused"),
                         timeout=NAMED_WITHIN, interval=5)  # fmt: skip
        assert "Unauthorized" in entry["message"] or "credentials" in entry["message"], entry
        assert ready(get_claim(plane, NAME, NAMESPACE)), "the rest can train"
    finally:
        hub.kubectl("patch", "secret", secret["metadata"]["name"], "-n", CROSSPLANE_NS, "--type=merge",
                    "-p", f'{{"data": {{"kubeconfig": "{good}"}}}}')  # fmt: skip
    converged(plane, before, generations)


@pytest.mark.parametrize("process", ["provider-kubernetes", "crossplane"])
def test_the_provider_or_crossplane_killed_mid_reconcile_deletes_and_duplicates_nothing(faulted, process):
    """A scale-up in flight when the process dies (SIGKILL, as a node failure): once it is back, the change
    lands once, every object is the one it was (by uid), and no other generation moved."""
    plane = faulted
    hub = plane.hub
    composite = composite_of(plane, wait_ready(plane, NAME, NAMESPACE))["metadata"]["name"]
    before, generations = live_objects(plane, composite), generations_of(plane, [composite])
    near = f"{NAME}-supernode-near"
    replicas = hub.get("statefulsets.apps", near, NAMESPACE)["spec"]["replicas"]
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/replicas", "value": replicas + 1}]
    hub.kubectl("patch", "federation", NAME, "-n", NAMESPACE, "--type=json", "-p", json.dumps(patch))
    plane.kill_and_restart(process)
    wait_for(f"the scale-up landed after {process} came back", lambda: _scaled(plane, near, replicas + 1),
             timeout=240, interval=5)  # fmt: skip
    wait_ready(plane, NAME, NAMESPACE)
    assert live_objects(plane, composite) == before, "an object was deleted or made again"
    now = generations_of(plane, [composite])[composite]
    moved = {k for k in generations[composite] if now.get(k) != generations[composite][k]}
    # The StatefulSet scaled, and the one Object that carries it; nothing else.
    assert {k for k in moved if not k.startswith("Object/")} == {f"StatefulSet/{near}"}, moved
    assert len(moved) == 2, moved
    assert set(now) == set(generations[composite]), "an object was added or lost"


def _scaled(plane: ControlPlane, workload: str, replicas: int) -> bool:
    live = plane.hub.get("statefulsets.apps", workload, NAMESPACE) or {}
    return (live.get("spec") or {}).get("replicas") == replicas and (live.get("status") or {}).get(
        "readyReplicas"
    ) == replicas
