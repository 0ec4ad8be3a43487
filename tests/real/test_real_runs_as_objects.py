"""FederationRuns as objects, run by real Flower: what the function composes for them, run by the pod runner.

A Federation is rendered with its FederationRuns and their bundles as the
resources Crossplane would answer; the pod runner runs the SuperLink pod with
its runner sidecar (the function's program, in the release's own image) and
two SuperNodes. The runner's report, as it would write it into its ConfigMap,
goes back to the run's own call, whose status must say what Flower records.
Runs appear and go as the function writes the runs' list again and the
kubelet updates the runner's volume (PodRunner.update). Needs root.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from function.builders import runner as runs_sidecar
from function.composition import outcome, runs
from function.serving import render as cli_render
from support.podrunner import PodRunner, unwrap
from support.real_flower import (
    APP,
    NAMESPACE,
    RUN_TIMEOUT,
    SUPEREXEC_IMAGES,
    Release,
    add_cli,
    claim,
    cli_exec,
    images,
    render,
)
from support.real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest

FEDERATION = "fed-runs"
REPORT = f"{runs_sidecar.WORK_DIR}/report.json"


def bundle(release: Release, tmp: pathlib.Path, rounds: int | None = None) -> bytes:
    """examples/app built by the release's own `flwr build`, as a user builds it; rounds: its default changed."""
    source = tmp / "app-source"
    shutil.copytree(APP, source, ignore=shutil.ignore_patterns("__pycache__"))
    if rounds is not None:
        project = source / "pyproject.toml"
        project.write_text(project.read_text().replace("num-server-rounds = 2", f"num-server-rounds = {rounds}"))
    out = tmp / "built"
    out.mkdir()
    subprocess.run([str(release.bin / "flwr"), "build", "--app", str(source)], cwd=out, check=True,
                   capture_output=True, text=True, timeout=120)  # fmt: skip
    (fab,) = out.glob("*.fab")
    return fab.read_bytes()


def bundle_configmap(name: str, content: bytes) -> dict[str, Any]:
    """A tenant's ConfigMap holding a bundle, as `kubectl create configmap --from-file=app.fab=...` makes it."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE},
            "binaryData": {"app.fab": base64.b64encode(content).decode()}}  # fmt: skip


def run_composite(name: str, app: str, **fields: Any) -> dict[str, Any]:
    """A FederationRun claim's composite, as Crossplane passes it (and answers it to the Federation's call)."""
    labels = {outcome.CLAIM_NAME_LABEL: name, outcome.CLAIM_NAMESPACE_LABEL: NAMESPACE}
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederationRun",
        "metadata": {"name": f"{name}-x1", "uid": f"uid-{name}", "labels": labels,
                     "creationTimestamp": f"2026-12-02T05:00:{len(name):02d}Z"},
        "spec": {"federation": FEDERATION, "app": {"configMap": {"name": app}}, **fields},
    }  # fmt: skip


def superlink_pod(runner: PodRunner) -> str:
    return next(p.name for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "superlink")


def report(runner: PodRunner) -> str:
    """The report's text, as the runner writes it into its ConfigMap (beside it, in its own volume)."""
    read = ["python", "-c", "import sys; print(open(sys.argv[1]).read(), end='')", REPORT]
    proc = runner.exec(NAMESPACE, superlink_pod(runner), runs_sidecar.CONTAINER, read)
    return proc.stdout if proc.returncode == 0 else "{}"


def status_of(federation: dict[str, Any], run: dict[str, Any], text: str) -> dict[str, Any]:
    """The run's status, from its own call, given the report as Crossplane observes it."""
    observed = {"status": {"atProvider": {"manifest": {"data": {runs_sidecar.REPORT_FIELD: text}}}}}
    required = {runs.FEDERATION_REQUIREMENT: [cli_render.composite(federation)], runs.REPORT_REQUIREMENT: [observed]}
    decided = outcome.decide(run, {}, required, None)
    assert decided.refusal is None, decided.refusal
    assert decided.status is not None
    return decided.status


def wait_for_phase(
    runner: PodRunner,
    federation: dict[str, Any],
    run: dict[str, Any],
    done: Callable[[str], bool],
    timeout: float,
    *,
    fail: bool = True,
) -> dict[str, Any]:
    """The run's status once done(phase), read from the runner's report; past timeout, fails with the pods' logs
    (or, without fail, gives the last status)."""
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline and not runner.exited():
        status = status_of(federation, run, report(runner))
        if done(status["phase"]):
            return status
        time.sleep(2)
    if not fail:
        return status
    pytest.fail(f"{run['metadata']['name']}: {status}\n{runner.logs(lines=120)}")


def flower_runs(runner: PodRunner) -> dict[str, str]:
    """Flower's own record: run ID -> status, through the Control API on the SuperLink pod's loopback."""
    proc = cli_exec(runner, ["flwr", "list", "--format", "json"], timeout=60)
    answer = json.loads(proc.stdout[proc.stdout.find("{") :] or "{}")
    assert answer.get("success"), f"{proc.stdout}\n{proc.stderr}"
    return {str(r["run-id"]): str(r["status"]) for r in answer.get("runs") or []}


def rendered(tmp: pathlib.Path, federation: dict[str, Any], required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Federation's objects, the runs' list among them, with its runs answered as Crossplane would."""
    tmp.mkdir(parents=True, exist_ok=True)
    return [unwrap(r) for r in render(tmp, federation, required)]


def runs_list(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    name = runs_sidecar.wanted_name(FEDERATION)
    return next(m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == name)


@pytest.mark.parametrize("release", ["1.35.0", "1.42.0"], indirect=True)
def test_runs_applied_as_objects_complete_one_after_another_and_their_status_says_so(
    release: Release, tmp_path: pathlib.Path
):
    """A run applied as an object completes: its status has Flower's run ID and `Completed`, as `flwr ls` says;
    a second one applied after it completes too. No port-forward, no `flwr` outside the pod."""
    federation = claim(FEDERATION, release.version, "subprocess", tls=False)
    app = bundle_configmap("smoke-app", bundle(release, tmp_path))
    first = run_composite("first", "smoke-app")
    manifests = rendered(tmp_path / "r1", federation, [first, app])
    extra = add_cli(manifests, release, tls=False)
    with PodRunner(tmp_path / "cluster", images(release.bin, SUPEREXEC_IMAGES)) as runner:
        runner.start([*manifests, *extra])
        done = wait_for_phase(runner, federation, first, lambda p: p in ("Completed", "Failed"), RUN_TIMEOUT)
        assert done["phase"] == "Completed", f"{done}\n{runner.logs(lines=120)}"
        assert flower_runs(runner)[done["runId"]] == "finished:completed", "Flower's own record says so"
        assert done["flowerStatus"] == "finished:completed"
        assert done["startedAt"] and done["finishedAt"]
        # The function takes the bundle out once the report names the run.
        observed = {runs.STATUS: {"status": {"atProvider": {"manifest": {"data": {"runs": report(runner)}}}}}}
        second = run_composite("second", "smoke-app", runConfig={"num-server-rounds": "1"})
        again = outcome.decide(cli_render.composite(federation), observed,
                               {runs.RUNS_REQUIREMENT: [first, second], "run-bundle-second": [app]}, None)  # fmt: skip
        listed = again.desired[runs.WANTED]["spec"]["forProvider"]["manifest"]
        assert listed["binaryData"]["first.fab"] == "", "first's bundle no longer travels"
        assert listed["binaryData"]["second.fab"], "second's does"
        runner.update(listed)
        then = wait_for_phase(runner, federation, second, lambda p: p in ("Completed", "Failed"), RUN_TIMEOUT)
        assert then["phase"] == "Completed", f"{then}\n{runner.logs(lines=120)}"
        assert then["runId"] != done["runId"]
        assert status_of(federation, first, report(runner))["phase"] == "Completed", "the first keeps its record"


@pytest.mark.parametrize("release", ["1.41.0"], indirect=True)
def test_a_run_that_raises_fails_and_deleting_a_running_run_stops_it(release: Release, tmp_path: pathlib.Path):
    """An app whose ServerApp raises: `Failed`, with a reason. A long run whose object is deleted (the function
    lists it no more): Flower stops it (`flwr ls` through the loopback says so)."""
    federation = claim(FEDERATION, release.version, "subprocess", tls=False)
    long_app = bundle_configmap("long-app", bundle(release, tmp_path / "long", rounds=100000))
    broken = run_composite("broken", "long-app", runConfig={"num-server-rounds": "0", "array-size": "-1"})
    long_run = run_composite("long", "long-app")
    manifests = rendered(tmp_path / "r1", federation, [broken, long_run, long_app])
    extra = add_cli(manifests, release, tls=False)
    with PodRunner(tmp_path / "cluster", images(release.bin, SUPEREXEC_IMAGES)) as runner:
        runner.start([*manifests, *extra])
        failed = wait_for_phase(runner, federation, broken, lambda p: p in ("Completed", "Failed"), RUN_TIMEOUT)
        assert failed["phase"] == "Failed", failed
        assert failed.get("reason"), failed
        running = wait_for_phase(runner, federation, long_run, lambda p: p != "Pending", RUN_TIMEOUT)
        assert running["phase"] == "Running", running
        # The run's object deleted: the Federation's next call lists it no more.
        gone = rendered(tmp_path / "r2", federation, [broken, long_app])
        runner.update(runs_list(gone))
        deadline = time.monotonic() + 120
        while flower_runs(runner).get(running["runId"]) != "finished:stopped" and time.monotonic() < deadline:
            time.sleep(2)
        assert flower_runs(runner)[running["runId"]] == "finished:stopped", runner.logs(lines=80)


@pytest.mark.parametrize("release", ["1.41.0", "1.42.0"], indirect=True)
def test_a_superlink_pod_deleted_mid_run_leaves_flowers_word_on_the_run_and_the_next_run_completes(
    release: Release, tmp_path: pathlib.Path
):
    """The SuperLink's pod deleted while a run trains, its state on its claim: once the pod is back, the run's
    status says what Flower's record says of it (whatever the release does with a run its SuperLink lost
    mid-way), it is never submitted again, and a run applied after it completes."""
    federation = claim(FEDERATION, release.version, "subprocess", tls=False)
    federation["spec"]["superlink"]["persistence"] = {"enabled": True}
    long_app = bundle_configmap("long-app", bundle(release, tmp_path / "long", rounds=100000))
    long_run = run_composite("long", "long-app")
    manifests = rendered(tmp_path / "r1", federation, [long_run, long_app])
    extra = add_cli(manifests, release, tls=False)
    with PodRunner(tmp_path / "cluster", images(release.bin, SUPEREXEC_IMAGES)) as runner:
        runner.start([*manifests, *extra])
        running = wait_for_phase(runner, federation, long_run, lambda p: p != "Pending", RUN_TIMEOUT)
        assert running["phase"] == "Running", running
        pod = superlink_pod(runner)
        runner.delete(NAMESPACE, pod)
        runner.create(NAMESPACE, pod)
        # Flower's record of the run once the SuperLink is back, read through its loopback.
        deadline = time.monotonic() + 120
        record: dict[str, str] = {}
        while running["runId"] not in record and time.monotonic() < deadline:
            with contextlib.suppress(AssertionError, ValueError):
                record = flower_runs(runner)
            time.sleep(2)
        assert running["runId"] in record, f"the SuperLink kept the run in its state\n{runner.logs(lines=80)}"
        # Flower fails a run whose ServerApp sent no heartbeat for a minute (1.41, 1.42): wait for its word.
        # (The new pod's runner reports from its remembered state: Pending until its first report.)
        wait_for_phase(runner, federation, long_run, lambda p: p in ("Completed", "Failed", "Stopped"), 240, fail=False)
        flower_said = flower_runs(runner)[running["runId"]]
        after = status_of(federation, long_run, report(runner))
        said = {"running": "Running", "finished:failed": "Failed", "finished:stopped": "Stopped"}
        assert after.get("runId") == running["runId"], f"never submitted again: {after}\n{runner.logs(lines=60)}"
        assert after["phase"] == said.get(flower_said, after["phase"]), (flower_said, after)
        print(f"Flower {release.version} after its SuperLink's pod was deleted mid-run: {flower_said}; {after}")  # noqa: T201 - what the release does, for the note
        # The run's object deleted (stopping it if Flower still runs it), then a new one completes.
        short = run_composite("short", "long-app", runConfig={"num-server-rounds": "1"})
        observed = {runs.STATUS: {"status": {"atProvider": {"manifest": {"data": {"runs": report(runner)}}}}}}
        again = outcome.decide(cli_render.composite(federation), observed,
                               {runs.RUNS_REQUIREMENT: [short], "run-bundle-short": [long_app]}, None)  # fmt: skip
        runner.update(again.desired[runs.WANTED]["spec"]["forProvider"]["manifest"])
        done = wait_for_phase(runner, federation, short, lambda p: p in ("Completed", "Failed"), RUN_TIMEOUT)
        assert done["phase"] == "Completed", f"{done}\n{runner.logs(lines=120)}"
