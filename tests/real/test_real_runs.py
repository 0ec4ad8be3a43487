"""FederationRuns as real Flower runs: the runner (function/programs/run_program.py) against a real SuperLink.

A SuperLink (insecure, its Control API on the loopback, subprocess isolation)
and two SuperNodes run as processes of the release under test; the runner runs
from the archive the function ships (function/builders/identity.py) with that
release's Python and CLI, as the SuperLink pod's sidecar would. The test plays
the function and the kubelet: it writes the wanted runs and their apps (built
by the release's own `flwr build` from examples/app) into the runner's volume,
swapping runs.json in as the kubelet does, and reads the runner's report file.
Flower's own listing (`flwr ls`) is the judge of what happened in Flower.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from function.builders import identity
from support.peers import EXAMPLES, need
from support.real_flower import venv_python
from support.served import free_port

# Seconds between the runner's turns: short, so that a test waits on Flower, not on the runner.
INTERVAL = 2
# How long a smoke run of one round may take on two busy cores, SuperNodes' ClientApps started and all.
RUN_TIMEOUT = 120
# Enough rounds that a run is still running when the test stops it.
LONG_ROUNDS = 100_000
FAILING = 'raise RuntimeError("the smoke ServerApp raised on purpose")'


@dataclass(frozen=True)
class Federation:
    """One release's SuperLink and SuperNodes, its CLI's connection, and the apps built for it."""

    version: str
    bin: pathlib.Path
    address: str
    home: pathlib.Path
    apps: dict[str, pathlib.Path]
    logs: pathlib.Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "NO_COLOR": "1"}

    def runs(self) -> dict[str, dict[str, Any]]:
        """Flower's own listing of the runs, by run ID (`flwr ls --format json`)."""
        proc = subprocess.run(
            [self.bin / "flwr", "ls", "federation", "--format", "json"],
            env={**self.env(), "FLWR_HOME": str(self.home)},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        start = proc.stdout.find("{")
        assert start != -1, (proc.stdout, proc.stderr)
        answer = json.loads(proc.stdout[start : proc.stdout.rfind("}") + 1])
        assert answer.get("success"), answer
        return {str(run["run-id"]): run for run in answer["runs"]}


def newer(version: str, than: tuple[int, int]) -> bool:
    return tuple(map(int, version.split(".")[:2])) >= than


def flower_args(version: str) -> tuple[list[str], Callable[[int], list[str]], str]:
    """The SuperLink's arguments, a SuperNode's (by its port) and the Control API's address, as the release takes them.

    Before 1.37 the Control API and the Fleet API are gRPC listeners of their
    own; from 1.40 everything is on the SuperLink's one HTTP port.
    """
    http = free_port()
    superlink = ["--insecure", "--host", "127.0.0.1", "--port", str(http), "--disable-runtime-dependency-installation"]
    fleet = control = f"127.0.0.1:{http}"
    if not newer(version, (1, 40)):
        fleet = f"127.0.0.1:{free_port()}"
        superlink += ["--fleet-api-address", fleet]
    if not newer(version, (1, 37)):
        control = f"127.0.0.1:{free_port()}"
        superlink += ["--control-api-address", control]

    def supernode(port: int) -> list[str]:
        return ["--insecure", "--superlink", fleet, "--host", "127.0.0.1", "--port", str(port)]

    return superlink, supernode, control


def build(bin_dir: pathlib.Path, source: pathlib.Path, into: pathlib.Path) -> pathlib.Path:
    """The app's Flower App Bundle, as the release's `flwr build` makes it."""
    shutil.copytree(source, into)
    proc = subprocess.run(
        [bin_dir / "flwr", "build"], cwd=into, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (fab,) = into.glob("*.fab")
    return fab


def failing_app(into: pathlib.Path) -> pathlib.Path:
    """A copy of examples/app whose ServerApp raises before it does anything."""
    shutil.copytree(EXAMPLES / "app", into)
    server = into / "smoke" / "server_app.py"
    text = server.read_text()
    marker = "    rounds = int("
    assert marker in text
    server.write_text(text.replace(marker, f"    {FAILING}\n{marker}", 1))
    return into


@contextlib.contextmanager
def started(argv: list[Any], log: pathlib.Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A process of its own session (its children with it), ended with them when the test is done."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module", params=["1.35.0", "1.41.0", "1.42.0"])
def federation(request, tmp_path_factory) -> Iterator[Federation]:
    """A release's SuperLink with two SuperNodes, and the smoke app (and a failing copy) built by its CLI."""
    python = venv_python(request.param)
    need(python is not None, f"a venv of Flower {request.param} (FLWR_VENVS; `make unit`)")
    assert python is not None
    bin_dir = python.parent
    tmp = tmp_path_factory.mktemp(f"flower-{request.param}")
    apps = {
        "smoke": build(bin_dir, EXAMPLES / "app", tmp / "smoke"),
        "failing": build(bin_dir, failing_app(tmp / "failing-src"), tmp / "failing"),
    }
    superlink, supernode, control = flower_args(request.param)
    home = tmp / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "federation"\n\n[superlink.federation]\naddress = "{control}"\ninsecure = true\n'
    )
    fed = Federation(request.param, bin_dir, control, home, apps, tmp)
    env = fed.env()
    with contextlib.ExitStack() as stack:
        stack.enter_context(started([bin_dir / "flower-superlink", *superlink], tmp / "superlink.log", env))
        for i in range(2):
            argv = [bin_dir / "flower-supernode", *supernode(free_port())]
            stack.enter_context(started(argv, tmp / f"supernode-{i}.log", env))
        yield fed


class Runner:
    """The runner process and its volumes: the wanted runs the test writes, the report the runner writes."""

    def __init__(self, fed: Federation, tmp: pathlib.Path) -> None:
        self.fed, self.tmp = fed, tmp
        self.wanted = tmp / "wanted"
        self.wanted.mkdir()
        self.work = tmp / "work"
        self.runs: list[dict[str, Any]] = []

    def argv(self) -> list[Any]:
        archive = self.tmp / identity.PROGRAM_FILE
        archive.write_bytes(base64.b64decode(identity.PROGRAM_ARCHIVE))
        return [
            self.fed.bin / "python", archive, "runner", f"--address={self.fed.address}",
            "--cli-config=config-toml", f"--work={self.work}", f"--state={self.tmp / 'state'}",
            f"--wanted={self.wanted}", f"--interval={INTERVAL}",
        ]  # fmt: skip

    def want(self, name: str, app: str, deadline: int | None = None, **run_config: Any) -> None:
        """List a run (its app beside the list), as the function would: runs.json swapped in whole."""
        shutil.copy(self.fed.apps[app], self.wanted / f"{name}.fab")
        entry = {"name": name, "uid": f"uid-{name}", "app": f"{name}.fab", "runConfig": run_config}
        self.runs.append({**entry, "deadlineSeconds": deadline})
        self.swap()

    def unwant(self, name: str) -> None:
        """Its FederationRun deleted: gone from the list."""
        self.runs = [r for r in self.runs if r["name"] != name]
        self.swap()

    def swap(self) -> None:
        new = self.wanted / ".runs.json.new"
        new.write_text(json.dumps({"runs": self.runs}))
        new.replace(self.wanted / "runs.json")

    def report(self) -> dict[str, dict[str, Any]]:
        path = self.work / "report.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def wait(self, what: str, test: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
        """Poll the report until test(report) holds; fail with the report and the runner's log."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            report = self.report()
            if test(report):
                return report
            time.sleep(1)
        log = (self.tmp / "runner.log").read_text()
        pytest.fail(f"{what}: not within {RUN_TIMEOUT} s; report {self.report()}\nrunner log:\n{log}")


@pytest.fixture
def runner(federation, tmp_path) -> Iterator[Runner]:
    """A runner beside the release's SuperLink, with an empty volume of wanted runs."""
    run = Runner(federation, tmp_path)
    with started(run.argv(), tmp_path / "runner.log", federation.env()):
        yield run


def phase(name: str, *phases: str) -> Callable[[dict[str, dict[str, Any]]], bool]:
    return lambda report: report.get(name, {}).get("phase") in phases


def test_a_run_completes_and_flower_agrees(runner):
    """A listed run is submitted once and reported Completed with its run ID, as `flwr ls` says it finished."""
    runner.want("first", "smoke", **{"num-server-rounds": 1})
    report = runner.wait("the run completes", phase("first", "Completed", "Failed"))
    entry = report["first"]
    assert entry["phase"] == "Completed", entry
    assert entry["runId"] and entry["startedAt"] and entry["finishedAt"], entry
    flower = runner.fed.runs()
    assert flower[entry["runId"]]["status"] == "finished:completed", flower
    assert len(flower) >= 1 and entry["flowerStatus"] == "finished:completed"


@pytest.mark.parametrize("federation", ["1.42.0"], indirect=True)
def test_two_runs_in_a_row_both_complete(runner):
    """A second run listed after the first completed is submitted too, and both end Completed, each its own run."""
    runner.want("one", "smoke", **{"num-server-rounds": 1})
    runner.wait("the first run completes", phase("one", "Completed", "Failed"))
    runner.want("two", "smoke", **{"num-server-rounds": 1})
    report = runner.wait("the second run completes", phase("two", "Completed", "Failed"))
    assert [report[n]["phase"] for n in ("one", "two")] == ["Completed", "Completed"], report
    assert report["one"]["runId"] != report["two"]["runId"]


@pytest.mark.parametrize("federation", ["1.42.0"], indirect=True)
def test_a_serverapp_that_raises_fails_with_a_reason(runner):
    """An app whose ServerApp raises is Failed, never Completed, with what Flower records of it."""
    runner.want("broken", "failing")
    entry = runner.wait("the run fails", phase("broken", "Completed", "Failed"))["broken"]
    assert entry["phase"] == "Failed", entry
    assert entry["reason"].startswith("the ServerApp exited: "), entry
    assert "raised on purpose" in entry["reason"], entry
    assert runner.fed.runs()[entry["runId"]]["status"] == "finished:failed"


def test_a_run_removed_from_the_list_is_stopped_in_flower(runner):
    """Deleting a running run's FederationRun stops it in Flower, and it leaves the report."""
    runner.want("endless", "smoke", **{"num-server-rounds": LONG_ROUNDS})
    run_id = runner.wait("the run is running", phase("endless", "Running"))["endless"]["runId"]
    runner.unwant("endless")
    runner.wait("the run leaves the report", lambda report: "endless" not in report)
    deadline = time.monotonic() + RUN_TIMEOUT
    while (status := runner.fed.runs()[run_id]["status"]) != "finished:stopped" and time.monotonic() < deadline:
        time.sleep(2)
    assert status == "finished:stopped"


@pytest.mark.parametrize("federation", ["1.42.0"], indirect=True)
def test_a_deadline_stops_the_run_and_fails_it(runner):
    """A run still running past its deadline (counted from when Flower started it) is stopped and reported Failed."""
    runner.want("late", "smoke", deadline=3, **{"num-server-rounds": LONG_ROUNDS})
    entry = runner.wait("the deadline passes", phase("late", "Failed", "Completed"))["late"]
    assert (entry["phase"], entry["reason"]) == ("Failed", "the deadline passed (3 s)"), entry
    runner.wait("Flower has it stopped", lambda report: report["late"]["flowerStatus"] == "finished:stopped")
    assert runner.fed.runs()[entry["runId"]]["status"] == "finished:stopped"
