"""hack/stages.py: `make test`'s stages, side by side, in the order their needs give."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from support.peers import hack_module

stages = hack_module("stages")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def logs(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "LOGS", tmp_path / "logs")
    return tmp_path


def test_a_stage_starts_after_what_it_needs_and_a_failure_stops_only_its_dependents(logs, capsys):
    marker = logs / "built"
    table = {
        s.name: s
        for s in [
            stages.Stage(
                "build", python(f"import time, pathlib; time.sleep(0.5); pathlib.Path({str(marker)!r}).touch()")
            ),
            stages.Stage(
                "use",
                python(f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(marker)!r}).exists() else 3)"),
                needs=("build",),
            ),
            stages.Stage("broken", python("import sys; print('what broke'); sys.exit(4)")),
            stages.Stage("after-broken", python("pass"), needs=("broken",)),
            stages.Stage("independent", python("pass")),
        ]
    }
    assert stages.Runner(table).run() == 1
    assert {n: s.state for n, s in table.items()} == {
        "build": "passed",
        "use": "passed",  # exit 3 had it started before build ended
        "broken": "failed",
        "after-broken": "not run",
        "independent": "passed",
    }
    out = capsys.readouterr().out
    assert "broken: failed in" in out
    assert "(exit 4)" in out
    assert "  broken | what broke" in out, "a failed stage's log is shown"
    assert "after-broken: not run (broken)" in out


@pytest.mark.usefixtures("logs")
def test_all_passed_is_exit_zero_and_the_tests_of_pytest_stages_are_counted(capsys):
    summary = "print('== 3 passed, 2 skipped in 1.0s ==')"
    table = {
        "a": stages.Stage("a", python(summary), pytest=True),
        "b": stages.Stage("b", python("print('== 4 passed in 2.0s ==')"), pytest=True, needs=("a",)),
        "c": stages.Stage("c", python("pass")),
    }
    assert stages.Runner(table).run() == 0
    assert capsys.readouterr().out.splitlines()[-1] == "tests: 7 passed, 0 failed, 2 skipped"


@pytest.mark.usefixtures("logs")
def test_a_failed_test_fails_the_run_even_when_pytest_exits_zero(capsys):
    table = {"a": stages.Stage("a", python("print('== 1 failed, 3 passed in 1.0s ==')"), pytest=True)}
    assert stages.Runner(table).run() == 1
    assert capsys.readouterr().out.splitlines()[-1] == "tests: 3 passed, 1 failed, 0 skipped"


@pytest.mark.usefixtures("logs")
def test_the_report_ends_with_what_failed(capsys):
    # CI shows a report's tail: the failed tests' names must be in it, not only far above.
    long = "FAILED t.py::test_one - AssertionError: " + "x" * 1000
    failed_tests = "\n".join([long, "ERROR t.py::test_two", "== 1 failed, 1 error, 5 passed in 1.0s ==",
                              "make: *** [e2e-run] Error 1"])  # fmt: skip
    table = {
        "e2e": stages.Stage("e2e", python(f"import sys; print({failed_tests!r}); sys.exit(2)"), pytest=True),
        "build": stages.Stage("build", python("import sys; print('\\n'.join(map(str, range(20)))); sys.exit(1)")),
        "fine": stages.Stage("fine", python("print('FAILED is a word it may print')")),
    }
    assert stages.Runner(table).run() == 1
    tail = capsys.readouterr().out.splitlines()[-9:]
    assert tail[0] == "tests: 5 passed, 2 failed, 0 skipped"
    assert tail[1].startswith("what failed")
    assert tail[2:] == [f"  e2e: {long[: stages.FAILURE_WIDTH]}", "  e2e: ERROR t.py::test_two",
                        *(f"  build: {n}" for n in range(15, 20))]  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "text", "counts"),
    [
        ("passed and skipped", "..\n===== 12 passed, 3 skipped in 4.2s =====\n", {"passed": 12, "skipped": 3}),
        (
            "failures and errors both count as failed",
            "== 1 failed, 2 passed, 1 error in 3s ==",
            {"failed": 1, "passed": 2, "error": 1},
        ),
        (
            "the last summary wins (a nested pytest's output may come first)",
            "== 9 passed in 1s ==\nmore\n== 2 passed in 3s ==",
            {"passed": 2},
        ),
        ("no summary: a crash before the end counts nothing", "Traceback ...", {}),
    ],
)
def test_pytest_counts(reason, text, counts):
    assert stages._pytest_counts(text) == counts, reason


def test_wanted_adds_what_the_goals_need_and_refuses_an_unknown_one():
    table = stages.stages()
    e2e = stages.wanted(table, ["e2e"])
    assert {"venv", "crank", "package", "go-e2e"} <= set(e2e)
    assert not {"unit", "go-unit", "go-unit-kube", "lint", "flower-venvs"} & set(e2e), (
        "the e2e alone builds no unit tools"
    )
    assert "flower-venv-newest" in e2e, "the quick start's flwr run on the newest control plane"
    assert set(stages.wanted(table, ["test"])) == set(table)
    with pytest.raises(SystemExit, match="unknown stage or goal 'nope'"):
        stages.wanted(table, ["nope"])


def test_every_control_plane_waits_for_its_own_minor_and_kubectl():
    table = stages.stages()
    minors = stages._kube_minors()
    assert len(minors) >= 2
    for minor in minors:
        needs = table[f"e2e-{minor}"].needs
        assert f"go-kube-{minor}" in needs
        assert f"go-kube-{minors[-1]}" in needs, "kubectl is built with the newest minor"
    for stage in table.values():
        assert set(stage.needs) <= set(table), stage.name
    # The control planes side by side (one after the other, they were the critical path), a little
    # behind the real Flower processes, the longest stage beside them.
    for minor in minors:
        assert not any(n.startswith("e2e-") for n in table[f"e2e-{minor}"].needs), minor
        assert table[f"e2e-{minor}"].nice > table["unit-flower"].nice, minor
    # Real Flower processes beside the control planes' cold builds made those builds, the critical path, slower.
    assert {f"go-kube-{m}" for m in minors} <= set(table["unit-flower"].needs)
    # The judges built from the control planes' modules wait for those, to reuse their compiled packages.
    assert {f"go-kube-{m}" for m in minors} <= set(table["go-unit-kube"].needs)
    assert "go-unit-kube" in table["unit"].needs


def _lane(stage) -> set[str]:
    """The test ids a real-Flower stage runs: its command's pytest arguments, collected for real."""
    args = next(a.removeprefix("PYTEST_ARGS=") for a in stage.command if a.startswith("PYTEST_ARGS="))
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--ignore=tests/e2e",
            "-m", "podrunner", *args.split()]  # fmt: skip
    out = subprocess.run(argv, cwd=stages.ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    return {line for line in out.splitlines() if "::" in line}


def test_every_real_flower_test_runs_in_exactly_one_stage():
    table = stages.stages()
    lanes = [_lane(table[name]) for name in ("unit-flower", "unit-flower-identities", "unit-flower-late")]
    assert all(lanes), "a stage that selects nothing"
    for i, lane in enumerate(lanes):
        for other in lanes[i + 1 :]:
            assert not lane & other, sorted(lane & other)
    assert set().union(*lanes) == _lane(stages.Stage("all", ["PYTEST_ARGS="]))
    assert table["unit-flower-identities"].needs == table["unit-flower"].needs == table["unit-flower-late"].needs


def test_the_late_lane_waits_for_the_oldest_plane_only_when_that_runs():
    """`make test` starts it once the oldest control plane's e2e has ended; `make unit` has no e2e to wait for."""
    table = stages.stages()
    oldest = f"e2e-{stages._kube_minors()[0]}"
    assert table["unit-flower-late"].after == (oldest,)
    assert oldest not in stages.wanted(table, ["unit"])
    for goal, done in (("unit", True), ("test", False)):
        runner = stages.Runner(stages.wanted(stages.stages(), [goal]))
        runner.cpu.close()  # its CPU groups: none is used here
        assert runner._after_done(runner.table["unit-flower-late"]) is done, goal
    runner.table[oldest].state = "failed"
    assert runner._after_done(runner.table["unit-flower-late"]), "a failed plane holds the lane back forever"


def _members(group: pathlib.Path) -> str:
    """The processes still in a cgroup, as its cgroup.procs lists them ("" when none or gone)."""
    procs = group / "cgroup.procs"
    return procs.read_text().strip() if procs.exists() else ""


def test_a_stage_runs_in_a_cpu_group_weighted_as_its_nice_value():
    """Its whole process tree, new sessions included, shares the CPU by the group's weight (autogroup aside)."""
    cpu = stages.CpuShares()
    if cpu.parent is None:
        pytest.skip("no writable CPU controller (needs root)")
    groups: list[pathlib.Path | None] = []
    try:
        stage = stages.Stage("probe", ["true"], nice=10)
        group = cpu.group(stage)
        assert group is not None
        assert (group / cpu.knob).read_text().strip() == ("110" if cpu.knob == "cpu.shares" else "10")
        # setsid: a new session, as KWOK's components and the pod runner's containers start.
        groups = [group, cpu.accounting_group(stage)]
        proc = subprocess.run(["setsid", "cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True,
                              preexec_fn=stages._enter(groups, stage.nice))  # fmt: skip
        assert f"/{cpu.parent.name}/probe" in proc.stdout, proc.stdout
        # Its CPU time is counted, a child in a session of its own that nobody waits for included.
        burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
        subprocess.run(["setsid", "--fork", sys.executable, "-c", burn], check=True,
                       preexec_fn=stages._enter(groups, 0))  # fmt: skip
        deadline = time.monotonic() + 30
        while (cpu.used(stage) or 0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cpu.used(stage) is not None
        assert 0.3 <= (cpu.used(stage) or 0) < 5
    finally:
        # The burner's exit, before the groups go: on a busy machine (CI runs this beside the
        # control planes, at a low weight) its interpreter may take seconds to shut down.
        deadline = time.monotonic() + 60
        while any(_members(g) for g in groups if g is not None) and time.monotonic() < deadline:
            time.sleep(0.1)
        cpu.close()
    assert not cpu.parent.exists(), "the run's groups are removed once empty"
    assert cpu.accounting is None or not cpu.accounting.exists()


def test_what_a_stage_alone_waits_for_runs_at_that_stage_weight(logs, capsys):
    """A stage set behind (nice 10) that becomes all a stage in front (nice 0) waits for takes its weight."""
    cpu = stages.CpuShares()
    if cpu.parent is None:
        pytest.skip("no writable CPU controller (needs root)")
    cpu.close()

    read = logs / "read"  # behind's first reading is taken: gate may end

    def read_weight(*, until_changed: bool) -> list[str]:
        """A stage that prints its own group's weight, as the kernel has it: at once, or once it changed (30 s)."""
        return python(
            "import pathlib, time\n"
            "line = next(l for l in open('/proc/self/cgroup') if ':cpu,' in l or ':cpu:' in l or l.startswith('0::'))\n"
            "rel = line.strip().split(':', 2)[2]\n"
            "knob = next(p for p in (pathlib.Path('/sys/fs/cgroup/cpu' + rel, 'cpu.shares'),"
            " pathlib.Path('/sys/fs/cgroup' + rel, 'cpu.weight')) if p.exists())\n"
            "first = knob.read_text().strip()\n"
            f"pathlib.Path({str(read)!r}).touch()\n"
            f"end = time.monotonic() + {30 if until_changed else 0}\n"
            "while knob.read_text().strip() == first and time.monotonic() < end: time.sleep(0.05)\n"
            "print(first, knob.read_text().strip())\n"
        )

    table = {
        # front waits for behind and for later, which waits for gate: behind is lent front's weight
        # only once later is done (until then front waits for more than behind).
        "behind": stages.Stage("behind", read_weight(until_changed=True), nice=10),
        # On a busy machine a stage at weight 110 may take seconds to start: gate ends once it has read.
        "gate": stages.Stage(
            "gate", python(f"import os, time\nwhile not os.path.exists({str(read)!r}): time.sleep(0.05)")
        ),
        "later": stages.Stage("later", python("import time; time.sleep(1)"), needs=("gate",)),
        "front": stages.Stage("front", python("pass"), needs=("behind", "later")),
        # A stage behind lends nothing to one as far behind as itself.
        "low": stages.Stage("low", python("import time; time.sleep(1)"), nice=10),
        "lower": stages.Stage("lower", python("pass"), needs=("low",), nice=10),
        # Lent the moment it starts, before its process (and maybe its group) exists: nothing changes
        # afterwards to lend it again, and its own start must not take the lent weight back.
        "first": stages.Stage("first", python("pass")),
        "started": stages.Stage("started", read_weight(until_changed=False), needs=("first", "gate"), nice=10),
        "waiter": stages.Stage("waiter", python("pass"), needs=("started",)),
    }
    assert stages.Runner(table).run() == 0
    own, lent = ("110", "1024") if cpu.knob == "cpu.shares" else ("10", "100")
    assert (logs / "logs" / "behind.log").read_text().split() == [own, lent], "behind kept its own weight"
    assert (logs / "logs" / "started.log").read_text().split() == [lent, lent], "started ran at its own weight"
    out = capsys.readouterr().out
    # Printed as the runner goes: later's end, then what front waits for alone.
    assert out.index("later: passed") < out.index("behind: at front's weight (nice 0), all it waits for"), out
    assert "low: at lower's weight" not in out
    assert table["low"].nice_now == 10


def test_the_newest_python_lane_runs_what_requires_python_admits_last_and_needs_only_the_venv():
    table = stages.stages()
    assert stages.newest_python() == "3.13", "pyproject.toml's requires-python: >=3.11,<3.14"
    lane = table["unit-py3.13"]
    assert lane.needs == ("venv",) and lane.pytest
    assert "PY=python3.13" in lane.command
    assert "unit-py3.13" in stages.GOALS["unit"]


def _unit_py(tmp_path, python: str, *, ci: bool) -> subprocess.CompletedProcess[str]:
    """`make unit-py PY=python`, python on PATH a shim that fails, as pyenv's does for a version it does not select."""
    shim = tmp_path / python
    shim.write_text(f"#!/bin/sh\necho 'pyenv: {python}: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "CI": "true" if ci else ""}
    return subprocess.run([stages.MAKE, "--no-print-directory", "unit-py", f"PY={python}"], cwd=stages.ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "ci", "code", "says"),
    [
        ("in CI the lane fails: a shim on PATH is not a Python that runs", True, 2, "does not run here"),
        ("elsewhere it is skipped, and says so", False, 0, "unit-py: skipped (in CI, CI=true, this fails)"),
    ],
)
def test_the_lane_fails_in_ci_when_its_python_does_not_run(tmp_path, reason, ci, code, says):
    proc = _unit_py(tmp_path, "python3.77", ci=ci)
    assert proc.returncode == code, (reason, proc.stdout, proc.stderr)
    assert says in proc.stdout, (reason, proc.stdout)
    assert str(tmp_path / "python3.77") in proc.stdout, "it names what it found"
