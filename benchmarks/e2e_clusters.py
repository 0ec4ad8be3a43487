"""Scale across clusters on the real control plane: one Federation, N clusters, node authentication and TLS.

Starts the e2e control plane (newest supported Kubernetes), makes N labelled
ProviderConfigs (names for the control plane's three spoke clusters, taken in
turn: KWOK runs the pods), applies one Federation whose selector pool matches
them with R SuperNodes each, TLS from cert-manager and node authentication on,
and prints:

- the time until every SuperNode is Ready (as the Federation's status counts
  them), or the Federation's Synced message when the function refuses it;
- the function's calls, from Crossplane's own metrics: how many, and their
  p50 and p99 as the histogram's bucket bounds;
- the size of the Federation's call and of its largest group's and FederationCluster's:
  each request as Crossplane would send it now (every composed resource as
  observed, requirements answered), run through the function in this process;
- the CPU seconds the control plane's processes took (API servers, etcd,
  Crossplane, provider-kubernetes, cert-manager, the function);
- once everything is Ready, each composite kind's reconciles and the hub's
  writes in the next minute, when nothing changes: what a settled federation
  costs the hub;
- with --keys, how many SuperNode keys reached the shards beside the SuperLink,
  and when all had. KWOK's pods run nothing, so the run publishes each
  SuperNode's key as its identity container would (a ConfigMap in its spoke,
  owned by its identity claim, labelled with its pool) as soon as the claim is
  there; the keys are made up, of a real key's size (the function checks their
  form, and no registrar runs here);
- a timeline: when each kind of object was created and became Ready (the
  composites, the Objects by the kind they carry, the spokes' StatefulSets and
  pods), from their own timestamps, so a slow stage shows.

--crossplane-arg and --provider-arg pass more flags to Crossplane and
provider-kubernetes (docs/operations.md, Large federations, says which a large
federation needs). --spokes-alone measures the floor instead: what the
FederationClusters would have applied, rendered in this process and applied
straight to the spokes, with the time until every pod is Ready and the spokes'
CPU; no run of the whole control plane can beat it on the same machine.
--audit has the hub's API server log its writes and prints who made them
and each Object's (by the kind it carries): where the writes per Object go.
The log costs the hub's API server CPU, so its run's CPU is not the goal's.

Needs `make e2e-tools package` (and root).

    .venv/bin/python benchmarks/e2e_clusters.py [--clusters 100] [--replicas 10]

--smoke --dry-run needs no control plane: it sets the run up and prints what
it would apply (2 clusters of 1 SuperNode), starting nothing.
"""

from __future__ import annotations

import argparse
import base64
import calendar
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from concurrent import futures
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e"), str(ROOT / "tests")]

from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402

from benchmarks.bench_clusters import part_request  # noqa: E402
from controlplane import (  # noqa: E402
    CA_ISSUER,
    CROSSPLANE_NS,
    GO_ENV,
    SITES,
    Cluster,
    ControlPlane,
    Tools,
    condition,
    running,
)
from function.api import names  # noqa: E402
from function.builders import identity, key_gatherer, published_keys  # noqa: E402
from function.programs import gather_program  # noqa: E402
from function.programs import key_publications as publications  # noqa: E402
from function.serving import fn, render, wire  # noqa: E402
from function.topology import clusters  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LABELS = {"flower.flwr.ai/federation": "scale"}
NAMESPACE = "default"
NAME = "scale"
SMOKE_CLUSTERS, SMOKE_REPLICAS = 2, 1
PARTS = "xfederationclusters.flower.crossplane.io,xfederationclustergroups.flower.crossplane.io"
# Crossplane's cache resync for the run: each resync composes every composite again (the e2e's is a
# minute). Its --poll-interval does not apply to composites (docs/operations.md, Large federations).
SYNC = "1h"
PROVIDER_POLL = "10m"  # provider-kubernetes' default
PROGRESS_EVERY = 60  # seconds between the lines that say how many SuperNodes are Ready so far
KEYS_EVERY = 20  # seconds between the looks for identity claims whose keys to publish (--keys)
KEYS_PER_APPLY = 500  # key ConfigMaps per kubectl call
IDLE_SECONDS = 60  # how long the run watches the composites once every SuperNode is Ready
FLOOR_BATCH = 200  # objects per `kubectl apply` in --spokes-alone
FLOOR_LOOK_EVERY = 20  # seconds between its counts of Ready pods
CLAIM_NAME = "crossplane.io/claim-name"  # the label Crossplane puts on a claim's composite
KINDS = ("xfederations", "xfederationclustergroups", "xfederationclusters")


def claim(count: int, replicas: int, *, auth: bool = True) -> dict[str, Any]:
    """The Federation: a selector pool over count clusters, R SuperNodes each, TLS and (auth) node authentication."""
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "version": "1.41.0",
            "mode": "StatefulSet",
            "isolationMode": "subprocess",
            "tls": {"certManager": {"issuerRef": {"name": CA_ISSUER, "kind": "ClusterIssuer"}}},
            "nodeAuthentication": {"enabled": auth},
            # Remote pools dial this; nothing waits for a load balancer's address.
            "superlink": {"externalAddress": "flower.example.org"},
            "supernodes": {
                "pools": [
                    {
                        "name": "site",
                        "replicas": replicas,
                        "clusterSelector": {"matchLabels": LABELS, "maxClusters": max(count, 1)},
                        "nodeConfig": {"site": "{cluster}", "partition-id": "{globalIndex}"},
                    }
                ]
            },
        },
    }


def provider_configs(count: int) -> list[dict[str, Any]]:
    """Count labelled ProviderConfigs, each a name for one of the spoke clusters, in turn."""
    return [
        {
            "apiVersion": clusters.CLUSTER_API,
            "kind": "ProviderConfig",
            "metadata": {"name": f"scale-{i:04d}", "labels": dict(LABELS)},
            "spec": {
                "credentials": {
                    "source": "Secret",
                    "secretRef": {
                        "namespace": CROSSPLANE_NS,
                        "name": f"{SITES[i % len(SITES)]}-kubeconfig",
                        "key": "kubeconfig",
                    },
                }
            },
        }
        for i in range(count)
    ]


# A P-384 public key in OpenSSH's form is 136 bytes (its type, curve and point); the made-up ones are that size.
KEY_BYTES = 136


def made_up_key(seed: str) -> str:
    """A key of a real one's form and size, the same for the same seed."""
    blob = b"".join(hashlib.sha512(f"{seed}/{i}".encode()).digest() for i in range(3))[:KEY_BYTES]
    return f"ecdsa-sha2-nistp384 {base64.b64encode(blob).decode()}"


def key_publications(claims: list[dict[str, Any]], published: set[str]) -> list[dict[str, Any]]:
    """The key ConfigMaps of identity claims not published yet, as each SuperNode's identity container makes it."""
    prefix = f"{identity.IDENTITY_VOLUME}-{names.pool(NAME, '')}"
    out = []
    for pvc in claims:
        meta = pvc["metadata"]
        if meta["uid"] in published or not meta["name"].startswith(prefix):
            continue
        pool = meta["name"].removeprefix(prefix).rsplit("-", 1)[0]
        owner = publications.Owner("PersistentVolumeClaim", meta["name"], meta["uid"])
        labels = identity.publication_labels(NAME, pool)
        out.append(publications.key_configmap(owner, meta["namespace"], labels, made_up_key(meta["uid"])))
    return out


def publish_keys(spokes: list[Cluster], published: set[str]) -> int:
    """Publish the keys of the spokes' identity claims not published yet; how many were."""
    made = 0
    for spoke in spokes:
        todo = key_publications(spoke.get("persistentvolumeclaims", namespace=NAMESPACE) or [], published)
        for start in range(0, len(todo), KEYS_PER_APPLY):
            spoke.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(todo[start : start + KEYS_PER_APPLY]),
                          check=False, timeout=300)  # fmt: skip
        published |= {c["metadata"]["ownerReferences"][0]["uid"] for c in todo}
        made += len(todo)
    return made


def gathered_list(place: published_keys.Place, publications_there: list[dict[str, Any]]) -> dict[str, Any]:
    """The list place's keys gatherer writes, having seen publications_there, with the gatherer's own code."""
    text = gather_program.listed(published_keys.expected(NAME, place), publications_there)
    return {"metadata": {"namespace": place.namespace}, "data": gather_program.list_data(text)}


def gather_keys(spokes: list[Cluster], written: dict[tuple[str, str], str]) -> int:
    """Write each keys gatherer's list in the spokes, as its pod would (KWOK runs no process); how many changed.

    Each gatherer's Deployment says which list it writes and which pools it lists (its arguments);
    the publications are those in the spoke, listed once per spoke. written: what was last written, by
    (spoke, list): an unchanged list is not written again, as the gatherer does not.
    """
    changed = 0
    selector = f"app.kubernetes.io/name={key_gatherer.NAME}"
    for spoke in spokes:
        gatherers = spoke.get("deployments", namespace=NAMESPACE, selector=selector) or []
        if not gatherers:
            continue
        there = spoke.get("configmaps", namespace=NAMESPACE, selector=f"{identity.KEY_LABEL}=true") or []
        for deployment in gatherers:
            args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            configmap = next(a.removeprefix("--configmap=") for a in args if a.startswith("--configmap="))
            pools = tuple(a.removeprefix("--pool=") for a in args if a.startswith("--pool="))
            text = gathered_list(published_keys.Place("", NAMESPACE, pools), there)["data"]
            key = (spoke.name, configmap)
            if written.get(key) == text[gather_program.GATHERED_FIELD]:
                continue
            done = spoke.kubectl("patch", "configmap", configmap, "-n", NAMESPACE, "--type=merge",
                                 "-p", json.dumps({"data": text}), check=False)  # fmt: skip
            if "patched" in done:
                written[key] = text[gather_program.GATHERED_FIELD]
                changed += 1
    return changed


def listed_keys(hub: Cluster) -> int:
    """The keys listed beside the SuperLink: in its own list and the groups' shards."""
    prefix = published_keys.authorized_keys_name(NAME)
    return sum(
        (c.get("data") or {}).get(published_keys.AUTHORIZED_KEYS, "").count("\n")
        for c in hub.get("configmaps", namespace=NAMESPACE) or []
        if c["metadata"]["name"].startswith(prefix)
    )


def per_spoke(count: int, replicas: int) -> int:
    """The SuperNodes the most loaded spoke runs: the clusters take the spokes in turn."""
    return -(-count // len(SITES)) * replicas


def live_call(composite: dict[str, Any], composed: list[dict[str, Any]], required: list[dict[str, Any]]) -> str:
    """One composite's function call as Crossplane makes it now, from the live objects, as a line to print.

    The composite as observed, each resource it composed itself (by owner: every
    resource of the tree carries the root's composite label) as observed, and
    what it requires answered from required.
    """
    uid = composite["metadata"]["uid"]
    observed = [o for o in composed if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]
    req, rsp = render.satisfied(composite, observed, required)
    fatal = "; ".join(r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL)
    return (
        f"request {req.ByteSize() / 2**10:.0f} KiB, response {rsp.ByteSize() / 2**10:.0f} KiB, "
        f"{len(rsp.desired.resources)} resources{f' (fatal: {fatal})' if fatal else ''}"
    )


def call_sizes(plane: ControlPlane) -> list[str]:
    """The Federation's call and its largest group's and FederationCluster's, each as a line to print."""
    hub = plane.hub
    composed = hub.get(f"{PARTS},objects.kubernetes.crossplane.io")  # listed once: thousands of Objects
    required = [*hub.get("providerconfigs.kubernetes.crossplane.io"), *hub.get("secrets", namespace=NAMESPACE)]
    parts = [o for o in composed if o["kind"] == "XFederationCluster"]
    groups = [o for o in composed if o["kind"] == "XFederationClusterGroup"]
    calls = [
        # The run's own: on the e2e's control plane (the benchmark's CI run) other tests' are there too.
        ("the Federation's call", hub.get("xfederations.flower.crossplane.io", selector=f"{CLAIM_NAME}={NAME}")[0]),
        ("its largest group's", max(groups, key=lambda p: len(json.dumps(p)), default=None)),
        ("its largest FederationCluster's", max(parts, key=lambda p: len(json.dumps(p)), default=None)),
    ]
    return [f"{what}: {live_call(c, composed, required)}" for what, c in calls if c is not None]


def _offset(stamp: str | None, started: float) -> float | None:
    """Seconds from the run's apply to an API timestamp (whole seconds, UTC), or None when there is none."""
    if not stamp:
        return None
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - started


def _ready_since(obj: dict[str, Any]) -> str | None:
    """When an object's Ready condition last became True (None when it is not True)."""
    ready = condition(obj, "Ready")
    return ready.get("lastTransitionTime") if ready.get("status") == "True" else None


def _created(objs: list[dict[str, Any]], started: float) -> list[float | None]:
    """Seconds from the run's apply to each object's creation."""
    return [_offset(o["metadata"]["creationTimestamp"], started) for o in objs]


def _spread(what: str, offsets: list[float | None]) -> str:
    """A line: how many of what happened, and after how long from the apply at p10, p50, p90 and the last."""
    seen = sorted(o for o in offsets if o is not None)
    if not seen:
        return f"  {what}: none of {len(offsets)}"

    def at(q: float) -> float:
        return seen[min(len(seen) - 1, int(q * len(seen)))]

    return (
        f"  {what}: {len(seen)} of {len(offsets)}, after p10 {at(0.1):.0f} s, p50 {at(0.5):.0f} s, "
        f"p90 {at(0.9):.0f} s, last {seen[-1]:.0f} s"
    )


def timeline(plane: ControlPlane, started: float) -> list[str]:
    """Where the time went, stage by stage: when each kind of object was created, and when it became Ready.

    From the objects' own timestamps (the API server's clock is this machine's):
    the composites, the Objects by the kind they carry, the spokes' StatefulSets
    and pods. A stage that ends long after the one before it is where to look.
    """
    hub = plane.hub
    lines = ["timeline, seconds from the Federation's apply:"]
    for kind in PARTS.split(","):
        parts = hub.get(kind)
        lines.append(_spread(f"{kind.split('.')[0]} created", _created(parts, started)))
        lines.append(_spread(f"{kind.split('.')[0]} Ready", [_offset(_ready_since(p), started) for p in parts]))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in hub.get("objects.kubernetes.crossplane.io"):
        kind = obj["spec"]["forProvider"]["manifest"].get("kind", "?")
        owners = {o.get("kind") for o in obj["metadata"].get("ownerReferences") or []}
        if "ObservedObjectCollection" in owners:
            kind += " (a published key)"
        elif obj["spec"].get("managementPolicies") == ["Observe"]:
            kind += " (observed)"
        by_kind.setdefault(kind, []).append(obj)
    for kind, objs in sorted(by_kind.items()):
        lines.append(_spread(f"Objects of {kind} created", _created(objs, started)))
        lines.append(_spread(f"Objects of {kind} Ready", [_offset(_ready_since(o), started) for o in objs]))
    sets, pods = [], []
    for site in SITES:
        spoke = plane.sites[site]
        sets += spoke.get("statefulsets", namespace=NAMESPACE)
        pods += spoke.get("pods", namespace=NAMESPACE)
    lines.append(_spread("spokes' StatefulSets created", _created(sets, started)))
    lines.append(_spread("spokes' pods created", _created(pods, started)))
    lines.append(_spread("spokes' pods Ready", [_offset(_ready_since(p), started) for p in pods]))
    return lines


def cpu_seconds(pid: int) -> float:
    """CPU time a process and its waited-for children have used, user and system."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / CLOCK_TICKS  # utime, stime, cutime, cstime


def plane_processes(workdir: pathlib.Path) -> list[int]:
    """The control plane's processes, by pid.

    Every one whose command line names its folder (the clusters, which kwokctl
    leaves running on their own), and every descendant of this one (Crossplane,
    the provider, the function).
    """
    out, parents = set(), {}
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
                parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if str(workdir).encode() in cmdline:
                out.add(int(proc.name))
    mine = {os.getpid()}
    while grown := {pid for pid, parent in parents.items() if parent in mine} - mine:
        mine |= grown
    return sorted(out | mine - {os.getpid()})


def process_role(pid: int) -> str:
    """What a control plane process is, for the CPU breakdown: its program, and for a cluster's, hub or spokes."""
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    program = pathlib.Path(argv[0].decode()).name
    cluster = re.search(rb"/clusters/([^/]+)/", b" ".join(argv))
    if cluster is None:
        return program
    return f"{program} ({'hub' if cluster.group(1).endswith(b'-hub') else 'spokes'})"


def cpu_by_role(used: dict[int, float]) -> list[str]:
    """CPU seconds per kind of process, the busiest first."""
    roles: dict[str, float] = {}
    for pid, seconds in used.items():
        role = process_role(pid)
        roles[role] = roles.get(role, 0.0) + seconds
    return [f"  {role}: {seconds:.0f} s" for role, seconds in sorted(roles.items(), key=lambda r: -r[1])]


def harness_cpu() -> float:
    """This process's CPU seconds so far: it binds the spokes' claims (ClaimBinder), work the spokes stand in for."""
    times = os.times()
    return times.user + times.system


def claims_bound(plane: ControlPlane, harness_before: float) -> list[str]:
    """What the spokes' claim binders did, and what that cost this process."""
    bound = sum(b.bound for b in plane.binders)
    lines = [f"  claims bound by the harness: {bound}, its CPU {harness_cpu() - harness_before:.0f} s"]
    lines += [f"  a claim binder failed: {failure}" for b in plane.binders for failure in b.failures[:3]]
    return lines


def metrics(port: int) -> str:
    """Crossplane's metrics, as it serves them (slowly on a busy machine: at 1,000 clusters, over 10 s)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as rsp:
        return str(rsp.read().decode())


def histogram(text: str, name: str, label: str) -> tuple[int, float | None, float | None]:
    """A histogram's count over the series whose labels hold label, and the bucket bounds of its p50 and p99."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        match = re.match(rf"^{name}_bucket{{(.*)}} (\S+)$", line)
        if match and label in match.group(1):
            bound = re.search(r'le="([^"]+)"', match.group(1))
            if bound:
                le = float(bound.group(1))
                buckets[le] = buckets.get(le, 0) + float(match.group(2))
    total = int(buckets.get(float("inf"), 0))

    def quantile(q: float) -> float | None:
        return next((le for le, n in sorted(buckets.items()) if total and n >= q * total), None)

    return total, quantile(0.5), quantile(0.99)


def function_calls(text: str) -> tuple[int, float | None, float | None]:
    """The function's calls, and the bucket bounds holding their p50 and p99."""
    return histogram(text, "function_run_function_seconds", 'function_name="function-flower"')


def reconciles(text: str) -> list[str]:
    """Each composite kind's reconciles: how many, how many failed, and their p50 and p99, as lines to print.

    A composite's reconcile reads and applies every resource it composes, one after another, within
    Crossplane's timeout: what limits how many one composite can compose.
    """
    out = []
    for kind in KINDS:
        count, p50, p99 = histogram(text, "controller_runtime_reconcile_time_seconds", _controller(kind))
        errors = _reconciles_total(text, kind, 'result="error"')
        out.append(f"{kind} reconciles {count} ({errors} failed), p50 <= {p50} s, p99 <= {p99} s")
    return out


def _controller(kind: str) -> str:
    """The metrics label of a composite kind's controller."""
    return f'controller="composite/{kind}.flower.crossplane.io"'


def _reconciles_total(text: str, kind: str, also: str = "") -> int:
    """A kind's controller_runtime_reconcile_total, summed over its results (or those whose line has also)."""
    label = _controller(kind)
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("controller_runtime_reconcile_total{") and label in line and also in line
        )
    )


def reconcile_counts(text: str) -> dict[str, int]:
    """Each composite kind's reconciles so far, from Crossplane's controller_runtime_reconcile_total."""
    return {kind: _reconciles_total(text, kind) for kind in KINDS}


def idle(before: dict[str, int], after: dict[str, int], seconds: float) -> str:
    """The reconciles of each kind while nothing changed, as a line to print.

    Once every SuperNode is Ready nothing a composite composes changes, so a composite reconciled
    again is Crossplane working for nothing: its TTL, or a status it writes that wakes itself.
    """
    counts = ", ".join(f"{kind} {after[kind] - before[kind]}" for kind in KINDS)
    return f"reconciles in {seconds:.0f} s after Ready, nothing changing: {counts}"


def versions(hub: Cluster) -> dict[str, tuple[str, str]]:
    """The hub's Objects and composites by uid: what each is (an Object by the kind it carries), its resourceVersion."""
    out = {}
    for obj in hub.get("objects.kubernetes.crossplane.io"):
        carried = obj["spec"]["forProvider"]["manifest"].get("kind", "?")
        out[obj["metadata"]["uid"]] = (f"Object of {carried}", obj["metadata"]["resourceVersion"])
    for kind in PARTS.split(","):
        for part in hub.get(kind):
            out[part["metadata"]["uid"]] = (kind.split(".")[0], part["metadata"]["resourceVersion"])
    return out


def changed(before: dict[str, tuple[str, str]], after: dict[str, tuple[str, str]], seconds: float) -> str:
    """Which of them were written while nothing changed, by what they are, as a line to print.

    A write that changes an object wakes whoever watches it: its composite, by realtime composition.
    """
    counts: dict[str, int] = {}
    for uid, (what, version) in after.items():
        if uid in before and before[uid][1] != version:
            counts[what] = counts.get(what, 0) + 1
    said = ", ".join(f"{what} {n}" for what, n in sorted(counts.items())) or "none"
    return f"changed in {seconds:.0f} s after Ready, nothing changing: {said}"


def circuits(text: str) -> list[str]:
    """Each composite kind's circuit breaker, as lines to print: opens, watch events allowed and dropped.

    From Crossplane's circuit_breaker_* counters. A composite whose circuit is open is reconciled on
    its resources' changes once every 30 s only.
    """
    out = []
    for kind in KINDS:
        label = _controller(kind)
        counts = {"opens": 0.0, "Allowed": 0.0, "Dropped": 0.0, "HalfOpenAllowed": 0.0}
        for line in text.splitlines():
            if label not in line:
                continue
            if line.startswith("circuit_breaker_opens_total{"):
                counts["opens"] += float(line.rsplit(" ", 1)[1])
            result = re.search(r'result="([^"]*)"', line) if line.startswith("circuit_breaker_events_total{") else None
            if result and result.group(1) in counts:
                counts[result.group(1)] += float(line.rsplit(" ", 1)[1])
        allowed = counts["Allowed"] + counts["HalfOpenAllowed"]
        out.append(
            f"{kind} circuit opened {counts['opens']:.0f} times; watch events allowed {allowed:.0f}, "
            f"dropped {counts['Dropped']:.0f}"
        )
    return out


def api_requests(text: str, top: int = 6) -> list[str]:
    """The hub API server's busiest request kinds (verb and resource): how many, and their p50 and p99.

    From its own histogram (apiserver_request_duration_seconds: from the request's arrival to its
    answer, a priority level's queue included), read from /metrics at the end of the run.
    """
    kinds: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_request_duration_seconds_count{"):
            verb = re.search(r'verb="([^"]*)"', line)
            resource = re.search(r'resource="([^"]*)"', line)
            if verb and resource:
                key = (verb.group(1), resource.group(1))
                kinds[key] = kinds.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    out = []
    for (verb, resource), _ in sorted(kinds.items(), key=lambda kv: -kv[1])[:top]:
        label = f'verb="{verb}"'
        count, p50, p99 = histogram(
            "\n".join(line for line in text.splitlines() if f'resource="{resource}"' in line),
            "apiserver_request_duration_seconds",
            label,
        )
        out.append(f"hub API {verb} {resource}: {count}, p50 <= {p50} s, p99 <= {p99} s")
    return out


def _carried(obj: dict[str, Any]) -> str:
    """The kind an Object carries, `(observed)` after it when it only observes it."""
    spec = obj.get("spec") or {}
    kind = ((spec.get("forProvider") or {}).get("manifest") or {}).get("kind", "?")
    return f"{kind} (observed)" if spec.get("managementPolicies") == ["Observe"] else kind


def generations(objects: list[dict[str, Any]]) -> list[str]:
    """How often each kind of Object's spec changed: its metadata.generation, p50 and most, by what it carries.

    Crossplane applies every composed Object again on each reconcile of its composite; an apply that
    changes nothing leaves the generation at 1. A kind whose generation grows is one whose desired
    manifest moved during the run: each move is a write to the hub, a write to its spoke and a status
    write back, and wakes the composite again.
    """
    by_kind: dict[str, list[int]] = {}
    for obj in objects:
        by_kind.setdefault(_carried(obj), []).append(int(obj["metadata"].get("generation", 0)))
    out = []
    for kind, found in sorted(by_kind.items()):
        found.sort()
        out.append(f"Objects of {kind}: {len(found)}, generation p50 {found[len(found) // 2]}, most {found[-1]}")
    return out


# The API server's verbs that write (a status subresource's writes among them).
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION")


def hub_writes(text: str) -> int:
    """Every write the API server has answered since it started, from its apiserver_request_total."""
    total = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            verb = re.search(r'verb="([^"]*)"', line)
            if verb and verb.group(1) in WRITE_VERBS:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _writer(event: dict[str, Any]) -> str:
    """Who made an audited write, and what it was: its program (user agent's name), verb and resource."""
    agent = str(event.get("userAgent") or "?").split("/", 1)[0]
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return f"{agent} {event.get('verb', '?')} {resource}"


def audited_writes(lines: Iterable[str], objects: list[dict[str, Any]], top: int = 8) -> list[str]:
    """Who wrote to the hub, and what each Object's writes were, from the hub's audit log (--audit).

    lines: the log's events, one JSON object a line (HUB_AUDIT_POLICY logs writes alone); objects: the
    hub's Objects at the end, to say which kind each carried. A write counts once, when answered.
    """
    by_writer: dict[str, int] = {}
    per_object: dict[tuple[str, str], dict[str, int]] = {}
    for line in lines:
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        writer = _writer(event)
        by_writer[writer] = by_writer.get(writer, 0) + 1
        ref = event.get("objectRef") or {}
        if ref.get("resource") == "objects" and ref.get("name"):
            counts = per_object.setdefault((ref.get("namespace", ""), ref["name"]), {})
            counts[writer] = counts.get(writer, 0) + 1
    ranked = sorted(by_writer.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [f"hub writes by who (audit log): {', '.join(f'{w} {n}' for w, n in ranked[:top])}"]
    if per_object:
        mean: dict[str, float] = {}
        for counts in per_object.values():
            for writer, n in counts.items():
                mean[writer] = mean.get(writer, 0) + n / len(per_object)
        shares = ", ".join(f"{w} {n:.1f}" for w, n in sorted(mean.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(f"an Object's writes (audit log), on average: {sum(mean.values()):.1f}: {shares}")
        out += _writes_by_kind(per_object, objects)
    return out


def _writes_by_kind(per_object: dict[tuple[str, str], dict[str, int]], objects: list[dict[str, Any]]) -> list[str]:
    """Each kind of Object's writes: p50 and most, by what it carries."""
    carried = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        carried[(meta.get("namespace", ""), meta.get("name", ""))] = _carried(obj)
    by_kind: dict[str, list[int]] = {}
    for key, counts in per_object.items():
        by_kind.setdefault(carried.get(key, "? (deleted)"), []).append(sum(counts.values()))
    out = []
    for kind, found in sorted(by_kind.items()):
        found.sort()
        out.append(f"writes to Objects of {kind}: {len(found)}, p50 {found[len(found) // 2]}, most {found[-1]}")
    return out


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.0f}"


@dataclasses.dataclass(frozen=True)
class Scale:
    """A run's figures, as the goal states them (docs/operations.md, Large federations)."""

    clusters: int
    supernodes: int
    auth: bool
    ready_s: float | None  # None: not every SuperNode Ready in the run's time
    keys_registered_s: float | None  # None: not every key listed (or none published: no --keys)
    control_plane_cpu_s: float
    hub_writes: int  # every write to the hub's API server over the run
    objects: int  # the composed Objects on the hub at the end

    def line(self) -> str:
        """One line a reader can compare across releases: `scale: clusters=N ... hub_writes_per_object=N`."""
        auth = f"auth={'on' if self.auth else 'off'} ready_s={_seconds(self.ready_s)}"
        keys = f" keys_registered_s={_seconds(self.keys_registered_s)}" if self.auth else ""
        per_object = f"{self.hub_writes / self.objects:.1f}" if self.objects else "none"
        return (f"scale: clusters={self.clusters} supernodes={self.supernodes} {auth}{keys} "
                f"control_plane_cpu_s={self.control_plane_cpu_s:.0f} hub_writes_per_object={per_object}")  # fmt: skip


def metrics_port(plane: ControlPlane) -> int:
    """The port Crossplane serves its metrics on, from its command line."""
    args = [str(a) for a in plane.processes["crossplane"].popen.args]  # type: ignore[union-attr]
    return int(args[args.index("--metrics-port") + 1])


@dataclasses.dataclass
class Progress:
    """How far a run got: when every SuperNode was Ready and every key listed, and what it saw last."""

    want: int
    keys: bool
    start: float = dataclasses.field(default_factory=time.monotonic)
    ready_after: float | None = None
    keys_after: float | None = None
    message: str = ""
    status: dict[str, Any] = dataclasses.field(default_factory=dict)
    published: set[str] = dataclasses.field(default_factory=set)
    # What each keys gatherer's list last said, by (spoke, list): the benchmark writes them, as their pods would.
    gathered: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    listed: int = 0

    @property
    def done(self) -> bool:
        """Every SuperNode Ready, and with keys every key listed."""
        return self.ready_after is not None and (self.keys_after is not None or not self.keys)


def wait(plane: ControlPlane, progress: Progress, timeout: float) -> None:
    """Watch the Federation (and publish keys, with keys) until done, refused or out of time."""
    spokes = [plane.sites[site] for site in SITES]
    shown = looked = 0.0
    while time.monotonic() - progress.start < timeout and not progress.done:
        got = plane.hub.get("federations.flower.crossplane.io", NAME, namespace=NAMESPACE) or {}
        progress.status = got.get("status") or {}
        now = time.monotonic()
        if progress.keys and now - looked >= KEYS_EVERY:
            looked = now
            publish_keys(spokes, progress.published)
            gather_keys(spokes, progress.gathered)
            progress.listed = listed_keys(plane.hub)
            if progress.keys_after is None and progress.listed >= progress.want:
                progress.keys_after = time.monotonic() - progress.start
        if now - shown >= PROGRESS_EVERY:
            # As it goes: a run stopped early, or one that never finishes, still says how far it got.
            shown = now
            said = f", {len(progress.published)} keys published, {progress.listed} listed" if progress.keys else ""
            supernodes = progress.status.get("supernodes", "-")
            print(f"after {now - progress.start:.0f} s: {supernodes} SuperNodes ready{said}", flush=True)
        synced = condition(got, "Synced")
        if synced.get("status") == "False":
            progress.message = synced.get("message", "")
            return
        status = progress.status
        if (
            progress.ready_after is None
            and status.get("readySupernodes") == status.get("desiredSupernodes") == progress.want
        ):
            progress.ready_after = time.monotonic() - progress.start
        time.sleep(5)


def spoke_manifests(count: int, replicas: int) -> dict[str, list[dict[str, Any]]]:
    """What the run's FederationClusters would have provider-kubernetes apply, by spoke: rendered in this process.

    The Federation's call (its CA answered with a made-up one: KWOK's pods read
    nothing), each group's, each FederationCluster's; every Object's manifest
    that is applied (not only observed), once per name, in the spoke its
    ProviderConfig names.
    """
    xr = render.composite(claim(count, replicas))
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfloor\n-----END CERTIFICATE-----\n").decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{names.superlink(NAME)}-tls", "namespace": NAMESPACE},
        "data": {"ca.crt": ca},
    }
    _, federation = render.satisfied(xr, [], [*provider_configs(count), secret])
    spoke_of = {c["metadata"]["name"]: c["spec"]["credentials"]["secretRef"]["name"] for c in provider_configs(count)}
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for name in [n for n in federation.desired.resources if n.startswith("cluster-group-")]:
        group = fn.run(part_request(federation, name, policy=None))
        for part in [n for n in group.desired.resources if n.startswith("cluster-config-")]:
            answer = fn.run(part_request(group, part, policy=None))
            for composed in answer.desired.resources.values():
                obj = wire.to_dict(composed.resource)
                if obj.get("kind") != "Object" or obj["spec"].get("managementPolicies") == ["Observe"]:
                    continue
                manifest = obj["spec"]["forProvider"]["manifest"]
                site = spoke_of[obj["spec"]["providerConfigRef"]["name"]].removesuffix("-kubeconfig")
                out.setdefault(site, {})[(manifest["kind"], manifest["metadata"]["name"])] = manifest
    return {site: list(by_name.values()) for site, by_name in out.items()}


def spokes_alone(plane: ControlPlane, count: int, replicas: int, timeout: float) -> int:
    """The floor: the spokes' share of the run, with no hub in the way; the exit status.

    Applies what the FederationClusters would (spoke_manifests) straight to the
    spokes, as fast as the API servers take it, and prints when every pod was
    Ready and the CPU the spokes' processes took. A run of the whole control
    plane cannot be faster than this on the same machine: it is the work 1,000
    real clusters would share, done here by three.
    """
    manifests = spoke_manifests(count, replicas)
    spokes = {site: plane.sites[site] for site in manifests}
    pids = [pid for pid in plane_processes(plane.workdir) if process_role(pid).endswith("(spokes)")]
    before = {pid: cpu_seconds(pid) for pid in pids}
    harness_before = harness_cpu()
    start = time.monotonic()

    def apply(site: str) -> None:
        # The shared objects first (a StatefulSet's pods need its ServiceAccount), then the workloads.
        docs = sorted(manifests[site], key=lambda d: d["kind"] == "StatefulSet")
        for at in range(0, len(docs), FLOOR_BATCH):
            batch = yaml.safe_dump_all(docs[at : at + FLOOR_BATCH])
            spokes[site].kubectl("apply", "--server-side", "-f", "-", stdin=batch, timeout=600)

    # Every spoke at once, as provider-kubernetes applies to each cluster: one after another, the last
    # spoke's applies began minutes after the first's.
    with futures.ThreadPoolExecutor(len(spokes)) as pool:
        list(pool.map(apply, spokes))
    applied = time.monotonic() - start
    want, ready, shown = count * replicas, 0, 0.0
    while time.monotonic() - start < timeout:
        # The StatefulSets' counts, not the pods: listing 10,000 pods every few seconds took a
        # quarter of a core here and more of the spokes' API servers, the very thing measured.
        ready = sum(
            (s.get("status") or {}).get("readyReplicas", 0)
            for spoke in spokes.values()
            for s in spoke.get("statefulsets", namespace=NAMESPACE)
        )
        if ready >= want:
            break
        if time.monotonic() - shown >= PROGRESS_EVERY:
            shown = time.monotonic()
            print(f"after {shown - start:.0f} s: {ready}/{want} pods Ready", flush=True)
        time.sleep(FLOOR_LOOK_EVERY)
    took = time.monotonic() - start
    used = {pid: max(0.0, cpu_seconds(pid) - b) for pid, b in before.items()}
    docs = sum(len(d) for d in manifests.values())
    print(f"spokes alone: {count} clusters' objects ({docs} after repeats) on {len(spokes)} spokes, "
          f"{want} SuperNodes ({replicas} each); applied in {applied:.0f} s")  # fmt: skip
    verdict = (
        f"every pod Ready after {took:.0f} s" if ready >= want else f"{ready}/{want} pods Ready after {took:.0f} s"
    )
    print(f"{verdict}; the spokes' CPU {sum(used.values()):.0f} s", flush=True)
    for line in [*cpu_by_role(used), *claims_bound(plane, harness_before)]:
        print(line, flush=True)
    return 0 if ready >= want else 1


def outcome(progress: Progress, served: str, port: int, idle_seconds: float, hub: Cluster) -> None:
    """Print when every SuperNode was Ready (with the reconciles and hub writes in the idle time after), or not.

    The idle time's writes are what the federation costs the hub while nothing changes.
    """
    if progress.ready_after is None:
        seen = progress.message or json.dumps(progress.status)[:300]
        print(f"not Ready after {time.monotonic() - progress.start:.0f} s: {seen}")
        return
    print(f"every SuperNode Ready after {progress.ready_after:.0f} s")
    if idle_seconds:
        writes = hub_writes(hub.kubectl("get", "--raw", "/metrics", timeout=120))
        versions_before = versions(hub)
        time.sleep(idle_seconds)
        print(idle(reconcile_counts(served), reconcile_counts(metrics(port)), idle_seconds), flush=True)
        writes = hub_writes(hub.kubectl("get", "--raw", "/metrics", timeout=120)) - writes
        print(f"hub writes in {idle_seconds:.0f} s after Ready, nothing changing: {writes}", flush=True)
        print(changed(versions_before, versions(hub), idle_seconds), flush=True)


def hub_audit(plane: ControlPlane, objects: list[dict[str, Any]]) -> list[str]:
    """Who wrote what to the hub, from its audit log; nothing when it kept none (no --audit)."""
    if not plane.hub_audit:
        return []
    with plane.hub_audit_log.open() as log:
        return audited_writes(log, objects)


def run(plane: ControlPlane, count: int, replicas: int, timeout: float, *, keys: bool = False,
        auth: bool = True, idle_seconds: float = IDLE_SECONDS) -> int:  # fmt: skip
    """Apply the Federation at once and report, the goal's figures last (Scale.line); the exit status.

    keys: publish each SuperNode's key as its pod would, and wait for every key to be listed too.
    auth: node authentication on (keys needs it).
    idle_seconds: how long to count reconciles once every SuperNode is Ready (0: not at all).
    """
    plane.hub.apply(*provider_configs(count))
    writes_before = hub_writes(plane.hub.kubectl("get", "--raw", "/metrics", timeout=120))
    pids = plane_processes(plane.workdir)
    cpu_before = {pid: cpu_seconds(pid) for pid in pids}
    harness_before = harness_cpu()
    port = metrics_port(plane)
    calls_before, _, _ = function_calls(metrics(port))
    progress = Progress(count * replicas, keys)
    started = time.time()
    plane.hub.apply(claim(count, replicas, auth=auth))
    wait(plane, progress, timeout)
    served = metrics(port)
    calls, p50, p99 = function_calls(served)
    used = {pid: max(0.0, cpu_seconds(pid) - before) for pid, before in cpu_before.items()}
    flags = " ".join([f"--sync-interval={plane.crossplane_intervals[1]}", *plane.crossplane_args])
    provider = " ".join([f"--poll={plane.provider_poll}", *plane.provider_args])
    print(f"clusters {count}, SuperNodes {progress.want} ({replicas} each), TLS on, node authentication {auth}, "
          f"Crossplane {flags}, provider-kubernetes {provider}")  # fmt: skip
    if keys:
        after = f", all listed after {progress.keys_after:.0f} s" if progress.keys_after is not None else ""
        print(f"keys: {len(progress.published)} published, {listed_keys(plane.hub)} listed beside the SuperLink{after}")
    outcome(progress, served, port, idle_seconds, plane.hub)
    print(f"function calls {calls - calls_before}, p50 <= {p50} s, p99 <= {p99} s (Crossplane's histogram)")
    hub = plane.hub.kubectl("get", "--raw", "/metrics", timeout=120)
    for line in [*reconciles(served), *circuits(served), *api_requests(hub)]:
        print(line)
    print(f"control plane CPU {sum(used.values()):.0f} s over {len(pids)} processes", flush=True)
    for line in [*cpu_by_role(used), *claims_bound(plane, harness_before)]:
        print(line, flush=True)
    try:
        for line in timeline(plane, started):
            print(line, flush=True)
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as err:
        print(f"timeline not measured: {err}: {getattr(err, 'stderr', '') or ''}"[:1000])
    try:
        for line in call_sizes(plane):
            print(line)
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as err:
        # At 1,000 clusters a busy hub may take longer than the harness waits to list 9,000 Objects,
        # or answer the list itself with a timeout (the API server's, an error status).
        print(f"call sizes not measured: {err}: {getattr(err, 'stderr', '') or ''}"[:1000])
    objects = plane.hub.get("objects.kubernetes.crossplane.io")
    for line in [*generations(objects), *hub_audit(plane, objects)]:
        print(line, flush=True)
    scale = Scale(count, progress.want, auth, progress.ready_after, progress.keys_after, sum(used.values()),
                  hub_writes(hub) - writes_before, len(objects))  # fmt: skip
    print(scale.line(), flush=True)
    return 0 if progress.done else 1


def main() -> int:
    """Parse the arguments, set the control plane up and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_CLUSTERS} clusters of {SMOKE_REPLICAS}")
    parser.add_argument("--dry-run", action="store_true", help="set the run up and say what it would apply; no cluster")
    parser.add_argument(
        "--circuit-breaker-burst",
        type=int,
        help="Crossplane's --circuit-breaker-burst (its default, 100, when not given)",
    )
    parser.add_argument(
        "--crossplane-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for Crossplane, e.g. --crossplane-arg=--max-reconcile-rate=10 (repeatable)",
    )
    parser.add_argument(
        "--provider-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for provider-kubernetes, e.g. --provider-arg=--max-reconcile-rate=300 (repeatable)",
    )
    parser.add_argument(
        "--spokes-alone",
        action="store_true",
        help="the floor: apply what the FederationClusters would straight to the spokes; no Crossplane in the way",
    )
    parser.add_argument("--keys", action="store_true", help="publish every SuperNode's key, wait for all listed")
    parser.add_argument("--no-auth", action="store_true", help="node authentication off (not with --keys)")
    parser.add_argument("--provider-poll", default=PROVIDER_POLL, help="provider-kubernetes' --poll")
    parser.add_argument(
        "--audit",
        action="store_true",
        help="log the hub's writes and say who made them, and each Object's (costs the hub CPU: not for the goal)",
    )
    args = parser.parse_args()
    if args.keys and args.no_auth:
        parser.error("--keys publishes keys for node authentication: not with --no-auth")
    if args.smoke:
        args.clusters, args.replicas = SMOKE_CLUSTERS, SMOKE_REPLICAS
    minor = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools").glob("kube-1.*")),
                   key=lambda m: int(m.split(".")[1]))[-1]  # fmt: skip
    plane = ControlPlane(
        tools=Tools(ROOT / ".cache" / "e2e", minor, str(ROOT / ".cache" / "bin" / "crank")),
        workdir=ROOT / ".cache" / "e2e-clusters" / minor,
        package=ROOT / ".cache" / "package" / "function-flower.xpkg",
        configuration=ROOT / ".cache" / "package" / "configuration-flower.xpkg",
        function_manifest=ROOT / "examples" / "install" / "function.yaml",
        configuration_manifest=ROOT / "examples" / "install" / "configuration.yaml",
        # Room on each spoke's three nodes; each SuperNode's identity claim gets a volume of its own when made.
        node_pods=max(250, per_spoke(args.clusters, args.replicas)),
        spoke_volumes=0,
        spokes_stand_in_for_many=True,
        # Not the e2e's short intervals: every composite's reconcile applies each of its resources
        # again, and every provider poll of an Object may write its status (so compose its composite
        # again); changes reach both by watch, the polls only look for what a watch missed.
        crossplane_intervals=("1m", SYNC),
        provider_poll=args.provider_poll,
        provider_args=tuple(args.provider_arg),
        crossplane_args=(
            *([f"--circuit-breaker-burst={args.circuit_breaker_burst}"] if args.circuit_breaker_burst else []),
            *args.crossplane_arg,
        ),
        # The hub's API server holds every Object (each with its live manifest twice): at a thousand
        # clusters its heap, collected at a quarter of Go's default rate, outgrew this machine's memory.
        go_env={**GO_ENV, "GOMEMLIMIT": "6GiB"},
        hub_audit=args.audit,
    )
    if args.spokes_alone and args.dry_run:
        manifests = spoke_manifests(args.clusters, args.replicas)
        kinds = sorted({d["kind"] for docs in manifests.values() for d in docs})
        print(f"spokes alone: would apply {sum(len(d) for d in manifests.values())} objects "
              f"({', '.join(kinds)}) to {len(manifests)} spokes")  # fmt: skip
        return 0
    if args.dry_run:
        configs = provider_configs(args.clusters)
        spokes = sorted({c["spec"]["credentials"]["secretRef"]["name"] for c in configs})
        print(f"kubernetes {minor}: would apply {len(configs)} ProviderConfigs over {len(spokes)} spoke clusters")
        security = "TLS on, node authentication off" if args.no_auth else "node authentication and TLS on"
        print(f"and one Federation of {args.clusters * args.replicas} SuperNodes, {security}")
        print(f"each spoke: 3 nodes of {plane.node_pods} pods, no client rate limits, a volume made for each claim")
        return 0
    with running(plane):
        if args.spokes_alone:
            return spokes_alone(plane, args.clusters, args.replicas, args.timeout)
        return run(plane, args.clusters, args.replicas, args.timeout, keys=args.keys, auth=not args.no_auth)


if __name__ == "__main__":
    sys.exit(main())
