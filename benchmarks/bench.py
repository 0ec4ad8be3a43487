"""Time RunFunction in-process and over gRPC for 1, 16 and 256 pools.

Prints median and p99 milliseconds per call and the process's peak RSS.
The XRD caps pools at 128 (the most its CEL rules allow within the API
server's cost budget); to see how the function scales beyond, this script
lifts that cap in its own process only.

"in-process" is the steady state (Crossplane sends the same spec on every
reconcile, and validation results are cached by content); "cold" empties
those caches before each call.

Budget: 16 pools under 5 ms median in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import resource as rusage
import statistics
import sys
import threading
import time

import annotated_types
import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from function import caching, fn, spec

# Pool counts up to this one get the full --iterations.
FULL_ITERATIONS_UP_TO = 16


def cold_run(req: fnv1.RunFunctionRequest) -> None:
    """A call with the per-content caches emptied: a spec never seen before."""
    caching.clear_caches()
    fn.run(req)


def lift_pool_cap() -> None:
    """Allow more pools than the API's limit, to see how the cost grows past it."""
    field = spec.SuperNodesSpec.model_fields["pools"]
    field.metadata = [m for m in field.metadata if not isinstance(m, annotated_types.MaxLen)]
    spec.SuperNodesSpec.model_rebuild(force=True)
    spec.FederationSpec.model_rebuild(force=True)


def request(pools: int) -> fnv1.RunFunctionRequest:
    """A request for one Federation with pools pools, each using most features."""
    xr = {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederation",
        "metadata": {
            "name": "bench-x1",
            "labels": {"crossplane.io/claim-name": "bench", "crossplane.io/claim-namespace": "flower"},
        },
        "spec": {
            "mode": "StatefulSet",
            "isolationMode": "process",
            "superlink": {"image": "flwr/superlink:1.25.0", "superexecImage": "flwr/superexec:1.25.0"},
            "supernodes": {
                "image": "flwr/supernode:1.25.0",
                "env": [{"name": "LOG_LEVEL", "value": "INFO"}],
                "pools": [
                    {
                        "name": f"pool-{i}",
                        "replicas": 2,
                        "images": {"superexecClientApp": "flwr/superexec:1.25.0"},
                        "supernodeResources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                        "gpu": {"enabled": True, "vendor": "nvidia"},
                        "nodeConfig": {
                            "partition-id": "{index}",
                            "num-partitions": "{replicas}",
                            "name": "c_{pool}_{index}",
                        },
                        "podTemplate": {"spec": {"nodeSelector": {"pool": f"p{i}"}}},
                    }
                    for i in range(pools)
                ],
            },
        },
    }
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    return req


def measure(call, iterations: int) -> tuple[float, float]:
    """Median and 99th-percentile milliseconds of call, after one warm-up call."""
    call()  # warm up: imports, schema caches
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return statistics.median(samples), p99


def serve_in_thread(address: str) -> None:
    """Serve the function over insecure gRPC at address from a daemon thread."""

    async def main() -> None:
        server = grpc.aio.server()
        grpcv1.add_FunctionRunnerServiceServicer_to_server(fn.FunctionRunner(), server)
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()


def main() -> int:
    """Print the cost of one call per pool count and path; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--address", default="127.0.0.1:19443")
    args = parser.parse_args()
    logging.configure(level=logging.Level.INFO)
    lift_pool_cap()
    serve_in_thread(args.address)
    channel = grpc.insecure_channel(args.address)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = grpcv1.FunctionRunnerServiceStub(channel)
    print(f"{'pools':>6} {'path':>10} {'median ms':>10} {'p99 ms':>10} {'resources':>10}")
    for pools in (1, FULL_ITERATIONS_UP_TO, 128, 256):
        req = request(pools)
        # Bigger requests get proportionally fewer iterations (at least 20).
        scale = 1 if pools <= FULL_ITERATIONS_UP_TO else pools // FULL_ITERATIONS_UP_TO
        iterations = max(20, args.iterations // scale)
        rsp = fn.run(req)
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        if fatal:
            print(f"fatal result for {pools} pools: {fatal}", file=sys.stderr)
            return 1
        paths = (
            ("in-process", lambda req=req: fn.run(req)),
            ("cold", lambda req=req: cold_run(req)),
            ("grpc", lambda req=req: stub.RunFunction(req, timeout=60)),
        )
        for path, call in paths:
            median, p99 = measure(call, iterations)
            print(f"{pools:>6} {path:>10} {median:>10.2f} {p99:>10.2f} {len(rsp.desired.resources):>10}")
    peak_mib = rusage.getrusage(rusage.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mib:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
