"""Sustained load on the served function, as Crossplane sends it: many calls at once over one mTLS connection.

Starts `function serve --workers W` in its own process (mTLS, certificates
made with the openssl CLI in a temporary directory), sends --calls RunFunction
calls, --concurrency at a time, over one channel, and checks every answer:

- a valid Federation (1, 16 or 128 pools, most of them small, as most
  Federations are; one with a 4 MiB annotation): no fatal result and 6 +
  pools desired resources (the SuperLink's three and its ServiceAccount,
  the pools' ServiceAccount and NetworkPolicy, a workload per pool);
- an invalid spec (a wrong type, an unknown field) or a malformed XR (none
  at all, spec a string, pools a number, a 4 MiB unknown field, an unknown
  field nested 30 deep, and one nested 120 deep, past what protobuf's
  decoder reads): exactly one fatal result and nothing desired.

Any gRPC error is a server error. Prints the calls, server errors,
wrong answers, requests/s, p50/p99 ms per kind, CPU seconds (server and
workers, this client, the rest of the machine), and the RSS and peak RSS
of the server and its workers after the first 10,000 calls (half the
calls, if fewer) and at the end, with no call under way. Budget: RSS grows
by at most 10% between the two. (The peak is printed beside it; it also
counts the calls that happened to be under way together, 4 MiB ones
included, so it creeps up with the number of calls.) Exits 1 on a server
error, a wrong answer, RSS over budget, or a server that does not exit 0 on
SIGTERM.

--compare runs it with 1 and then 2 workers and prints requests/s of each.
The client runs on the same CPUs as the server.

--smoke sends 300 calls to 1 worker, in seconds: it proves the script runs
(a server error or a wrong answer still fails it). Its figures mean nothing,
and the memory budget is not judged: so few calls do not fill the caches.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import pathlib
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from support import served
from support.helpers import BASE, spec, xr

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
# Distinct Federations per valid kind: Crossplane sends each XR's spec again
# on every reconcile, so the function sees a population, not one request.
POPULATION = 64
BIG = 4 * 1024 * 1024
MEMORY_BUDGET = 0.10
FIRST_SAMPLE = 10_000
CALL_TIMEOUT_SECONDS = 120
SMOKE_CALLS = 300


def federation(name: str, pools: int) -> dict[str, Any]:
    """An XR (claim flavor) of pools StatefulSet pools in one namespace."""
    pool_list = [
        {"name": f"p{i}", "replicas": 1 + i % 3, "nodeConfig": {"partition-id": "{index}"}} for i in range(pools)
    ]
    return xr(spec(BASE, supernodes__pools=pool_list), name, "load")


def variant(name: str, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A one-pool Federation with value at path (the XR's own keys first)."""
    xr = copy.deepcopy(federation(name, 1))
    node = xr
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return xr


def nested(depth: int) -> Any:
    """A JSON value depth maps deep."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"n": value}
    return value


def serialized(xr: dict[str, Any] | None) -> bytes:
    """A request observing xr (nothing, for None), as bytes: serialized once, sent many times."""
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="load"))
    if xr is not None:
        req.observed.composite.resource.update(xr)
    return req.SerializeToString()


@dataclass(frozen=True)
class Expect:
    """The answer a kind must get: "ok" with resources desired, or "fatal"."""

    answer: str
    resources: int = 0


FATAL = Expect("fatal")


@dataclass
class Kind:
    """One kind of request: its weight in the mix, its requests, the answer expected, and the latencies seen."""

    name: str
    weight: float
    expect: Expect
    requests: list[bytes]
    latencies: list[float] = field(default_factory=list)

    def verdict(self, data: bytes | None, error: grpc.RpcError | None) -> str:
        """'' for the answer expected, else what was wrong; a gRPC error starts with "gRPC"."""
        if error is not None:
            return f"gRPC {error.code().name}: {error.details()}"
        rsp = fnv1.RunFunctionResponse.FromString(data or b"")
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        desired = len(rsp.desired.resources)
        if self.expect.answer == "ok" and (fatal or desired != self.expect.resources):
            return f"{desired} resources, fatal results {fatal[:1]}"
        if self.expect.answer == "fatal" and (len(fatal) != 1 or desired != 0):
            return f"{len(fatal)} fatal results, {desired} resources"
        return ""


def kinds() -> list[Kind]:
    """The mix: mostly small valid Federations, as a control plane sends, and every kind of bad input."""

    def population(pools: int) -> list[bytes]:
        return [serialized(federation(f"fed-{pools}-{i}", pools)) for i in range(POPULATION)]

    pool = ("spec", "supernodes", "pools", 0)
    big_note = variant("big", ("metadata", "annotations"), {"note": "x" * BIG})
    return [
        Kind("valid-1", 60, Expect("ok", 7), population(1)),
        Kind("valid-16", 20, Expect("ok", 22), population(16)),
        Kind("valid-128", 2, Expect("ok", 134), population(128)),
        Kind("valid-4mib-annotation", 0.2, Expect("ok", 7), [serialized(big_note)]),
        Kind("bad-type", 6, FATAL, [serialized(variant("bad-type", (*pool, "replicas"), "two"))]),
        Kind("unknown-field", 5, FATAL, [serialized(variant("unknown", (*pool, "replica"), 2))]),
        Kind("no-composite", 2, FATAL, [serialized(None)]),
        Kind("spec-string", 1.5, FATAL, [serialized(variant("str", ("spec",), "oops"))]),
        Kind("pools-number", 1.5, FATAL, [serialized(variant("num", ("spec", "supernodes", "pools"), 3))]),
        Kind("unknown-4mib-field", 0.2, FATAL, [serialized(variant("huge", ("spec", "notes"), "x" * BIG))]),
        Kind("nested-30", 1, FATAL, [serialized(variant("nested", ("spec", "extra"), nested(30)))]),
        Kind("nested-120", 0.6, FATAL, [serialized(variant("deep", ("spec", "extra"), nested(120)))]),
    ]  # fmt: skip


def processes(pid: int) -> list[int]:
    """The server's processes: its own, its workers' and multiprocessing's resource tracker's."""
    return [pid, *served.children(pid)]


def memory_kib(pid: int) -> tuple[int, int]:
    """Peak (VmHWM) and current (VmRSS) RSS of pid and its children, summed."""
    peak = current = 0
    for p in processes(pid):
        try:
            lines = pathlib.Path(f"/proc/{p}/status").read_text().splitlines()
        except FileNotFoundError:  # ended meanwhile
            continue
        status = dict(line.split(":", 1) for line in lines)
        peak += int(status["VmHWM"].split()[0])
        current += int(status["VmRSS"].split()[0])
    return peak, current


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of pid, and of its children together."""
    ticks = []
    for p in processes(pid):
        try:
            fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # ended meanwhile
            continue
        ticks.append(int(fields[11]) + int(fields[12]))  # utime, stime
    return ticks[0] / os.sysconf("SC_CLK_TCK"), sum(ticks[1:]) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used (user, nice, system, irq, softirq, steal)."""
    fields = pathlib.Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = [int(fields[i]) for i in (0, 1, 2, 5, 6, 7)]
    return sum(busy) / os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    """What one run measured."""

    workers: int
    calls: int
    seconds: float
    errors: int
    wrong: int
    memory: list[tuple[int, int, int]]
    exit_code: int
    judge_memory: bool = True

    @property
    def rate(self) -> float:
        """Calls answered per second."""
        return self.calls / self.seconds

    @property
    def growth(self) -> float:
        """RSS's growth from the first sample to the last: what a leak would show."""
        return self.memory[-1][2] / self.memory[0][2] - 1

    @property
    def peak_growth(self) -> float:
        """The peak RSS's growth: also whatever calls happened to be under way together (4 MiB ones, say)."""
        return self.memory[-1][1] / self.memory[0][1] - 1

    @property
    def failed(self) -> bool:
        """Whether the run broke a rule."""
        over_budget = self.judge_memory and self.growth > MEMORY_BUDGET
        return bool(self.errors or self.wrong or self.exit_code or over_budget)


class Load:
    """The calls, sent by concurrency threads over one channel, each answer checked."""

    def __init__(self, mix: list[Kind], calls: int, seed: int) -> None:
        """Draw the sequence of kinds (seeded: every run sends the same)."""
        self.mix = mix
        self.seed = seed
        rng = random.Random(seed)  # noqa: S311 - a reproducible mix, no secret
        self.schedule = rng.choices(range(len(mix)), weights=[k.weight for k in mix], k=calls)
        self.failures: list[tuple[str, str]] = []

    def run(self, channel: grpc.Channel, concurrency: int, start: int, end: int) -> float:
        """Send calls start to end and wait for their answers; the seconds it took."""
        # No serializer: the requests are bytes already, and the client,
        # whose CPUs are the server's too, spends as little as it can.
        call = channel.unary_unary(METHOD)
        # itertools.count's next is atomic under the GIL: each call is sent once.
        indices = itertools.count(start)
        threads = [threading.Thread(target=self._client, args=(call, indices, end, n)) for n in range(concurrency)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - began

    def _client(self, call: grpc.UnaryUnaryMultiCallable, indices: itertools.count[int], end: int, n: int) -> None:
        pick = random.Random(self.seed + n)  # noqa: S311 - a reproducible mix, no secret
        while (i := next(indices)) < end:
            kind = self.mix[self.schedule[i]]
            data, error = pick.choice(kind.requests), None
            start = time.perf_counter()
            try:
                answer = call(data, timeout=CALL_TIMEOUT_SECONDS)
            except grpc.RpcError as err:
                answer, error = None, err
            kind.latencies.append(time.perf_counter() - start)
            wrong = kind.verdict(answer, error)
            if wrong:
                self.failures.append((kind.name, wrong))


def run(workers: int, calls: int, concurrency: int, seed: int, *, judge_memory: bool = True) -> Result:
    """Serve with workers, send the calls, print the figures; memory over budget fails it if judge_memory."""
    mix = kinds()
    with tempfile.TemporaryDirectory() as tmp:
        certs = served.issue(pathlib.Path(tmp) / "certs")
        port = served.free_port()
        log = pathlib.Path(tmp) / "function.log"
        proc = served.serve("--tls-certs-dir", str(certs.server_dir), "--workers", str(workers), port=port, log=log)
        try:
            load = Load(mix, calls, seed)
            cpu = (cpu_seconds(proc.pid), time.process_time(), machine_cpu_seconds())
            memory, seconds, done = [], 0.0, 0
            with certs.channel(f"127.0.0.1:{port}") as channel:
                # Sampled between the calls, none under way: what the server
                # keeps, not what calls in flight (4 MiB ones) hold a while.
                for end in (min(FIRST_SAMPLE, calls // 2), calls):
                    seconds += load.run(channel, concurrency, done, end)
                    memory.append((end, *memory_kib(proc.pid)))
                    done = end
            server_cpu, workers_cpu = (b - a for a, b in zip(cpu[0], cpu_seconds(proc.pid), strict=True))
            client_cpu = time.process_time() - cpu[1]
            machine_cpu = machine_cpu_seconds() - cpu[2]
        finally:
            proc.terminate()
            exit_code = proc.wait(timeout=60)
            output = log.read_text()
    errors = sum(1 for _, wrong in load.failures if wrong.startswith("gRPC"))
    result = Result(workers, calls, seconds, errors, len(load.failures) - errors, memory, exit_code, judge_memory)
    print(f"workers {workers}, concurrency {concurrency}, {len(os.sched_getaffinity(0))} CPUs, seed {seed}")
    print(
        f"calls {calls}, server errors {result.errors}, wrong answers {result.wrong}, exit code on SIGTERM {exit_code}"
    )
    print(f"{result.rate:.0f} requests/s ({seconds:.1f} s)")
    others = machine_cpu - server_cpu - workers_cpu - client_cpu
    print(
        f"CPU seconds: server {server_cpu:.1f}, its workers {workers_cpu:.1f}, client {client_cpu:.1f}, "
        f"rest of the machine {others:.1f}"
    )
    print(f"{'kind':>22} {'calls':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for kind in mix:
        samples = sorted(kind.latencies)
        if samples:
            p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
            print(f"{kind.name:>22} {len(samples):>7} {statistics.median(samples) * 1000:>8.1f} {p99 * 1000:>8.1f}")
    for after, peak, current in memory:
        print(f"after {after:>6} calls: RSS {current / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB (server and workers)")
    over = "OVER" if result.growth > MEMORY_BUDGET else "within"
    judged = "" if judge_memory else "; not judged at --smoke's size"
    print(
        f"RSS growth {result.growth * 100:+.1f}% ({over} the {MEMORY_BUDGET:.0%} budget{judged}), "
        f"peak RSS growth {result.peak_growth * 100:+.1f}%"
    )
    for name, wrong in load.failures[:10]:
        print(f"  {name}: {wrong}")
    if exit_code != 0:
        print(f"the function's output:\n{output[-4000:]}")
    return result


def main() -> int:
    """Run the load once, or with 1 and 2 workers; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--compare", action="store_true", help="run with 1 and then 2 workers")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_CALLS} calls, 1 worker, memory not judged: does it run"
    )
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.workers, args.compare = SMOKE_CALLS, 1, False
    results = []
    for workers in (1, 2) if args.compare else (args.workers,):
        results.append(run(workers, args.calls, args.concurrency, args.seed, judge_memory=not args.smoke))
        print()
    if args.compare:
        for r in results:
            print(f"workers {r.workers}: {r.rate:.0f} requests/s")
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
