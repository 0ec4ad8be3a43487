#!/usr/bin/env python3
"""Run `make test`'s stages side by side, and say where the time went.

The suite is mostly waiting (controllers, pods, Flower's retries) on a
2-core machine, so stages that do not need each other run at once: the Go
builds of the control plane while the unit tests run, the two control planes
(one per Kubernetes minor) side by side, each with its own clusters, registry,
network namespace and work directory. A stage starts when the stages it needs
have passed; one that fails stops only the stages that need it.

Each stage writes its output to `.cache/stages/<name>.log`. When it ends,
this prints its wall time and the CPU time its processes used, and its log: whole for a test run or a failure,
the last lines otherwise. It closes with a table of every stage's time, one
line counting the tests of every pytest stage and, when something failed,
the failed tests by name (or a failed build's last lines), and exits
non-zero when a stage failed or did not run.

Usage: hack/stages.py [GOAL ...]   (default: test; see STAGES for the names)
Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOGS = ROOT / ".cache" / "stages"
TAIL = 15  # lines of a passed build stage's log worth showing
FAILURE_TAIL = 5  # lines of a failed stage's log that say why, when it names no failed test
FAILURE_WIDTH = 400  # a failed test's line, cut: its first lines of error are enough to tell one from another
MAKE = os.environ.get("MAKE", "make")


def newest_python() -> str:
    """The newest Python minor pyproject.toml's requires-python admits (`<3.14`: 3.13)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    below = re.search(r"<\s*3\.(\d+)", project["requires-python"])
    if below is None:
        sys.exit(f"pyproject.toml: requires-python {project['requires-python']!r} names no upper bound (<3.N)")
    return f"3.{int(below.group(1)) - 1}"


def _kube_minors() -> list[str]:
    """The control planes the e2e runs: one per pinned tools/kube-1.NN."""
    minors = [p.name.removeprefix("kube-") for p in (ROOT / "tools").glob("kube-1.*")]
    return sorted(minors, key=lambda m: int(m.split(".")[1]))


@dataclasses.dataclass
class Stage:
    """One step of the suite: a command, the stages it needs, and how it went."""

    name: str
    command: list[str]
    needs: tuple[str, ...] = ()
    # Stages it starts after, whatever became of them, when they are part of the run (not pulled in
    # as needs are): to take the cores they held.
    after: tuple[str, ...] = ()
    pytest: bool = False  # its log ends with pytest's summary, counted at the end
    # Runs behind the stages on the critical path (the Go builds and the
    # control planes), taking the cores they leave idle.
    nice: int = 0
    nice_now: int = dataclasses.field(init=False)  # its weight now: a stage waiting for it alone lends it its own
    state: str = "waiting"  # waiting, running, passed, failed, not run
    seconds: float = 0.0
    cpu_seconds: float | None = None  # CPU time of its whole process tree, when it could be counted

    def __post_init__(self) -> None:
        """Its weight starts as its own."""
        self.nice_now = self.nice

    @property
    def log(self) -> pathlib.Path:
        """Where the stage's output goes."""
        return LOGS / f"{self.name}.log"


def stages() -> dict[str, Stage]:
    """Every stage of `make test`, by name, with what each needs."""
    minors = _kube_minors()
    # Newest first: its control plane starts while the oldest still compiles.
    kube = [
        Stage(f"go-kube-{m}", [MAKE, "--no-print-directory", f"e2e-tools-kube-{m}"], nice=0 if i == 0 else 5)
        for i, m in enumerate(reversed(minors))
    ]
    # kubectl comes with the newest minor's control plane. The control planes run side by side:
    # one alone takes 23 minutes of mostly waiting on controllers (measured alone: 23m38s), so
    # one after the other made the e2e the suite's critical path at 46 minutes. (Side by side
    # they once drove the load average to 12, when each read was a kubectl process, every
    # Object's status was written every 15 s and the collector ran at Go's default rate.)
    # A little behind the real Flower processes, which then are the longest stage: at equal
    # weight, the two planes left unit-flower 11 of its 64 tests done when they ended (26m40s,
    # 8be5a4f), and it ran alone for 17 minutes more on the cores they had left.
    e2e = []
    for m in reversed(minors):
        needs = ("venv", "go-e2e", *sorted({f"go-kube-{m}", f"go-kube-{minors[-1]}"}), "package")
        # The newest runs the quick start as real Flower processes (test_the_quickstart_completes_a_flwr_run).
        needs += ("flower-venv-newest",) if m == minors[-1] else ()
        e2e.append(Stage(f"e2e-{m}", [MAKE, "--no-print-directory", "e2e-run", f"E2E_MINOR={m}"], needs=needs,
                         pytest=True, nice=2))  # fmt: skip
    podrunner = [MAKE, "--no-print-directory", "unit-run", "UNIT_MARKS=podrunner", "UNIT_WORKERS=0"]
    table = [
        Stage("venv", [MAKE, "--no-print-directory", ".venv/.installed"]),
        # Only the unit stages need them, and those start once the control planes' builds
        # are done: behind the builds, not beside them (cold, -j3 pip installs at nice 0
        # took as much CPU as the critical path for their first eight minutes). Once those
        # builds are done, unit-flower lends them its weight (Runner._inherit).
        Stage(
            "flower-venvs",
            [MAKE, "--no-print-directory", "-j3", "flower-venvs"],
            needs=("venv", "flower-venv-newest"),
            nice=10,
        ),
        # The one the newest control plane's e2e needs, first: flower-venvs then has it.
        Stage("flower-venv-newest", [MAKE, "--no-print-directory", "flower-venv-newest"], needs=("venv",), nice=10),
        # The critical path: the control plane's binaries, then the e2e. The
        # Crossplane CLI first: Crossplane core and crane (go-e2e, a module of
        # their own on the same library releases) and the unit suite's tools
        # build on what it compiled, where building them at once would compile
        # the same packages twice.
        *kube,
        Stage("crank", [MAKE, "--no-print-directory", ".cache/bin/crank"]),
        Stage("go-e2e", [MAKE, "--no-print-directory", "e2e-tools-common"], needs=("crank",)),
        Stage("go-unit", [MAKE, "--no-print-directory", "unit-tools-own"], needs=("crank",), nice=5),
        # The judges built from the control planes' modules (CRD validation, Pod
        # Security, NetworkPolicy): after those, they compile little but their own code.
        Stage("go-unit-kube", [MAKE, "--no-print-directory", "unit-tools-kube"], needs=tuple(k.name for k in kube)),
        Stage("lint", [MAKE, "--no-print-directory", "lint"], needs=("venv",), nice=10),
        Stage("package", [MAKE, "--no-print-directory", "package"], needs=("venv", "crank")),
        # The real Flower processes: most of the unit suite's time, spent waiting;
        # they need no Go tool, but start once the control planes' builds are done:
        # measured cold, running them beside those builds (the critical path) slowed
        # go-kube-1.35 from 12m48s to 16m12s and started the 1.30 plane 9 minutes later.
        # Then they share the CPU evenly with the control plane: they wait on Flower's
        # timeouts, and at a fifth of its weight two of them timed out (warm, 0ab59a5).
        # One at a time but for SECOND_LANE's: three at a time (each pod runner in a lane of its
        # own) took 28 CPU minutes in 35 and timed out seven tests whose SuperNodes could not come
        # online in time (warm, f937252).
        Stage(
            "unit-flower",
            [*podrunner, f"PYTEST_ARGS={' '.join(f'--deselect {t}' for t in (*SECOND_LANE, *LATE_LANE))}"],
            needs=("venv", "flower-venvs", *(k.name for k in kube)),
            pytest=True,
        ),
        Stage(
            "unit-flower-identities",
            [*podrunner, f"PYTEST_ARGS={' '.join(SECOND_LANE)}"],
            needs=("venv", "flower-venvs", *(k.name for k in kube)),
            pytest=True,
        ),
        # A third lane, once the oldest minor's control plane is done with the cores it took: a third
        # lane from the start timed tests out (above); the two lanes ran 45 and 47 minutes, the
        # suite's end, with that plane done at 29 to 31 (warm, fresh clones of 77ec9fe and 0f8c12c).
        Stage(
            "unit-flower-late",
            [*podrunner, f"PYTEST_ARGS={' '.join(LATE_LANE)}"],
            needs=("venv", "flower-venvs", *(k.name for k in kube)),
            after=(f"e2e-{minors[0]}",),
            pytest=True,
        ),
        Stage(
            "unit",
            [MAKE, "--no-print-directory", "unit-run", "UNIT_MARKS=not podrunner"],
            needs=("venv", "flower-venvs", "go-unit", "go-unit-kube"),
            pytest=True,
            # Full weight, as the newest Python's lane below: about 5 CPU minutes, and at nice 10 a
            # server test's own 300 s ran out (tests/serving/test_shutdown.py, fresh-clone CI).
        ),
        # The function on the newest Python it supports: the unit tests that need no peer (no
        # Go tool, Flower process or virtualenv; every other lane runs on the venv's Python), in
        # a venv of its own. It needs `python3.X` to run (not only a pyenv shim for it): in CI
        # its absence fails the stage (Makefile, unit-py). Full weight although nothing waits on
        # it: it takes under 3 CPU minutes, and at nice 10 beside both control planes it got so
        # little of the cores that its tests' own timeouts ran out (a `function render` of 60 s,
        # a server's shutdown of 300 s, in a fresh-clone CI).
        Stage(
            f"unit-py{newest_python()}",
            [MAKE, "--no-print-directory", "unit-py", f"PY=python{newest_python()}"],
            needs=("venv",),
            pytest=True,
        ),
        *e2e,
    ]
    return {s.name: s for s in table}


# The real-Flower tests (marked podrunner) of a second lane beside `unit-flower`, by pytest node id
# prefix; `unit-flower` runs every other one. Warm, `unit-flower` was the last stage (24m15s, the
# run 26m34s, 35 CPU minutes on two cores: a core mostly idle); these two tests were 7 of its 24
# minutes, most of it waiting on the registrar's interval and the grace periods they test.
SECOND_LANE = (
    "tests/real/test_real_node_auth.py::test_statefulset_identities_join_once_published_and_are_never_locked_out",
    # Two minutes cold, most of them the grace periods it waits out: unit-flower, the last stage,
    # ended at 47m08s of a cold run with it (this lane at 27m11s).
    "tests/real/test_real_node_auth.py::test_keys_in_a_groups_shard_register_and_a_missing_shard_locks_no_one_out",
    # The Fleet proxy from the attacker's seat and a model larger than its body cap: about 90 s on
    # a calm machine, new in this release; here rather than on unit-flower, the last stage.
    "tests/real/test_real_fleet_edge.py",
    # A publication naming another's node, from a pool pod's seat: about two minutes, mostly the grace period.
    "tests/real/test_real_node_auth.py::test_a_publication_naming_anothers_node_acts_on_no_node_but_its_own",
    # FederationRuns started by the SuperLink's runner: the runner on its own against real Flower, then
    # runs as objects through rendered pods; new in this release, a few Flower runs each.
    "tests/real/test_real_runs.py",
    "tests/real/test_real_runs_as_objects.py",
)

# The real-Flower tests of the lane that starts once the oldest control plane is done (unit-flower-late):
# about 11 of unit-flower's 47 minutes, under that load (warm, 0f8c12c).
LATE_LANE = (
    # One SuperNode per node with node authentication, on the oldest, an HTTP and the newest release:
    # 163, 249 and 236 s, most of it the registrar's interval.
    "tests/real/test_real_node_auth.py::test_daemonset_identities_one_per_node",
    # A Flower upgrade (1.41 -> 1.42) rolled pod by pod under a live federation with node authentication,
    # a run on the new release and the downgrade's SuperLink refused by its own state: 301 s under load,
    # from the second lane, which ended at 45 minutes.
    "tests/real/test_real_upgrade.py",
)

GOALS = {
    "test": None,  # every stage
    "unit": ("lint", "unit", "unit-flower", "unit-flower-identities", "unit-flower-late", f"unit-py{newest_python()}"),
    "e2e": tuple(f"e2e-{m}" for m in _kube_minors()),
}


def wanted(table: dict[str, Stage], goals: list[str]) -> dict[str, Stage]:
    """The stages the goals name, with everything they need."""
    names: list[str] = []
    for goal in goals:
        if goal in GOALS:
            names += list(GOALS[goal] or table)
        elif goal in table:
            names.append(goal)
        else:
            sys.exit(f"unknown stage or goal {goal!r}: one of {', '.join([*GOALS, *table])}")
    keep: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo += table[name].needs
    return {n: s for n, s in table.items() if n in keep}


def clock(seconds: float) -> str:
    """Seconds as 12m05s."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


# The scheduler's weight of a nice value (the kernel's sched_prio_to_weight), for a cgroup's CPU share.
NICE_WEIGHT = {0: 1024, 1: 820, 2: 655, 3: 526, 4: 423, 5: 335, 6: 272, 7: 215, 8: 172, 9: 137, 10: 110}


class CpuShares:
    """Each stage's processes in a CPU cgroup of its own, weighted as the stage's nice value.

    nice alone does not hold: with the kernel's autogroup on (a common default), every
    session is scheduled as one group, all groups with the same weight, and nice orders
    processes only inside their session. KWOK's components and each pod runner container
    start sessions of their own, so, measured cold, seven Flower processes of the unit
    stages (nice 5) took as much CPU as the control plane's API server (nice 0), and the
    control plane, the critical path, ran at half speed. A cgroup holds a stage's whole
    process tree, new sessions included, and autogroup does not apply inside one.

    Needs a writable CPU controller (root, cgroup v1 or v2); without one, stages keep nice
    and their own session's autogroup weight. The same groups count each stage's CPU time
    (v1: cpuacct, a hierarchy of its own), whatever its processes did with their sessions.
    """

    def __init__(self) -> None:
        """Make this run's parent group, or note that there is none to make."""
        self.parent: pathlib.Path | None = None
        self.accounting: pathlib.Path | None = None  # cgroup v1: CPU time is counted in a hierarchy of its own
        self.knob = ""
        v1, v2 = pathlib.Path("/sys/fs/cgroup/cpu"), pathlib.Path("/sys/fs/cgroup")
        try:
            if (v1 / "cpu.shares").exists():
                self.parent, self.knob = v1 / f"flower-stages-{os.getpid()}", "cpu.shares"
                self.parent.mkdir()
                with contextlib.suppress(OSError):
                    accounting = pathlib.Path("/sys/fs/cgroup/cpuacct") / self.parent.name
                    accounting.mkdir()
                    self.accounting = accounting
            elif "cpu" in (v2 / "cgroup.controllers").read_text().split():
                (v2 / "cgroup.subtree_control").write_text("+cpu")
                self.parent, self.knob = v2 / f"flower-stages-{os.getpid()}", "cpu.weight"
                self.parent.mkdir()
                (self.parent / "cgroup.subtree_control").write_text("+cpu")
        except OSError:
            self.parent = None

    def group(self, stage: Stage) -> pathlib.Path | None:
        """The stage's group, weighted; None when there is no CPU controller to use."""
        if self.parent is None:
            return None
        # Its weight now: one lent before its process started (Runner._inherit) stays.
        return self.parent / stage.name if self.weigh(stage, stage.nice_now) else None

    def weigh(self, stage: Stage, nice: int) -> bool:
        """Give the stage's group (made if need be) the weight of this nice value; False without one."""
        if self.parent is None:
            return False
        weight = NICE_WEIGHT[min(max(nice, 0), 10)]
        path = self.parent / stage.name
        try:
            path.mkdir(exist_ok=True)
            # cgroup v2's cpu.weight is on a scale of 100 where v1's cpu.shares is on one of 1024.
            (path / self.knob).write_text(str(weight if self.knob == "cpu.shares" else max(1, weight * 100 // 1024)))
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Remove the groups that emptied (one with a process left over stays, harmless)."""
        for parent in (self.parent, self.accounting):
            if parent is not None:
                for path in [*parent.iterdir(), parent]:
                    if path.is_dir():
                        with contextlib.suppress(OSError):
                            path.rmdir()

    def accounting_group(self, stage: Stage) -> pathlib.Path | None:
        """The stage's cgroup v1 CPU accounting group (v2 counts in the weighted group)."""
        if self.accounting is None:
            return None
        path = self.accounting / stage.name
        try:
            path.mkdir(exist_ok=True)
        except OSError:
            return None
        return path

    def used(self, stage: Stage) -> float | None:
        """The CPU seconds the stage's processes used, daemons and orphans included; None if not counted."""
        with contextlib.suppress(OSError, ValueError):
            if self.accounting is not None:
                return int((self.accounting / stage.name / "cpuacct.usage").read_text()) / 1e9
            if self.knob == "cpu.weight" and self.parent is not None:
                for line in (self.parent / stage.name / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
        return None


def _enter(groups: list[pathlib.Path | None], nice: int) -> Callable[[], None]:
    """What a stage's process does before it runs its command: join its groups, take its nice value."""

    def enter() -> None:
        for group in groups:
            if group is not None:
                (group / "cgroup.procs").write_text(str(os.getpid()))
        if nice:
            os.nice(nice)

    return enter


class Runner:
    """Starts each stage once the stages it needs have passed."""

    def __init__(self, table: dict[str, Stage]) -> None:
        """The stages to run, by name."""
        self.table = table
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.cpu = CpuShares()

    def say(self, text: str) -> None:
        """A line of the report, stamped with the time since the start."""
        print(f"[{clock(time.monotonic() - self.start)}] {text}", flush=True)

    def run(self) -> int:
        """Run every stage; the exit code: 0 when all passed."""
        LOGS.mkdir(parents=True, exist_ok=True)
        with self.changed:
            while True:
                for stage in self.table.values():
                    if stage.state != "waiting":
                        continue
                    needs = [self.table[n] for n in stage.needs]
                    if any(n.state in ("failed", "not run") for n in needs):
                        stage.state = "not run"
                        self.say(f"{stage.name}: not run ({', '.join(n.name for n in needs if n.state != 'passed')})")
                    elif all(n.state == "passed" for n in needs) and self._after_done(stage):
                        stage.state = "running"
                        threading.Thread(target=self._run, args=(stage,), daemon=True).start()
                self._inherit()
                if all(s.state in ("passed", "failed", "not run") for s in self.table.values()):
                    break
                self.changed.wait()
        self.cpu.close()
        return self.report()

    def _after_done(self, stage: Stage) -> bool:
        """Whether the stages it starts after, those of this run, have ended (passed, failed or not run)."""
        return all(self.table[n].state in ("passed", "failed", "not run") for n in stage.after if n in self.table)

    def _inherit(self) -> None:
        """Run what a stage still waits for at that stage's weight, once nothing else holds it back.

        Priority inheritance: a stage set behind the others (flower-venvs, nice 10) can become all
        a stage in front (unit-flower, the longest) still waits for. Warm, the builds end in two
        minutes and flower-venvs, behind both control planes, then took 7m49s for 1m55s of CPU
        while the longest stage waited. One stage alone, not all a waiting stage needs: cold,
        unit-flower needs both control planes' builds from the start, and lending the 1.30 build
        its weight then slowed the 1.35 build and Crossplane's, and both planes started 16 minutes
        later. Only with CPU groups: a running process tree's nice values are not changed.
        """
        for stage in self.table.values():
            if stage.state != "waiting":
                continue
            pending = [self.table[n] for n in stage.needs if self.table[n].state != "passed"]
            if len(pending) == 1 and (need := pending[0]).state == "running":
                if stage.nice < need.nice_now and self.cpu.weigh(need, stage.nice):
                    need.nice_now = stage.nice
                    self.say(f"{need.name}: at {stage.name}'s weight (nice {stage.nice}), all it waits for")

    def _run(self, stage: Stage) -> None:
        with self.lock:  # one line at a time: stages start together
            self.say(f"{stage.name}: started ({' '.join(stage.command[0:1] + stage.command[2:])})")
        began = time.monotonic()
        with stage.log.open("w") as log:
            proc = subprocess.Popen(
                stage.command,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # The child only writes its pid to cgroup files and calls nice(2): no lock a thread could hold.
                preexec_fn=_enter([self.cpu.group(stage), self.cpu.accounting_group(stage)], stage.nice),  # noqa: PLW1509
            )
            # wait4: the CPU time of the command and of the descendants it waited for, where no cgroup counts it.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        stage.seconds = time.monotonic() - began
        counted = self.cpu.used(stage)
        stage.cpu_seconds = counted if counted is not None else usage.ru_utime + usage.ru_stime
        with self.changed:
            stage.state = "passed" if proc.returncode == 0 else "failed"
            self.say(f"{stage.name}: {stage.state} in {clock(stage.seconds)}, CPU {clock(stage.cpu_seconds)}" +
                     ("" if proc.returncode == 0 else f" (exit {proc.returncode})"))  # fmt: skip
            self._show(stage)
            self.changed.notify_all()

    def _show(self, stage: Stage) -> None:
        lines = stage.log.read_text(errors="replace").splitlines()
        if stage.state == "passed" and not stage.pytest:
            lines = lines[-TAIL:]
        for line in lines:
            print(f"  {stage.name} | {line}")
        sys.stdout.flush()

    def report(self) -> int:
        """Each stage's time and the tests counted; the exit code."""
        # CPU next to wall time: a stage far below its wall time in CPU waits (on controllers, on Flower's
        # timeouts), one near twice its wall time holds both cores.
        width = max(len(name) for name in self.table)
        print(f"\nstage times:\n  {'stage':<{width}} {'state':<8} {'wall':>8} {'CPU':>8}")
        for s in self.table.values():
            cpu = clock(s.cpu_seconds) if s.cpu_seconds is not None else "-"
            print(f"  {s.name:<{width}} {s.state:<8} {clock(s.seconds) if s.seconds else '-':>8} {cpu:>8}")
        used = sum(s.cpu_seconds or 0 for s in self.table.values())
        print(f"  {'total':<{width}} {'':<8} {clock(time.monotonic() - self.start):>8} {clock(used):>8}")
        counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
        for s in self.table.values():
            if s.pytest and s.log.exists():
                counts = _add(counts, _pytest_counts(s.log.read_text(errors="replace")))
        failed = counts["failed"] + counts["error"]
        ok = all(s.state == "passed" for s in self.table.values())
        if any(s.pytest for s in self.table.values()):
            print(f"tests: {counts['passed']} passed, {failed} failed, {counts['skipped']} skipped")
        # Last, so that a report cut to its tail still names what failed.
        broken = [(s.name, line) for s in self.table.values() if s.state == "failed" for line in _failures(s)]
        if broken:
            print("what failed (each stage's whole log is above and in .cache/stages/):")
            for name, line in broken:
                print(f"  {name}: {line[:FAILURE_WIDTH]}")
        return 0 if ok and not failed else 1


def _failures(stage: Stage) -> list[str]:
    """What a failed stage says went wrong: pytest's FAILED and ERROR lines, else its log's last lines."""
    lines = stage.log.read_text(errors="replace").splitlines() if stage.log.exists() else []
    named = [line for line in lines if re.match(r"^(FAILED|ERROR) ", line)]
    return named or lines[-FAILURE_TAIL:]


def _pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("== 3 passed, 1 skipped in 2.0s ==")."""
    summary = [line for line in text.splitlines() if re.match(r"^=+ .*\b(passed|failed|error|skipped)", line)]
    counts: dict[str, int] = {}
    if summary:
        for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary[-1]):
            key = "error" if word.startswith("error") else word
            counts[key] = counts.get(key, 0) + int(number)
    return counts


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a}


if __name__ == "__main__":
    sys.exit(Runner(wanted(stages(), sys.argv[1:] or ["test"])).run())
