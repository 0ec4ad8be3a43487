"""Time RunFunction in-process and over gRPC for 1, 16, 128 and 256 pools.

Prints median and p99 milliseconds per call, the peak RSS of this process
(the in-process calls) and of the server.
The XRD caps pools at 128 (the most its CEL rules allow within the API
server's cost budget); to see how the function scales beyond, this script
lifts that cap in its own process and in the server's only.

"in-process" is the steady state (Crossplane sends the same spec on every
reconcile, and validation results are cached by content); "cold" empties
those caches before each call. "grpc" calls the function served as
`function serve --insecure --workers 1` runs it (function/serving/main.py: one composing
thread, function/serving/workers.py), in its own process, over one channel: the cost of one
call, which a worker process adds to (benchmarks/bench_load.py measures workers' throughput); "grpc-new"
does too, with a spec of its own on each call, so the server's caches keep
filling (many Federations, or changing ones).

--smoke runs 1 and 256 pools (past the cap: the lifted cap is checked in
both processes), a few iterations each, in seconds: it proves the script
runs; its figures mean nothing.

Budget: 16 pools under 5 ms median in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import pathlib
import resource as rusage
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import annotated_types
import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from function import caching
from function.api import spec
from function.serving import fn
from function.serving import main as function_main
from support import served

ROOT = pathlib.Path(__file__).resolve().parent.parent
POOLS = (1, 16, 128, 256)
# Pool counts up to this one get the full --iterations.
FULL_ITERATIONS_UP_TO = 16
SMOKE_POOLS = (1, 256)
SMOKE_ITERATIONS = 3
# What this script runs as to serve the function with the pool cap lifted (see serving).
SERVE_FLAG = "--serve-function"
# A liveness bound, not a figure: a fresh interpreter importing the function takes a second or
# two of CPU, but in `make test` the unit stage runs at the lowest weight beside both control
# planes and has taken over 60 s of wall time to do it.
START_TIMEOUT_SECONDS = 300
# The server's grace period (function/serving/serve.py) and its winding down.
STOP_TIMEOUT_SECONDS = 30
SHOWN_LOG_CHARS = 4000


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


def variants(req: fnv1.RunFunctionRequest, count: int) -> Iterator[fnv1.RunFunctionRequest]:
    """Copies of req, count of them, each a spec of its own (its first pool's replicas), in a cycle.

    As Crossplane calls with many Federations, or one that changes: every call
    misses the caches, which keep filling, as the garbage collector sees them.
    """
    made = []
    for i in range(count):
        copy = fnv1.RunFunctionRequest()
        copy.CopyFrom(req)
        copy.observed.composite.resource["spec"]["supernodes"]["pools"][0]["replicas"] = 3 + i
        made.append(copy)
    return itertools.cycle(made)


def measure(call: Callable[[], Any], iterations: int) -> tuple[float, float, float]:
    """Median, 95th- and 99th-percentile milliseconds of call, after one warm-up call."""
    call()  # warm up: imports, schema caches
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()

    def percentile(p: float) -> float:
        return samples[min(len(samples) - 1, int(len(samples) * p))]

    return statistics.median(samples), percentile(0.95), percentile(0.99)


def fatal_messages(rsp: fnv1.RunFunctionResponse) -> list[str]:
    """The messages of rsp's fatal results."""
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


class Server:
    """The function served in its own process, at address (see serving)."""

    def __init__(self, address: str, process: subprocess.Popen[bytes], log: pathlib.Path) -> None:
        """A server that listens at address; its output goes to log."""
        self.address = address
        self.process = process
        self.log = log
        self.exit_code: int | None = None
        self.channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", served.MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", served.MAX_MESSAGE_BYTES),
            ],
        )
        self.stub = grpcv1.FunctionRunnerServiceStub(self.channel)

    def peak_rss_mib(self) -> float:
        """The server's peak resident memory (VmHWM), in MiB."""
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def output(self) -> str:
        """The end of what the server printed."""
        return self.log.read_text(errors="replace")[-SHOWN_LOG_CHARS:]


@contextlib.contextmanager
def serving(*, lift_cap: bool) -> Iterator[Server]:
    """`function serve --insecure --workers 1` on a free port in its own process, once it listens; SIGTERM at the end.

    One composing thread, not the default's one worker process per CPU: what this measures is
    one call's cost, and only the server's own process has the pool cap lifted (a worker
    imports the API afresh). With lift_cap, this script runs it (--serve-function), having
    lifted the pool cap first; else `python -m function.serving.main`. The server's exit code
    is the yielded Server's exit_code afterwards.
    """
    port = served.free_port()
    program = (str(pathlib.Path(__file__).resolve()), SERVE_FLAG) if lift_cap else ("-m", "function.serving.main")
    with tempfile.TemporaryDirectory() as tmp:
        log = pathlib.Path(tmp) / "function.log"
        process = served.serve(
            "--insecure", "--workers", "1", port=port, log=log, program=program, timeout=START_TIMEOUT_SECONDS
        )
        server = Server(f"127.0.0.1:{port}", process, log)
        try:
            yield server
        finally:
            server.channel.close()
            process.terminate()
            try:
                server.exit_code = process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                server.exit_code = process.wait()
            if server.exit_code != 0:
                print(f"the function exited with {server.exit_code}:\n{server.output()}", file=sys.stderr)


def serve_lifted(argv: list[str]) -> None:
    """The function's command line (`serve --address ... --insecure`), the pool cap lifted first."""
    lift_pool_cap()
    function_main.cli(argv, prog_name="function")


def main() -> int:
    """Print the cost of one call per pool count and path; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200, help="calls per pool count and path, up to 16 pools")
    parser.add_argument("--smoke", action="store_true", help="1 and 256 pools, a few iterations: does it run")
    if sys.argv[1:2] == [SERVE_FLAG]:  # the server this script starts (see serving): not for users
        serve_lifted(sys.argv[2:])
        return 0
    args = parser.parse_args()
    pool_counts, wanted = (SMOKE_POOLS, SMOKE_ITERATIONS) if args.smoke else (POOLS, args.iterations)
    logging.configure(level=logging.Level.INFO)
    lift_pool_cap()
    with serving(lift_cap=True) as server:
        print(f"{'pools':>6} {'path':>10} {'median ms':>10} {'p95 ms':>10} {'p99 ms':>10} {'resources':>10}")
        for pools in pool_counts:
            req = request(pools)
            # Bigger requests get proportionally fewer iterations (at least 20, or --smoke's).
            scale = 1 if pools <= FULL_ITERATIONS_UP_TO else pools // FULL_ITERATIONS_UP_TO
            iterations = max(min(20, wanted), wanted // scale)
            rsp = fn.run(req)
            over_grpc = server.stub.RunFunction(req, timeout=60)
            for where, answer in (("in-process", rsp), ("grpc", over_grpc)):
                if fatal_messages(answer):
                    print(f"fatal result for {pools} pools ({where}): {fatal_messages(answer)}", file=sys.stderr)
                    return 1
            if len(over_grpc.desired.resources) != len(rsp.desired.resources):
                print(
                    f"{pools} pools: {len(over_grpc.desired.resources)} resources over gRPC, "
                    f"{len(rsp.desired.resources)} in-process",
                    file=sys.stderr,
                )
                return 1
            new_specs = variants(req, iterations + 1)
            paths = (
                ("in-process", lambda req=req: fn.run(req)),
                ("cold", lambda req=req: cold_run(req)),
                ("grpc", lambda req=req: server.stub.RunFunction(req, timeout=60)),
                ("grpc-new", lambda reqs=new_specs: server.stub.RunFunction(next(reqs), timeout=60)),
            )
            for path, call in paths:
                median, p95, p99 = measure(call, iterations)
                print(
                    f"{pools:>6} {path:>10} {median:>10.2f} {p95:>10.2f} {p99:>10.2f} {len(rsp.desired.resources):>10}"
                )
        server_peak_mib = server.peak_rss_mib()
    if server.exit_code != 0:
        return 1
    peak_mib = rusage.getrusage(rusage.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mib:.1f} MiB (this process: in-process and cold), {server_peak_mib:.1f} MiB (the server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
