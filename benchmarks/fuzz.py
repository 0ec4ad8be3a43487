"""The property tests' invariants over many fresh examples: the long run of tests/product/test_properties.py.

    .venv/bin/python benchmarks/fuzz.py --examples 10000 [--flwr-python .cache/flwr/1.41.0/bin/python]
    .venv/bin/python benchmarks/fuzz.py --smoke [--flwr-python ...]

For each invariant it draws --examples inputs (random, unlike the suite's
fixed ones), checks each, and prints examples, failures and seconds; the first
failing inputs are printed whole, to be kept as @example cases in
tests/product/test_properties.py. With --flwr-python, Flower's parser then reads back
every --node-config text the valid examples made (none, at times, in a short
run: it still starts). Exits 1 if anything failed.

--smoke draws 20 examples per invariant, the same on every run (derandomized),
in seconds: it proves the script runs; its figures mean nothing.

The invariants (tests/support/properties.py):
  valid     a spec from the model: refused with one fatal result naming its
            fields, or accepted with schema-valid manifests, the same bytes
            whatever the order of its maps, a status the XRD takes, and
            --node-config text Flower's own parser reads back
  invalid   a spec with one thing broken: one fatal result naming a field of
            the input, nothing desired
  garbled   random JSON where observed state should be: the same desired
            resources, no failure
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from crossplane.function import logging  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402 - after the path is set
from hypothesis import strategies as st  # noqa: E402

from support import properties, strategies  # noqa: E402
from support.nodeconfig import POD_ENV, kubelet_expand  # noqa: E402

SHOWN_FAILURES = 3
# How often a long run says how far it is.
PROGRESS_EVERY = 1000
INVARIANTS = ["valid", "invalid", "garbled"]
SMOKE_EXAMPLES = 20


class Tally:
    """Examples and failures of one invariant."""

    def __init__(self, name: str) -> None:
        """No examples yet."""
        self.name = name
        self.examples = 0
        self.failures: list[tuple[str, Any]] = []
        self.seconds = 0.0
        self.start = time.perf_counter()

    def run(self, check: Callable[..., None], *args: Any) -> None:
        """Check one example; a failed invariant is counted and kept, not raised (no shrinking)."""
        self.examples += 1
        try:
            check(*args)
        except AssertionError as err:
            self.failures.append((str(err)[:500], args[0]))
        if self.examples % PROGRESS_EVERY == 0:
            print(self.figures(time.perf_counter() - self.start), flush=True)

    def figures(self, seconds: float) -> str:
        """Examples, failures and seconds so far."""
        return f"{self.name}: {self.examples} examples, {len(self.failures)} failures, {seconds:.0f}s"


def run_invariants(
    examples: int, flwr_python: str | None, only: list[str], *, derandomize: bool = False
) -> list[Tally]:
    """Draw and check examples of each invariant; then Flower reads back every --node-config text."""
    # Every example runs: no shrinking (a failure is kept as drawn), no database.
    config = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=derandomize,
    )
    valid, invalid, garbled = Tally("valid"), Tally("invalid"), Tally("garbled")
    node_configs: list[tuple[str, dict[str, Any]]] = []
    accepted = [0]

    def check_valid(value: dict[str, Any], rng: random.Random) -> None:
        if properties.fatal_messages(properties.answer(value)):
            properties.check_refused(value)
        else:
            accepted[0] += 1
            node_configs.extend(properties.check_accepted(value, rng))

    @config
    @given(strategies.specs(), st.randoms(use_true_random=False))
    def draw_valid(value: dict[str, Any], rng: random.Random) -> None:
        valid.run(check_valid, value, rng)

    @config
    @given(strategies.invalid_specs())
    def draw_invalid(broken: strategies.Broken) -> None:
        invalid.run(lambda b: properties.check_refused(b.spec), broken)

    @config
    @given(
        strategies.specs(),
        st.lists(strategies.json_values, min_size=1, max_size=4),
        st.lists(st.integers(0, 3), min_size=1, max_size=4),
    )
    def draw_garbled(value: dict[str, Any], noise: list[Any], where: list[int]) -> None:
        garbled.run(properties.check_garbled_observed, value, noise, where)

    chosen = [
        (t, d) for t, d in ((valid, draw_valid), (invalid, draw_invalid), (garbled, draw_garbled)) if t.name in only
    ]
    for tally, draw in chosen:
        tally.start = time.perf_counter()
        draw()
        tally.seconds = time.perf_counter() - tally.start
        print(tally.figures(tally.seconds), "(done)", flush=True)
    if valid.examples:
        print(f"valid: {accepted[0]} of {valid.examples} accepted; {len(node_configs)} --node-config texts")
    if flwr_python:
        return [*(t for t, _ in chosen), read_back(node_configs, flwr_python)]
    return [t for t, _ in chosen]


def read_back(node_configs: list[tuple[str, dict[str, Any]]], flwr_python: str) -> Tally:
    """Flower's own parser on every --node-config text: its literal entries must come back as typed."""
    start = time.perf_counter()
    texts = [kubelet_expand(text, POD_ENV) for text, _ in node_configs]
    proc = subprocess.run(  # noqa: S603 - the Flower python the user named, on our own script
        [flwr_python, str(ROOT / "tests" / "support" / "flower_parse.py")],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    readback = Tally("flower-readback")
    for (text, literal), got in zip(node_configs, json.loads(proc.stdout), strict=True):
        readback.examples += 1
        read = got.get("ok")
        if read is None or any(read.get(k, not v) != v or type(read[k]) is not type(v) for k, v in literal.items()):
            readback.failures.append((f"Flower read {got}, expected {literal}", text))
    readback.seconds = time.perf_counter() - start
    print(f"{readback.name}: {readback.examples} texts, {len(readback.failures)} failures, {readback.seconds:.0f}s")
    return readback


def main() -> int:
    """Run, print the figures and the first failures; 1 if any invariant failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10000, help="examples per invariant")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_EXAMPLES} examples per invariant, the same every run: does it run",
    )
    parser.add_argument("--flwr-python", help="a Flower virtualenv's python, to read --node-config back")
    parser.add_argument(
        "--only", action="append", choices=INVARIANTS, help="run this invariant (repeatable); all by default"
    )
    args = parser.parse_args()
    # The function logs only its own failures (a traceback each): those are what to look at.
    logging.configure(level=logging.Level.INFO)
    examples = SMOKE_EXAMPLES if args.smoke else args.examples
    tallies = run_invariants(examples, args.flwr_python, args.only or INVARIANTS, derandomize=args.smoke)
    failed = False
    for tally in tallies:
        for message, value in tally.failures[:SHOWN_FAILURES]:
            failed = True
            print(f"\n{tally.name} failed: {message}\n  input: {json.dumps(value, default=repr)[:2000]}")
        failed = failed or bool(tally.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
