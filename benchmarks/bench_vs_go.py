"""The function against two Go functions, side by side, in one run: latency, throughput, CPU, memory.

The peers are benchmarks/typedgo (`make .cache/bin/typedgo` builds it; this script does so when
it is missing), both on function-sdk-go:

- typed Go (`typedgo serve`): a composition function that reads the spec into Go types and
  builds its workloads from k8s.io/api types. It composes the Federations this script sends.
- near-floor Go (`typedgo floor`): composes nothing. Before anything is served, this script runs
  the function in-process on every request it will send and hands the peer the answers' bytes
  (each answer's pieces, those the answers share written once); the peer picks one by what varies
  (the number of pools and the first pool's replicas) and answers with its bytes as they are: what
  gRPC and the SDK's server cost, and nothing else. They are the bytes of the function's run in
  this process (fn.run_bytes): the served function's, but for the order of the composite status's
  map, which each process writes in its own (the response is not serialized deterministically).

Before anything is timed the script checks that each peer's desired resources, composite status
and TTL equal the function's, at 1 and 16 pools (exit 1 if not).

All are served on this machine, without TLS, and called over one HTTP/2 connection as
Crossplane holds one per function pod, by a load client in Go (`typedgo load`), so that the
client costs little and the same for all. The function runs as installed by default
(`--workers auto`: one worker per CPU it may use).

Latency, for 1, 16 and 128 pools, each warm (the same request on every call: one Federation
reconciled again) and cold (a new spec on every call: its first pool's replicas, so every call
misses the function's caches): --calls calls, 8 under way at once. The servers take turns
(--rounds rounds of each), so that the machine's noise falls on all. Prints p50 and p95 ms,
the server's CPU ms per call (its process and its workers, from /proc) and the ratio of each
server's p50 to each peer's.

Throughput, 16 pools, cold, 16 calls under way: requests/s and CPU ms per call of the function
with --workers auto, 1 and 2, and of the peers, all served at once and taking turns (--rounds
rounds of --throughput-calls calls each), with the memory of each server after the run (its
processes' proportional set size, PSS: a page shared by n processes counts 1/n in each, so the
libraries and imports the workers share are counted once), what of it is one worker's (the
mean PSS of the function's worker processes: what each worker more costs), and the ratio of
each to each peer's requests/s.

Reading a new spec, in this process, for each pool count: the CPU ms of what any answer to a new
spec must do before it composes anything (protobuf's decoding of the request, reading the composite
into plain values, pydantic's check of its spec) against the whole of composing it (fn.run_bytes,
every cache missed): the part of a cold call no change to the composing can take away.

--smoke runs 1 pool, 20 calls, one round, and 40 calls of throughput: it proves the script runs
(the equality check still fails it). Its figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench  # the Federation all compose: pools using most features

from function.api.spec import FederationSpec
from function.serving import fn, wire
from support import served

ROOT = pathlib.Path(__file__).resolve().parent.parent
PEER = ROOT / ".cache" / "bin" / "typedgo"
POOLS = (1, 16, 128)
SMOKE_POOLS = (1,)
IN_FLIGHT = 8
THROUGHPUT_POOLS = 16
THROUGHPUT_IN_FLIGHT = 16
WORKERS = ("auto", "1", "2")
CHECKED_POOLS = (1, 16)
# Liveness bounds, not figures: in `make test` this runs beside both control planes.
START_TIMEOUT_SECONDS = 300
CALL_TIMEOUT = "5m"
HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    """One load client's run against one server."""

    milliseconds: list[float]
    seconds: float
    cpu_seconds: float

    def percentile(self, p: float) -> float:
        """The p-quantile of the calls' milliseconds."""
        return self.milliseconds[min(len(self.milliseconds) - 1, int(len(self.milliseconds) * p))]

    @property
    def cpu_ms_per_call(self) -> float:
        """The server's CPU milliseconds per call."""
        return self.cpu_seconds * 1000 / len(self.milliseconds)

    @property
    def per_second(self) -> float:
        """Calls answered per second."""
        return len(self.milliseconds) / self.seconds


@dataclass
class Server:
    """A function served in its own process."""

    name: str
    address: str
    process: subprocess.Popen[bytes]
    log: pathlib.Path

    def processes(self) -> list[int]:
        """The server's process and its children."""
        return [self.process.pid, *served.children(self.process.pid)]

    def cpu_seconds(self) -> float:
        """CPU time of the server and of its live children (workers live as long as it does)."""
        total = 0
        for pid in self.processes():
            with contextlib.suppress(FileNotFoundError):
                fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / HZ

    def pss_mib(self) -> float:
        """Proportional memory of the server and its children: what they share counted once."""
        return sum(pss_mib(pid) for pid in self.processes())

    def worker_pss_mib(self) -> float | None:
        """The mean proportional memory of the function's worker processes; None without any."""
        found = [pss_mib(pid) for pid in served.workers(self.process.pid)]
        return statistics.mean(found) if found else None


def pss_mib(pid: int) -> float:
    """A process's proportional set size (0 once it has ended)."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def build_peer(peer: pathlib.Path) -> None:
    """The peer, built as the Makefile builds it, when it is the Makefile's and missing or stale."""
    if peer == PEER:
        # A fixed command: make and the Makefile's target.
        subprocess.run(["make", "--no-print-directory", str(PEER.relative_to(ROOT))], cwd=ROOT, check=True)  # noqa: S603, S607


@contextlib.contextmanager
def serving_ours(workers: str, logs: pathlib.Path) -> Iterator[Server]:
    """The function, served with --workers workers, until the block ends."""
    port = served.free_port()
    log = logs / f"function-{workers}.log"
    proc = served.serve("--insecure", "--workers", workers, port=port, log=log, timeout=START_TIMEOUT_SECONDS)
    try:
        yield Server(f"function --workers {workers}", f"127.0.0.1:{port}", proc, log)
    finally:
        stop(proc, log)


@dataclass(frozen=True)
class Peer:
    """A Go peer: its name in the tables, and how the peer's binary serves it."""

    name: str
    command: tuple[str, ...]


TYPED = Peer("typed Go", ("serve",))


def near_floor(answers: pathlib.Path) -> Peer:
    """The near-floor peer, answering from the answers file (write_answers)."""
    return Peer("near-floor Go", ("floor", "--answers", str(answers)))


@contextlib.contextmanager
def serving_peer(peer: pathlib.Path, which: Peer, logs: pathlib.Path) -> Iterator[Server]:
    """A Go peer, served until the block ends."""
    port = served.free_port()
    log = logs / f"typedgo-{which.command[0]}.log"
    proc = served.launch(
        [str(peer), *which.command, "--address", f"127.0.0.1:{port}"],
        port=port,
        log=log,
        timeout=START_TIMEOUT_SECONDS,
    )
    try:
        yield Server(which.name, f"127.0.0.1:{port}", proc, log)
    finally:
        stop(proc, log)


def stop(proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    """Stop a server; show its log if it did not exit cleanly."""
    proc.terminate()
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    if code not in (0, -15):
        print(f"{log.name} exited with {code}:\n{log.read_text()[-4000:]}", file=sys.stderr)


def cold_requests(pools: int, count: int) -> list[fnv1.RunFunctionRequest]:
    """As many requests as count, each a spec of its own: its first pool's replicas."""
    return list(itertools.islice(bench.variants(bench.request(pools), count), count))


def write_requests(path: pathlib.Path, requests: list[fnv1.RunFunctionRequest]) -> pathlib.Path:
    """requests, length-prefixed, as `typedgo load` reads them."""
    with path.open("wb") as out:
        for req in requests:
            raw = req.SerializeToString()
            out.write(struct.pack(">I", len(raw)))
            out.write(raw)
    return path


def variants_needed(args: argparse.Namespace) -> dict[int, int]:
    """For each pool count the run sends, how many new specs (cold_requests) it sends at most."""
    needed = dict.fromkeys(CHECKED_POOLS, 0)
    for pools in args.pools:
        needed[pools] = max(needed.get(pools, 0), args.calls * args.rounds * 2)
    needed[THROUGHPUT_POOLS] = max(needed.get(THROUGHPUT_POOLS, 0), args.throughput_calls * args.rounds)
    return needed


# The field of a RunFunctionResponse that carries the desired resources.
DESIRED = fnv1.RunFunctionResponse.DESCRIPTOR.fields_by_name["desired"].number


def answer_chunks(req: fnv1.RunFunctionRequest) -> list[bytes]:
    """The bytes the function serves for req (fn.run_bytes), in pieces: the response, then its resources one by one.

    A resource's piece is its own `desired` entry (wire.desired_resources of it alone, unwrapped):
    between two specs that differ in one pool's replicas, most are the same bytes.
    """
    composed = fn.answer(req)
    field = composed.resources_field()
    entries = [
        wire.field(wire.desired_resources({name: resource}), DESIRED) or b""
        for name, resource in sorted(composed.composed.items())
    ]
    framing = field[: len(field) - sum(map(len, entries))]
    chunks = [composed.rsp.SerializeToString(), framing, *entries]
    if b"".join(chunks) != composed.serialized():
        msg = "the answer's pieces are not its bytes"
        raise RuntimeError(msg)
    return chunks


def write_answers(path: pathlib.Path, needed: dict[int, int]) -> pathlib.Path:
    """The function's answers to every request the run sends, as `typedgo floor` reads them.

    Every integer a uint32, big endian: the number of pieces and each (length, bytes), written
    once however many answers share it; then the number of answers and each (pools, the first
    pool's replicas, its number of pieces, their indexes).
    """
    pieces: dict[bytes, int] = {}
    answers = []
    for pools, count in needed.items():
        for req in [bench.request(pools), *cold_requests(pools, count)]:
            replicas = int(req.observed.composite.resource["spec"]["supernodes"]["pools"][0]["replicas"])
            indexes = [pieces.setdefault(chunk, len(pieces)) for chunk in answer_chunks(req)]
            answers.append((pools, replicas, indexes))
    with path.open("wb") as out:
        out.write(struct.pack(">I", len(pieces)))
        for chunk in pieces:  # in index order: a dict keeps the order of insertion
            out.write(struct.pack(">I", len(chunk)) + chunk)
        out.write(struct.pack(">I", len(answers)))
        for pools, replicas, indexes in answers:
            out.write(struct.pack(f">III{len(indexes)}I", pools, replicas, len(indexes), *indexes))
    return path


def load(peer: pathlib.Path, server: Server, requests: pathlib.Path, calls: int, in_flight: int) -> Run:
    """Time calls calls, in_flight at a time, cycling through requests; an error or fatal result fails the script."""
    before = server.cpu_seconds()
    proc = subprocess.run(  # noqa: S603 - the peer the caller named, with fixed arguments
        [
            str(peer),
            "load",
            "--address",
            server.address,
            "--requests",
            str(requests),
            "--calls",
            str(calls),
            "--in-flight",
            str(in_flight),
            "--timeout",
            CALL_TIMEOUT,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    cpu = server.cpu_seconds() - before
    if proc.returncode != 0:
        msg = f"load client failed against {server.name}: {proc.stderr}"
        raise RuntimeError(msg)
    report = json.loads(proc.stdout)
    if report["errors"] or report["fatalResults"]:
        msg = (
            f"{server.name}: {report['errors']} errors, {report['fatalResults']} fatal results: {report['firstError']}"
        )
        raise RuntimeError(msg)
    return Run(report["milliseconds"], report["seconds"], cpu)


def answer(server: Server, req: fnv1.RunFunctionRequest) -> dict[str, Any]:
    """What server answers req, as JSON: its desired state and TTL."""
    with grpc.insecure_channel(
        server.address, options=[("grpc.max_receive_message_length", served.MAX_MESSAGE_BYTES)]
    ) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=300)
    got = json_format.MessageToDict(rsp)
    return {"desired": got.get("desired"), "ttl": got.get("meta", {}).get("ttl")}


def check_same_answers(ours: Server, peer: Server) -> list[str]:
    """The pool counts at which the peer's answer differs from the function's (none, or the figures mean nothing)."""
    differ = []
    for pools in CHECKED_POOLS:
        req = bench.request(pools)
        mine, theirs = answer(ours, req), answer(peer, req)
        if mine != theirs or not mine["desired"]["resources"]:
            differ.append(f"{pools} pools")
    return differ


def merged(runs: list[Run]) -> Run:
    """Several runs as one."""
    return Run(
        sorted(itertools.chain.from_iterable(r.milliseconds for r in runs)),
        sum(r.seconds for r in runs),
        sum(r.cpu_seconds for r in runs),
    )


def ratio_headers(peers: list[Server]) -> str:
    """The headers of the ratio columns, one per peer."""
    return " ".join(f"{'vs ' + peer.name.split()[0]:>14}" for peer in peers)


def ratios(value: float, peer_values: list[float]) -> str:
    """The ratio of value to each peer's."""
    return " ".join(f"{value / theirs:>14.2f}" for theirs in peer_values)


def latency(
    peer: pathlib.Path, ours: Server, peers: list[Server], work: pathlib.Path, args: argparse.Namespace
) -> None:
    """Print the latency table: each pool count, warm and cold, the servers taking turns."""
    servers = [ours, *peers]
    print(f"latency: {args.calls} calls per round, {IN_FLIGHT} in flight, {args.rounds} rounds each, interleaved")
    print(
        f"{'pools':>6} {'spec':>6} {'server':>24} {'p50 ms':>8} {'p95 ms':>8} {'p95/p50':>8} "
        f"{'CPU ms/call':>12} {ratio_headers(peers)}"
    )
    for pools in args.pools:
        for temperature in ("warm", "cold"):
            if temperature == "warm":
                paths = [write_requests(work / f"{pools}-warm.bin", [bench.request(pools)])] * args.rounds
            else:
                # A file of specs per round, each call's its own: none is seen twice by a server. (One file
                # for every round sent each round the same specs: from the second on, the function answered
                # them from memory, function/serving/answers.py.)
                specs = cold_requests(pools, args.calls * args.rounds)
                paths = [
                    write_requests(work / f"{pools}-cold-{r}.bin", specs[r * args.calls : (r + 1) * args.calls])
                    for r in range(args.rounds)
                ]
            runs: dict[str, list[Run]] = {server.name: [] for server in servers}
            for path in paths:
                for server in servers:
                    runs[server.name].append(load(peer, server, path, args.calls, IN_FLIGHT))
            peer_p50s = [statistics.median(merged(runs[theirs.name]).milliseconds) for theirs in peers]
            for server in servers:
                run = merged(runs[server.name])
                p50 = statistics.median(run.milliseconds)
                print(
                    f"{pools:>6} {temperature:>6} {server.name:>24} {p50:>8.2f} {run.percentile(0.95):>8.2f} "
                    f"{run.percentile(0.95) / p50:>8.2f} {run.cpu_ms_per_call:>12.2f} {ratios(p50, peer_p50s)}"
                )


def throughput(peer: pathlib.Path, floor: Peer, work: pathlib.Path, args: argparse.Namespace) -> None:
    """Print the throughput table: the peers and the function at each number of workers, taking turns."""
    calls, rounds = args.throughput_calls, args.rounds
    specs = cold_requests(THROUGHPUT_POOLS, calls * rounds)
    # Each round's specs are new to every server; every server gets the same ones.
    paths = [write_requests(work / f"throughput-{r}.bin", specs[r * calls : (r + 1) * calls]) for r in range(rounds)]
    print(
        f"throughput: {THROUGHPUT_POOLS} pools, cold, {calls} calls per round, {THROUGHPUT_IN_FLIGHT} in flight, "
        f"{rounds} rounds each, interleaved"
    )
    with contextlib.ExitStack() as stack:
        peers = [stack.enter_context(serving_peer(peer, which, work)) for which in (TYPED, floor)]
        servers = peers + [stack.enter_context(serving_ours(workers, work)) for workers in args.workers]
        print(
            f"{'server':>24} {'requests/s':>11} {'CPU ms/call':>12} {'PSS MiB':>8} {'a worker':>9} "
            f"{ratio_headers(peers)}"
        )
        runs: dict[str, list[Run]] = {server.name: [] for server in servers}
        for path in paths:
            for server in servers:
                runs[server.name].append(load(peer, server, path, calls, THROUGHPUT_IN_FLIGHT))
        results = [
            (server.name, merged(runs[server.name]), server.pss_mib(), server.worker_pss_mib()) for server in servers
        ]
    peer_rates = [run.per_second for _, run, _, _ in results[: len(peers)]]
    for name, run, pss, worker in results:
        print(
            f"{name:>24} {run.per_second:>11.1f} {run.cpu_ms_per_call:>12.2f} {pss:>8.1f} "
            f"{'-' if worker is None else f'{worker:.1f}':>9} {ratios(run.per_second, peer_rates)}"
        )


READING_CALLS = 300


def reading(args: argparse.Namespace) -> None:
    """Print what reading a new spec costs in this process, beside composing it whole (the module's doc)."""
    calls = 20 if args.smoke else READING_CALLS
    # As served without --debug: a call's debug line is dropped, not written.
    logging.configure(logging.Level.INFO)
    print(f"reading a new spec, in this process: CPU ms per call, the median of {args.rounds} rounds of {calls}")
    print(f"{'pools':>6} {'decode':>8} {'to dicts':>9} {'check':>8} {'reading':>8} {'composing whole':>16}")
    for pools in args.pools:
        specs = cold_requests(pools, calls * args.rounds * 2)
        rounds: dict[str, list[float]] = {"decode": [], "to dicts": [], "check": [], "whole": []}
        for r in range(args.rounds):
            mine = specs[r * 2 * calls : (r * 2 + 1) * calls]
            data = [req.SerializeToString() for req in mine]
            rounds["decode"].append(cpu_ms(fnv1.RunFunctionRequest.FromString, data))
            parsed = [fnv1.RunFunctionRequest.FromString(d) for d in data]
            rounds["to dicts"].append(cpu_ms(lambda req: wire.to_dict(req.observed.composite.resource), parsed))
            composites = [wire.to_dict(req.observed.composite.resource) for req in parsed]
            rounds["check"].append(cpu_ms(lambda xr: FederationSpec.model_validate(xr["spec"]), composites))
            others = [req.SerializeToString() for req in specs[(r * 2 + 1) * calls : (r * 2 + 2) * calls]]
            rounds["whole"].append(cpu_ms(fn.run_bytes, others))
        median = {name: statistics.median(values) for name, values in rounds.items()}
        read = median["decode"] + median["to dicts"] + median["check"]
        print(
            f"{pools:>6} {median['decode']:>8.3f} {median['to dicts']:>9.3f} {median['check']:>8.3f} "
            f"{read:>8.3f} {median['whole']:>16.3f}"
        )


def cpu_ms(call: Any, items: list[Any]) -> float:
    """CPU ms of this process per call of call on each of items."""
    start = time.process_time()
    for item in items:
        call(item)
    return (time.process_time() - start) * 1000 / len(items)


def main() -> int:
    """Check the peers answer as the function does, then print both tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per server, pool count and round")
    parser.add_argument("--rounds", type=int, default=3, help="turns each server takes per pool count")
    parser.add_argument("--throughput-calls", type=int, default=1000, help="calls per server and round of throughput")
    parser.add_argument("--peer", type=pathlib.Path, default=PEER, help="the Go peers' binary (typedgo)")
    parser.add_argument("--smoke", action="store_true", help="1 pool, a few calls: does it run")
    args = parser.parse_args()
    args.pools = POOLS
    args.workers = WORKERS
    if args.smoke:
        args.calls, args.rounds, args.throughput_calls, args.pools = 20, 1, 40, SMOKE_POOLS
    build_peer(args.peer)
    with tempfile.TemporaryDirectory(prefix="bench-vs-go-") as tmp:
        work = pathlib.Path(tmp)
        floor = near_floor(write_answers(work / "answers.bin", variants_needed(args)))
        with contextlib.ExitStack() as stack:
            ours = stack.enter_context(serving_ours("auto", work))
            peers = [stack.enter_context(serving_peer(args.peer, which, work)) for which in (TYPED, floor)]
            for theirs in peers:
                differ = check_same_answers(ours, theirs)
                if differ:
                    print(f"the {theirs.name} peer's answer differs from the function's at {', '.join(differ)}")
                    return 1
            print(
                f"same desired resources, composite status and TTL from each peer at "
                f"{', '.join(map(str, CHECKED_POOLS))} pools"
            )
            latency(args.peer, ours, peers, work, args)
        throughput(args.peer, floor, work, args)
    reading(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
