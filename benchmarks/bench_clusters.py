"""Time RunFunction for a pool whose clusterSelector matches 100, 500 and 1,000 ProviderConfigs.

Prints, per cluster count, the median, p95 and p99 milliseconds of one call in
process and over gRPC, the number of desired resources and the size of the
serialized response. Four calls: "first", the Federation's first call with
nothing observed (its FederationClusterGroups, 32 at most); "steady", a later
call where every group is observed (so each cluster's index is read back from
its group); "group", the call that composes the largest group's
FederationClusters; "part", the call that composes one FederationCluster:
one cluster's objects.

The gRPC path calls the function served as `function serve --insecure` runs
it, in its own process (benchmarks/bench.py's serving). The ProviderConfigs
point at no live cluster: the function never dials them.

--smoke runs 100 clusters, a few iterations each, in seconds: it proves the
script runs; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks.bench import fatal_messages, measure, serving
from function.serving import fn
from function.topology import clusters

LABELS = {"flower.flwr.ai/federation": "fleet"}
CLUSTERS = (100, 500, 1000)
SMOKE_CLUSTERS = (100,)
SMOKE_ITERATIONS = 3
# What the benchmark's platform lets Federations do: pools in namespaces of their own.
PLATFORM_POLICY = {"apiVersion": "flower.fn.crossplane.io/v1alpha1", "kind": "Policy", "namespaces": ["flower-*"]}


def composite() -> dict[str, Any]:
    """A claimed Federation with one pool that follows clusters by label, numbered federation-wide."""
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederation",
        "metadata": {
            "name": "fleet-x1",
            "labels": {"crossplane.io/claim-name": "fleet", "crossplane.io/claim-namespace": "flower"},
        },
        "spec": {
            "mode": "StatefulSet",
            "isolationMode": "subprocess",
            "version": "1.41.0",
            "superlink": {"externalAddress": "flower.example.org"},
            "supernodes": {
                "pools": [
                    {
                        "name": "gpu",
                        "replicas": 2,
                        "clusterSelector": {"matchLabels": LABELS, "maxClusters": 1000},
                        "namespace": "flower-sites",
                        "createNamespace": True,
                        "nodeConfig": {"site": "{cluster}", "partition-id": "{globalIndex}"},
                    }
                ]
            },
        },
    }


def provider_configs(count: int) -> list[dict[str, Any]]:
    """Count labelled ProviderConfigs, each with a per-cluster nodeConfig value."""
    return [
        {
            "apiVersion": clusters.CLUSTER_API,
            "kind": "ProviderConfig",
            "metadata": {
                "name": f"site-{i:04d}",
                "labels": dict(LABELS),
                "annotations": {clusters.NODE_CONFIG_PREFIX + "data-path": f"/data/{i}"},
            },
        }
        for i in range(count)
    ]


def request(count: int, observed: dict[str, Any] | None = None) -> fnv1.RunFunctionRequest:
    """The request Crossplane sends once it has listed count ProviderConfigs."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(composite())
    # The platform lets pools use their own namespace in each cluster (function/api/policy.py).
    req.input.update(PLATFORM_POLICY)
    key = clusters.requirement_key("gpu", "ProviderConfig")
    req.required_resources[key].SetInParent()
    for item in provider_configs(count):
        req.required_resources[key].items.add().resource.update(item)
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.CopyFrom(obj)
    return req


def part_request(
    rsp: fnv1.RunFunctionResponse, name: str, policy: dict[str, Any] | None = PLATFORM_POLICY
) -> fnv1.RunFunctionRequest:
    """The request Crossplane sends for a composite composed in rsp: a group's call, or one cluster's.

    policy: the Composition step's input, None for none.
    """
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(rsp.desired.resources[name].resource)
    req.observed.composite.resource.update({"metadata": {"name": name}})
    if policy is not None:
        req.input.update(policy)
    return req


def main() -> int:
    """Print the cost of one call per cluster count, state and path; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20, help="calls per cluster count, state and path")
    parser.add_argument("--smoke", action="store_true", help="100 clusters, a few iterations: does it run")
    args = parser.parse_args()
    counts, iterations = (SMOKE_CLUSTERS, SMOKE_ITERATIONS) if args.smoke else (CLUSTERS, args.iterations)
    logging.configure(level=logging.Level.INFO)
    with serving(lift_cap=False) as server:
        header = (
            f"{'clusters':>8} {'state':>7} {'path':>10} {'median ms':>10} {'p95 ms':>10} {'p99 ms':>10} "
            f"{'resources':>10} {'KiB':>8}"
        )
        print(header)
        for count in counts:
            first = request(count)
            rsp = fn.run(first)
            if fatal_messages(rsp):
                print(f"fatal result for {count} clusters: {fatal_messages(rsp)}", file=sys.stderr)
                return 1
            groups = [n for n in rsp.desired.resources if n.startswith("cluster-group-")]
            group = max(groups, key=lambda n: len(rsp.desired.resources[n].resource["spec"]["clusters"]))
            group_req = part_request(rsp, group)
            grouped = fn.run(group_req)
            parts = [n for n in grouped.desired.resources if n.startswith("cluster-config-")]
            listed = sum(len(rsp.desired.resources[n].resource["spec"]["clusters"]) for n in groups)
            if listed != count or not parts or fatal_messages(grouped):
                print(f"{count} clusters made {listed} FederationClusters in {len(groups)} groups", file=sys.stderr)
                return 1
            steady = request(count, {n: r.resource for n, r in rsp.desired.resources.items()})
            calls = (
                ("first", first),
                ("steady", steady),
                ("group", group_req),
                ("part", part_request(grouped, parts[-1])),
            )
            for state, req in calls:
                answer = fn.run(req)
                served = server.stub.RunFunction(req, timeout=120)
                if served != answer:
                    print(f"{count} clusters, {state}: the served function answered otherwise", file=sys.stderr)
                    return 1
                size = answer.ByteSize() / 1024
                for path, call in (
                    ("in-process", lambda req=req: fn.run(req)),
                    ("grpc", lambda req=req: server.stub.RunFunction(req, timeout=120)),
                ):
                    median, p95, p99 = measure(call, iterations)
                    print(
                        f"{count:>8} {state:>7} {path:>10} {median:>10.1f} {p95:>10.1f} {p99:>10.1f} "
                        f"{len(answer.desired.resources):>10} {size:>8.0f}"
                    )
    return 1 if server.exit_code else 0


if __name__ == "__main__":
    sys.exit(main())
