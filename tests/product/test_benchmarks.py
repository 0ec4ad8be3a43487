"""Every script under benchmarks/ runs end to end at its smoke size (--smoke) and prints its figures.

No figure is judged here: a benchmark that nothing runs rots (bench.py and
bench_clusters.py once crashed on a changed constructor for months). Each
script runs as `make bench`, `make fuzz` or a reader would run it: its own
process, this interpreter, from the repository's root.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from function.api import names
from function.builders import identity, published_keys
from support import benchmarks
from support.peers import ROOT

# A liveness bound: the smoke sizes take seconds of CPU, but the unit stage runs at the lowest
# weight beside both control planes, where fuzz.py's 6 s smoke has taken over 300 s.
TIMEOUT_SECONDS = 900


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    script: str
    args: tuple[str, ...]
    # Lines (regular expressions) the output must hold: its table and figures, not just a clean exit.
    printed: tuple[str, ...]
    # A Flower virtualenv's python for the read-back (the flwr_python fixture: skips locally, fails in CI).
    flwr: bool = False


CASES = [
    Case(
        "RunFunction in-process, cold and served over gRPC by `function serve` (the same spec, and a new one "
        "per call), at 1 and 256 pools "
        "(past the 128 cap, lifted in both processes); about 3 s",
        "bench.py",
        ("--smoke",),
        (
            r"^ +1 +in-process +[\d.]+ +[\d.]+ +[\d.]+ +\d+$",
            r"^ +256 +grpc +[\d.]+ +[\d.]+ +[\d.]+ +\d+$",
            r"^ +256 +grpc-new +[\d.]+ +[\d.]+ +[\d.]+ +\d+$",
            r"^peak RSS: .* \(the server\)$",
        ),
    ),
    Case(
        "a selector matching 100 ProviderConfigs: first call, steady state and one FederationCluster's call, "
        "in-process and served; about 2 s",
        "bench_clusters.py",
        ("--smoke",),
        (
            r"^ +100 +first +in-process ",
            r"^ +100 +steady +grpc +[\d.]+ +[\d.]+ +[\d.]+ +\d+ +\d+$",
            r"^ +100 +part +grpc +[\d.]+ +[\d.]+ +[\d.]+ +\d+ +\d+$",
        ),
    ),
    Case(
        "300 calls of the mix over one mTLS connection to `function serve --workers 1`, every answer checked "
        "(memory not judged at this size); about 2 s",
        "bench_load.py",
        ("--smoke",),
        (r"^calls 300, server errors 0, wrong answers 0, exit code on SIGTERM 0$", r"requests/s", r"^RSS growth "),
    ),
    Case(
        "the function against the typed and the near-floor Go peers (benchmarks/typedgo, built by "
        "`make unit-tools`): the same answer at 1 and 16 pools, then latency warm and cold at 1 pool, and "
        "throughput of the function at auto, 1 and 2 workers; about 15 s",
        "bench_vs_go.py",
        ("--smoke",),
        (
            r"^same desired resources, composite status and TTL from each peer at 1, 16 pools$",
            # p50, p95, p95/p50, CPU, the ratio to each peer's p50.
            r"^ +1 +warm +function --workers auto +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$",
            r"^ +1 +cold +typed Go +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +1\.00 +[\d.]+$",
            r"^ +1 +cold +near-floor Go +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +1\.00$",
            # requests/s, CPU, PSS, a worker's PSS (each of the 2 workers' own), the ratio to each peer's.
            r"^ +function --workers 2 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$",
            r"^ +typed Go +[\d.]+ +[\d.]+ +[\d.]+ +- +1\.00 +[\d.]+$",
            r"^ +near-floor Go +[\d.]+ +[\d.]+ +[\d.]+ +- +[\d.]+ +1\.00$",
            # Decoding, reading into dicts, checking, their sum and composing whole: CPU ms in the script.
            r"^ +1 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$",
        ),
    ),
    Case(
        "20 derandomized examples per invariant, then Flower's parser reads the --node-config texts back; about 6 s",
        "fuzz.py",
        ("--smoke",),
        (
            r"^valid: 20 examples, 0 failures",
            r"^invalid: 20 examples, 0 failures",
            r"^garbled: 20 examples, 0 failures",
            r"^flower-readback: \d+ texts, 0 failures",
        ),
        flwr=True,
    ),
    Case(
        "needs a real control plane (and root), so only set up: the ProviderConfigs over the spokes and the "
        "Federation, nothing started; about 1 s",
        "e2e_clusters.py",
        ("--smoke", "--dry-run"),
        (
            r"^kubernetes 1\.\d+: would apply 2 ProviderConfigs over 2 spoke clusters$",
            r"^and one Federation of 2 SuperNodes, node authentication and TLS on$",
        ),
    ),
    Case(
        "the floor needs a real control plane too, so only what it would apply: the 2 clusters' objects, "
        "rendered through the Federation's, a group's and each FederationCluster's call; about 2 s",
        "e2e_clusters.py",
        ("--smoke", "--spokes-alone", "--dry-run"),
        (
            (
                r"^spokes alone: would apply 28 objects \(ConfigMap, Deployment, NetworkPolicy, Role, RoleBinding, "
                r"Secret, ServiceAccount, StatefulSet, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding\) "
                r"to 2 spokes$"
            ),
        ),
    ),
    Case(
        "needs a real control plane (and root), so only set up: the control plane's settings and the "
        "Federations, nothing started; under 1 s",
        "e2e_load.py",
        ("--smoke", "--dry-run"),
        (r"^kubernetes 1\.\d+: would apply 2 Federations x 1 pools at once$",),
    ),
]


def test_every_benchmark_has_a_case():
    # At least one each: a script with two modes (e2e_clusters.py's floor) has a case for each.
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py") == sorted(
        {c.script for c in CASES}
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.script)
def test_benchmark_runs_at_its_smoke_size(case, request):
    args = list(case.args)
    if case.flwr:
        args += ["--flwr-python", request.getfixturevalue("flwr_python")]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / case.script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, output
    missing = [line for line in case.printed if not re.search(line, proc.stdout, re.MULTILINE)]
    assert missing == [], output


def _e2e_clusters():
    """benchmarks/e2e_clusters.py as a module: its parsers of Crossplane's metrics are pure functions."""
    return benchmarks.load("e2e_clusters")


def test_the_scale_benchmark_reads_each_kinds_circuit_breaker():
    federations = 'controller="composite/xfederations.flower.crossplane.io"'
    clusters = 'controller="composite/xfederationclusters.flower.crossplane.io"'
    served = "\n".join([
        "# HELP circuit_breaker_opens_total Number of times the XR circuit breaker transitioned from closed to open.",
        f"circuit_breaker_opens_total{{{federations}}} 28",
        f'circuit_breaker_events_total{{{federations},result="Allowed"}} 2878',
        f'circuit_breaker_events_total{{{federations},result="Dropped"}} 22890',
        f'circuit_breaker_events_total{{{federations},result="HalfOpenAllowed"}} 63',
        f'circuit_breaker_events_total{{{clusters},result="Allowed"}} 176',
    ])  # fmt: skip
    assert _e2e_clusters().circuits(served) == [
        "xfederations circuit opened 28 times; watch events allowed 2941, dropped 22890",
        "xfederationclustergroups circuit opened 0 times; watch events allowed 0, dropped 0",
        "xfederationclusters circuit opened 0 times; watch events allowed 176, dropped 0",
    ]


def test_the_scale_benchmark_counts_each_kinds_reconciles_in_its_idle_window():
    groups = 'controller="composite/xfederationclustergroups.flower.crossplane.io"'
    clusters = 'controller="composite/xfederationclusters.flower.crossplane.io"'

    def served(success: int, error: int) -> str:
        return "\n".join([
            f'controller_runtime_reconcile_total{{{groups},result="success"}} {success}',
            f'controller_runtime_reconcile_total{{{groups},result="error"}} {error}',
            f'controller_runtime_reconcile_total{{{clusters},result="requeue_after"}} 7',
            f"controller_runtime_reconcile_time_seconds_count{{{clusters}}} 99",
        ])  # fmt: skip

    module = _e2e_clusters()
    before, after = module.reconcile_counts(served(10, 1)), module.reconcile_counts(served(25, 3))
    assert before == {"xfederations": 0, "xfederationclustergroups": 11, "xfederationclusters": 7}
    assert module.idle(before, after, 60) == (
        "reconciles in 60 s after Ready, nothing changing: "
        "xfederations 0, xfederationclustergroups 17, xfederationclusters 0"
    )


def test_the_scale_benchmark_says_which_objects_were_written_in_its_idle_window():
    module = _e2e_clusters()
    before = {"a": ("Object of ConfigMap", "10"), "b": ("Object of Role", "11"), "c": ("xfederationclusters", "12")}
    after = {**before, "a": ("Object of ConfigMap", "20"), "c": ("xfederationclusters", "30"), "new": ("x", "1")}
    assert module.changed(before, after, 60) == (
        "changed in 60 s after Ready, nothing changing: Object of ConfigMap 1, xfederationclusters 1"
    ), "written ones by what they are; one made in the window is not a change"
    assert module.changed(before, before, 60).endswith(": none")


def test_the_scale_benchmarks_timeline_says_when_each_stage_happened_from_the_apply():
    module = _e2e_clusters()
    started = module.calendar.timegm((2026, 11, 29, 12, 0, 0, 0, 0, 0))
    assert module._offset("2026-11-29T12:01:40Z", started) == 100
    assert module._offset(None, started) is None
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "T"}]}}
    unready = {"status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "T"}]}}
    assert module._ready_since(ready) == "T"
    assert module._ready_since(unready) is None
    # Ten stamps and two that never happened: the quantiles are of those that did, the count of all.
    assert module._spread("pods Ready", [*range(100, 0, -10), None, None]) == (
        "  pods Ready: 10 of 12, after p10 20 s, p50 60 s, p90 100 s, last 100 s"
    )
    assert module._spread("pods Ready", [None]) == "  pods Ready: none of 1"


def test_the_scale_runs_publications_are_what_the_function_accepts_from_a_pod():
    module = _e2e_clusters()
    sts = names.pool(module.NAME, "site-scale-0007")
    claims = [
        {"metadata": {"name": f"{identity.IDENTITY_VOLUME}-{sts}-{i}", "namespace": module.NAMESPACE, "uid": f"u{i}"}}
        for i in range(2)
    ]
    stranger = {"metadata": {"name": "data-web-0", "namespace": module.NAMESPACE, "uid": "w"}}
    made = module.key_publications([*claims, stranger], {"u1"})
    assert [c["metadata"]["ownerReferences"][0]["uid"] for c in made] == ["u0"], "one per claim not yet published"
    place = published_keys.Place("scale-0007", module.NAMESPACE, ("site-scale-0007",))
    (key,) = published_keys.gathered(place, module.gathered_list(place, made))
    assert key.holder == f"scale-0007/{module.NAMESPACE}/PersistentVolumeClaim/{claims[0]['metadata']['name']}"
    assert len(key.line) > 250, "a real key's size"
    assert module.made_up_key("u0") == module.made_up_key("u0") != module.made_up_key("u1")


def test_the_scale_benchmarks_last_line_states_the_goals_figures():
    module = _e2e_clusters()
    served = "\n".join([
        'apiserver_request_total{code="201",component="apiserver",resource="objects",verb="POST"} 100',
        'apiserver_request_total{code="200",component="apiserver",resource="objects",verb="APPLY"} 250',
        'apiserver_request_total{code="200",resource="objects",subresource="status",verb="PUT"} 40',
        'apiserver_request_total{code="200",component="apiserver",resource="objects",verb="GET"} 9000',
        'apiserver_request_total{code="200",component="apiserver",resource="objects",verb="WATCH"} 7',
        'apiserver_request_duration_seconds_count{resource="objects",verb="PATCH"} 500',
    ])  # fmt: skip
    assert module.hub_writes(served) == 390, "POST, APPLY and PUT are writes; reads, watches and histograms are not"
    on = module.Scale(100, 1000, auth=True, ready_s=250.4, keys_registered_s=290.6, control_plane_cpu_s=449.5,
                      hub_writes=390 * 50, objects=100)  # fmt: skip
    assert on.line() == (
        "scale: clusters=100 supernodes=1000 auth=on ready_s=250 keys_registered_s=291 control_plane_cpu_s=450 "
        "hub_writes_per_object=195.0"
    )
    off = module.Scale(100, 1000, auth=False, ready_s=None, keys_registered_s=None, control_plane_cpu_s=300,
                       hub_writes=0, objects=0)  # fmt: skip
    assert off.line() == (
        "scale: clusters=100 supernodes=1000 auth=off ready_s=none control_plane_cpu_s=300 hub_writes_per_object=none"
    )


def test_the_scale_benchmark_reports_each_kinds_generations_composed_apart_from_observed():
    def obj(kind: str, generation: int, *, observed: bool = False) -> dict:
        spec = {"forProvider": {"manifest": {"kind": kind}}}
        if observed:
            spec["managementPolicies"] = ["Observe"]
        return {"metadata": {"generation": generation}, "spec": spec}

    found = [obj("StatefulSet", 1), obj("StatefulSet", 4), obj("StatefulSet", 2), obj("ConfigMap", 1, observed=True),
             obj("ConfigMap", 3)]  # fmt: skip
    assert _e2e_clusters().generations(found) == [
        "Objects of ConfigMap: 1, generation p50 3, most 3",
        "Objects of ConfigMap (observed): 1, generation p50 1, most 1",
        "Objects of StatefulSet: 3, generation p50 2, most 4",
    ]


def test_the_scale_benchmark_says_who_wrote_to_the_hub_and_each_objects_writes_from_the_audit_log():
    def event(agent: str, verb: str, resource: str, name: str, *, sub: str = "", stage: str = "ResponseComplete"):
        ref = {"resource": resource, "namespace": "fl", "name": name, **({"subresource": sub} if sub else {})}
        return json.dumps({"stage": stage, "verb": verb, "userAgent": f"{agent}/v1 (linux/amd64)", "objectRef": ref})

    log = [
        event("crossplane", "patch", "objects", "a"),
        event("crossplane", "patch", "objects", "b"),
        event("provider", "update", "objects", "a", sub="status"),
        event("provider", "update", "objects", "a", sub="status"),
        event("provider", "update", "objects", "a", sub="status", stage="ResponseStarted"),  # not answered yet
        event("crossplane", "patch", "xfederationclusters", "c"),
    ]

    def obj(name: str, kind: str) -> dict:
        return {"metadata": {"namespace": "fl", "name": name}, "spec": {"forProvider": {"manifest": {"kind": kind}}}}

    assert _e2e_clusters().audited_writes(log, [obj("a", "StatefulSet"), obj("b", "Role")]) == [
        (
            "hub writes by who (audit log): crossplane patch objects 2, provider update objects/status 2, "
            "crossplane patch xfederationclusters 1"
        ),
        (
            "an Object's writes (audit log), on average: 2.0: "
            "crossplane patch objects 1.0, provider update objects/status 1.0"
        ),
        "writes to Objects of Role: 1, p50 1, most 1",
        "writes to Objects of StatefulSet: 1, p50 3, most 3",
    ], "each write once, when answered; an Object's by who, and by the kind it carries"
