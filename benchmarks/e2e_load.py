"""Load on the real control plane: many Federations applied at once.

Starts the e2e control plane (newest supported Kubernetes), applies N
Federations of P pools in one `kubectl apply`, and prints the time until all
are Ready, the function's CPU seconds and peak RSS, and the errors in
Crossplane's log. Needs `make e2e-tools package` (and root).

    .venv/bin/python benchmarks/e2e_load.py [--federations 50] [--pools 4]

--smoke applies 2 Federations of 1 pool: it proves the script runs (the
control plane's start takes most of its time); its figures mean nothing.
--dry-run needs no control plane: it sets up the run (the control plane's
settings, the Federations) and prints what it would apply, starting nothing.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests")]

from controlplane import ControlPlane, Tools, condition, running  # noqa: E402 - needs the sys.path set-up above
from support.helpers import BASE, spec  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SMOKE_FEDERATIONS, SMOKE_POOLS = 2, 1


def federation(index: int, pools: int) -> dict:
    """The index-th namespaced Federation of the load, with pools StatefulSet pools."""
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": f"load-{index:03d}", "namespace": "default"},
        "spec": spec(BASE, supernodes__pools=[{"name": f"pool-{p}", "replicas": 1} for p in range(pools)]),
    }


def cpu_seconds(pid: int) -> float:
    """CPU time a process has used so far, user and system."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def peak_rss_mib(pid: int) -> float:
    """A process' peak resident memory (VmHWM)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    """Apply the Federations at once on a real control plane; time them to Ready, report the cost."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--federations", type=int, default=50)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_FEDERATIONS} Federations of {SMOKE_POOLS} pool: does it run (still needs the control plane)",
    )
    parser.add_argument("--dry-run", action="store_true", help="set the run up and say what it would apply; no cluster")
    args = parser.parse_args()
    if args.smoke:
        args.federations, args.pools = SMOKE_FEDERATIONS, SMOKE_POOLS
    minor = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools").glob("kube-1.*")),
                   key=lambda m: int(m.split(".")[1]))[-1]  # fmt: skip
    plane = ControlPlane(
        tools=Tools(ROOT / ".cache" / "e2e", minor, str(ROOT / ".cache" / "bin" / "crank")),
        workdir=ROOT / ".cache" / "e2e-load" / minor,
        package=ROOT / ".cache" / "package" / "function-flower.xpkg",
        configuration=ROOT / ".cache" / "package" / "configuration-flower.xpkg",
        function_manifest=ROOT / "examples" / "install" / "function.yaml",
        configuration_manifest=ROOT / "examples" / "install" / "configuration.yaml",
    )
    docs = [federation(i, args.pools) for i in range(args.federations)]
    if args.dry_run:
        print(f"kubernetes {minor}: would apply {len(docs)} Federations x {args.pools} pools at once")
        print(f"control plane in {plane.workdir}, function package {plane.package}")
        return
    with running(plane):
        pid = plane.processes["function"].popen.pid
        cpu_before = cpu_seconds(pid)
        crossplane_log = plane.processes["crossplane"].log
        log_offset = crossplane_log.stat().st_size
        start = time.monotonic()
        plane.hub.apply(*docs)
        ready_at: dict[str, float] = {}
        while len(ready_at) < len(docs) and time.monotonic() - start < args.timeout:
            for claim in plane.hub.get("federations.flower.crossplane.io", namespace="default"):
                name = claim["metadata"]["name"]
                if name not in ready_at and condition(claim, "Ready").get("status") == "True":
                    ready_at[name] = time.monotonic() - start
            time.sleep(2)
        cpu = cpu_seconds(pid) - cpu_before
        rss = peak_rss_mib(pid)
        with crossplane_log.open(errors="replace") as f:
            f.seek(log_offset)
            errors = [line for line in f if '"level":"error"' in line]
    times = sorted(ready_at.values())
    print(f"kubernetes {minor}: {args.federations} Federations x {args.pools} pools applied at once")
    print(f"ready: {len(times)}/{len(docs)}")
    if times:
        print(f"first ready {times[0]:.1f} s, median {times[len(times) // 2]:.1f} s, all ready {times[-1]:.1f} s")
    print(f"function CPU {cpu:.1f} s, peak RSS {rss:.1f} MiB")
    print(f"Crossplane log errors: {len(errors)}")
    for line in errors[:5]:
        print("  " + line.strip()[:300])
    if len(times) < len(docs):
        sys.exit(1)


if __name__ == "__main__":
    main()
