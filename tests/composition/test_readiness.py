"""Readiness: the CEL queries on the Objects and the function's own rule agree,
with cel-go (as provider-kubernetes runs it) as the judge."""

from __future__ import annotations

import json
import subprocess

import pytest

from function.composition import readiness

STS = {"kind": "StatefulSet", "spec": {"replicas": 2}}
DS = {"kind": "DaemonSet", "spec": {}}
LB = {"kind": "Service", "spec": {"type": "LoadBalancer"}}
CLUSTER_IP = {"kind": "Service", "spec": {"type": "ClusterIP"}}
CERT = {"kind": "Certificate", "spec": {}}


def cert(*conditions):
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


def sts(generation=1, observed=1, replicas=2, **status):
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": observed, **status},
    }


def ds(generation=1, observed=1, **status):
    return {"metadata": {"generation": generation}, "spec": {}, "status": {"observedGeneration": observed, **status}}


# (desired manifest, live object, ready?)
CASES = [
    (STS, sts(readyReplicas=2, updatedReplicas=2), True, "every replica ready and updated"),
    (STS, sts(readyReplicas=1, updatedReplicas=2), False, "a replica not ready"),
    (STS, sts(readyReplicas=2, updatedReplicas=1), False, "a rolling update in progress"),
    (STS, sts(generation=2, observed=1, readyReplicas=2, updatedReplicas=2), False,
     "a new spec the controller has not seen yet"),
    (STS, sts(), False, "zero counters, which Kubernetes omits, read as zero"),
    (STS, {"metadata": {"generation": 1}, "spec": {"replicas": 2}}, False, "no status at all yet"),
    (STS, sts(replicas=0), True, "scaled to zero: nothing to wait for"),
    (DS, ds(desiredNumberScheduled=3, numberReady=3, updatedNumberScheduled=3), True,
     "a pod ready and updated on every node it should run on"),
    (DS, ds(desiredNumberScheduled=3, numberReady=2, updatedNumberScheduled=3), False, "a node's pod not ready"),
    (DS, ds(desiredNumberScheduled=3, numberReady=3, updatedNumberScheduled=1), False, "a rolling update in progress"),
    (DS, ds(desiredNumberScheduled=0, numberReady=0), True, "on no node: ready, and warned about elsewhere"),
    (DS, ds(generation=3, observed=2, desiredNumberScheduled=1, numberReady=1, updatedNumberScheduled=1), False,
     "a new spec the controller has not seen yet"),
    (LB, {"status": {"loadBalancer": {}}}, False, "a LoadBalancer with no address yet"),
    (LB, {"status": {"loadBalancer": {"ingress": []}}}, False, "an empty list of addresses is none"),
    (LB, {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}, True, "an address: clients can dial it"),
    (LB, {"spec": {"type": "LoadBalancer"}}, False, "no status at all yet"),
    # cert-manager's Certificate: issued or not, by its Ready condition, not by existing.
    (CERT, cert(("Ready", "True")), True, "issued"),
    (CERT, cert(("Issuing", "True"), ("Ready", "False")), False, "being issued: Ready is False"),
    (CERT, cert(("Issuing", "True")), False, "being issued, no Ready condition yet"),
    (CERT, {"status": {}}, False, "no conditions"),
    (CERT, {"spec": {}}, False, "no status: existing is not issued"),
]  # fmt: skip


def test_cel_and_python_agree(celcheck):
    checks = [{"query": readiness.policy(m)["celQuery"], "object": live} for m, live, _, _ in CASES]
    proc = subprocess.run([celcheck], input=json.dumps(checks), capture_output=True, text=True, check=True)
    results = json.loads(proc.stdout)
    for (manifest, live, expected, reason), result in zip(CASES, results, strict=True):
        assert result == {"result": expected}, (reason, manifest["kind"], live, result)
        assert readiness.observe(manifest, live).ready is expected, (reason, manifest["kind"], live)


@pytest.mark.parametrize(
    ("manifest", "expected", "reason"),
    [
        (STS, "DeriveFromCelQuery", "a StatefulSet is ready when its pods are: a CEL query on its status"),
        (DS, "DeriveFromCelQuery", "so is a DaemonSet"),
        (LB, "DeriveFromCelQuery", "a LoadBalancer Service once it has an address"),
        (CERT, "DeriveFromCelQuery", "a Certificate once cert-manager has issued it"),
        (CLUSTER_IP, "SuccessfulCreate", "a ClusterIP Service serves once created"),
        (
            {"kind": "Service", "spec": {"type": "NodePort"}},
            "SuccessfulCreate",
            "so does a NodePort Service: its port is there at once",
        ),
    ],
)
def test_policy_per_kind(manifest, expected, reason):
    assert readiness.policy(manifest)["policy"] == expected, reason


@pytest.mark.parametrize("kind", ["ServiceAccount", "Namespace"])
def test_plain_objects_are_ready_once_created(kind):
    assert readiness.policy({"kind": kind})["policy"] == "SuccessfulCreate"
    assert readiness.observe({"kind": kind}, {"metadata": {"name": "x"}}).ready
    assert not readiness.observe({"kind": kind}, None).ready


def test_cluster_ip_service_is_ready_once_created():
    assert readiness.observe(CLUSTER_IP, {"spec": {"type": "ClusterIP"}}).ready
    assert not readiness.observe(CLUSTER_IP, None).ready


@pytest.mark.parametrize(
    ("live", "reason"),
    [
        (
            {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "readyReplicas": "two"}},
            "a count that is a string",
        ),
        ({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "readyReplicas": -1}}, "a negative count"),
        ({"metadata": "garbage", "status": {}}, "metadata that is no object"),
        (
            {"metadata": {"generation": 1}, "spec": {"replicas": "x"}, "status": {"observedGeneration": 1}},
            "a desired count that is a string",
        ),
        ({"status": ["not", "an", "object"]}, "a status that is no object"),
    ],
)
def test_garbled_status_is_unknown_not_a_crash(live, reason):
    o = readiness.observe(STS, live)
    assert (o.ready, o.unknown) == (False, True), reason
    assert o.detail.startswith("status unknown"), reason


def test_a_certificate_not_issued_says_why_in_cert_managers_words():
    live = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "DoesNotExist",
                                       "message": "Issuer flower-ca not found"}]}}  # fmt: skip
    o = readiness.observe(CERT, live)
    assert (o.ready, o.detail) == (False, "not issued: DoesNotExist: Issuer flower-ca not found")
    assert readiness.observe(CERT, {"status": {}}).detail == "not issued yet"
    garbled = readiness.observe(CERT, {"status": {"conditions": "Ready"}})
    assert (garbled.ready, garbled.unknown) == (False, True)


def listing(**data):
    return {"kind": "ConfigMap", "metadata": {"name": "fed-keys-0123456789ab"}, **({"data": data} if data else {})}


# (keys expected, the live list, ready?): the list's count, as its gatherer writes it (gather_program.list_data).
LIST_CASES = [
    (3, listing(), False, "made by the function, not written by its gatherer yet"),
    (3, listing(keys="k a/Pod/p\n"), False, "written without a count: a gatherer of an older release"),
    (3, listing(keys="", count="0"), False, "written, no key yet"),
    (3, listing(keys="...", count="2"), False, "a key still missing"),
    (3, listing(keys="...", count="3"), True, "every key expected"),
    (3, listing(keys="...", count="4"), True, "more: a pod replaced, its old key not dropped yet"),
    (3, listing(keys="...", count="three"), False, "a count that is no number is not ready, not an error"),
    (3, listing(keys="...", count="-4"), False, "nor a negative one"),
    (3, listing(keys="...", count="99999999999999999999"), False, "nor one past an int's range"),
    (12, listing(keys="...", count="12"), True, "two digits compare as numbers, not as text"),
    (12, listing(keys="...", count="9"), False, "nine is fewer than twelve"),
]  # fmt: skip


def test_a_keys_list_is_ready_once_it_holds_a_key_for_each_supernode(celcheck):
    checks = [
        {"query": readiness.keys_list(n, settled=True)["celQuery"], "object": live} for n, live, _, _ in LIST_CASES
    ]
    proc = subprocess.run([celcheck], input=json.dumps(checks), capture_output=True, text=True, check=True)
    for (n, live, expected, reason), result in zip(LIST_CASES, json.loads(proc.stdout), strict=True):
        assert result == {"result": expected}, (reason, n, live, result)


def test_a_keys_list_is_not_ready_while_its_place_changes(celcheck):
    # Its pods start, roll or fail: each new one publishes a key, so the provider polls the list
    # every 30 s (not Ready), whatever it holds, until its place's workloads are ready.
    query = readiness.keys_list(3, settled=False)["celQuery"]
    lists = [listing(), listing(keys="...", count="3"), listing(keys="...", count="4")]
    checks = [{"query": query, "object": live} for live in lists]
    proc = subprocess.run([celcheck], input=json.dumps(checks), capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == [{"result": False}] * len(lists)
    assert "not all ready" in query, "the query says why, for whoever reads the Object"


def test_a_keys_list_expecting_no_key_is_ready_once_made():
    # A DaemonSet on no node: nothing to poll for; the list is looked at again once its
    # place changes, since the query then changes.
    assert readiness.keys_list(0, settled=True) == {"policy": "SuccessfulCreate"}
    assert readiness.keys_list(2, settled=True)["policy"] == "DeriveFromCelQuery"
