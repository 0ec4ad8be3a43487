"""The runner: the SuperLink pod's sidecar that starts, watches and stops a Federation's runs (mode runner).

Each FederationRun a user applies becomes an entry of a list the function
keeps beside the SuperLink (--wanted, a ConfigMap volume the kubelet updates):
its name, its object's uid, the Flower App Bundle it runs (a file in the same
volume, or, for an app in an image, the ConfigMap its bundler Job fills:
function/programs/bundle_program.py), its run config and its deadline. Every
interval, and as soon as the list changes, the runner fetches the bundles
its image runs' Jobs made, lists Flower's runs over the pod's loopback, submits
each wanted run it has not submitted yet (`flwr run`), stops a run past its
deadline or no longer wanted (`flwr stop`), and reports each wanted run's
state: into a file of its own, into its log, and into a ConfigMap beside the
SuperLink that Crossplane reads back into the FederationRun's status.

What it submitted it remembers by uid in its state (beside the SuperLink's own
where it keeps one), written aside and renamed: a restarted runner neither
submits a run again nor forgets one. The phases come from Flower's own record
of each run: `Completed` only when Flower says it finished completed.

Standard library only (it runs in the SuperLink's image, with its Python and
its `flwr` CLI, through function/programs/flwr_control.py).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import datetime as dt
import json
import os
import pathlib
import re
import shutil
import sys
import time
import zipfile
from typing import Any

from function.programs.flwr_control import (
    BUNDLE_ERROR_KEY,
    BUNDLE_KEY,
    HTTP_OK,
    MAX_FAB_BYTES,
    Cli,
    KubeApi,
    answered,
    one_line,
    patch_configmap,
    sleep_until_changed,
    version,
)

# In the wanted runs' volume: the list, beside each run's app (<name>.fab).
WANTED_FILE = "runs.json"
# The runner's memory of what it submitted, and its report, in its own work directory.
STATE_FILE = "runs.json"
REPORT_FILE = "report.json"
# In its work directory: the bundles fetched from image runs' ConfigMaps, each <uid>.fab (a run's uid, not its
# name: a run deleted and applied again under its name is another run, with another image perhaps).
FETCHED_DIR = "fetched"
# The report ConfigMap's key.
REPORT_FIELD = "runs"

# The Flower images' Python may be 3.10, which has no datetime.UTC.
UTC = dt.timezone.utc  # noqa: UP017 - see above
PENDING, RUNNING, COMPLETED, FAILED, STOPPED = "Pending", "Running", "Completed", "Failed", "Stopped"
# Why the runner stopped a run: its deadline passed, or it is no longer wanted.
DEADLINE, UNWANTED = "deadline", "unwanted"
# Turns in a row Flower must not list a submitted run before it counts as lost (one turn may race
# a SuperLink that is starting again).
LOST_AFTER = 2
# How a report says Flower refused a run's app (read back by from_report).
REFUSED_PREFIX = "the app was refused: "
# How it says an image run's bundler wrote why there is no bundle (read back by from_report too).
UNBUNDLED_PREFIX = "the app's image could not be bundled: "
# A ConfigMap's name, as Kubernetes takes one (DNS subdomain): the only kind put in an API path.
CONFIGMAP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
HTTP_NOT_FOUND = 404
# A failed `flwr run` that says nothing of the app: the SuperLink was not reached, so it is tried again.
UNREACHED = ("did not answer", "unavailable", "connection refused", "failed to connect")


@dataclasses.dataclass(frozen=True)
class Wanted:
    """A run the function lists: its FederationRun's name and uid, its app (and whether it is there), its settings.

    An image run names no app file but the ConfigMap its bundler Job fills (app_configmap); the fetch step
    (fetch_apps) says where the bundle it fetched is (bundle), why it waits for one (waiting), or the
    bundler's word that there is none (unbundled).
    """

    name: str
    uid: str
    app: str | None
    run_config: dict[str, Any]
    deadline: int | None
    has_app: bool = False
    app_configmap: str | None = None
    bundle: pathlib.Path | None = None
    waiting: str = ""
    unbundled: str = ""


@dataclasses.dataclass(frozen=True)
class FlowerRun:
    """Flower's record of a run, as `flwr ls --format json` gives it (timestamps in RFC 3339, UTC)."""

    run_id: str
    status: str
    details: str = ""
    started_at: str | None = None
    finished_at: str | None = None


@dataclasses.dataclass
class Remembered:
    """What the runner did about one wanted run (by its uid)."""

    name: str
    run_id: str | None = None
    # Flower's answer when it refused the run (`flwr run` failed): never submitted again.
    refused: str = ""
    # Why the runner stopped it (DEADLINE or UNWANTED); empty while it did not.
    stopped_for: str = ""
    # Turns in a row Flower's list did not have its run ID: a SuperLink that restarted without its state.
    missing: int = 0
    # Its image's bundler wrote why there is no bundle (an image run): never submitted, never fetched again.
    unbundled: str = ""

    @property
    def settled(self) -> bool:
        """Whether nothing is left to submit: Flower took it, refused it, or its image has no bundle."""
        return self.run_id is not None or bool(self.refused or self.unbundled)


@dataclasses.dataclass(frozen=True)
class Step:
    """One turn's decisions: the runs to submit, the runs to stop (run ID, why), and the memory after."""

    submit: list[Wanted]
    stop: list[tuple[str, str]]
    memory: dict[str, Remembered]


def finished(run: FlowerRun | None) -> bool:
    """Whether Flower's record says the run is over (completed, failed or stopped)."""
    return run is not None and run.status.partition(":")[0] == "finished"


def rfc3339(value: object) -> str | None:
    """A timestamp as Flower's CLI prints it (`2026-01-02 03:04:05Z`, ISO 8601, or N/A) in RFC 3339 UTC."""
    text = str(value or "").strip()
    if not text or text == "N/A":
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(stamp: str) -> float:
    """An RFC 3339 UTC timestamp (as rfc3339 gives it) in seconds since the epoch."""
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def flower_runs(answer: dict[str, Any]) -> dict[str, FlowerRun]:
    """Flower's runs by run ID, from `flwr ls --format json`."""
    out = {}
    for raw in answer.get("runs") or []:
        run_id = str(raw.get("run-id", ""))
        details = str(raw.get("status-details") or "")
        out[run_id] = FlowerRun(
            run_id,
            str(raw.get("status") or ""),
            "" if details == "N/A" else details,
            rfc3339(raw.get("running-at")),
            rfc3339(raw.get("finished-at")),
        )
    return out


def read_wanted(directory: pathlib.Path) -> list[Wanted] | None:
    """The wanted runs the volume lists; None while it lists none (not mounted yet, or not valid JSON)."""
    try:
        raw = json.loads((directory / WANTED_FILE).read_text())
    except (OSError, ValueError):
        return None
    entries = raw.get("runs") if isinstance(raw, dict) else None
    return [_wanted(directory, e) for e in entries or [] if isinstance(e, dict) and e.get("name") and e.get("uid")]


def _wanted(directory: pathlib.Path, raw: dict[str, Any]) -> Wanted:
    """One listed run; its app counts as there only as a file beside the list (never the kubelet's own ..data)."""
    app = raw.get("app") if isinstance(raw.get("app"), str) else None
    safe = app is not None and _safe(app)
    deadline = raw.get("deadlineSeconds")
    configmap = raw.get("appConfigMap")
    return Wanted(
        str(raw["name"]),
        str(raw["uid"]),
        app,
        dict(raw.get("runConfig") or {}),
        deadline if isinstance(deadline, int) and not isinstance(deadline, bool) else None,
        bool(safe and (directory / str(app)).is_file()),
        configmap if isinstance(configmap, str) and CONFIGMAP_NAME.match(configmap) else None,
    )


def fetch_apps(
    wanted: list[Wanted] | None,
    memory: dict[str, Remembered],
    api: KubeApi | None,
    namespace: str,
    into: pathlib.Path,
) -> list[Wanted] | None:
    """The wanted runs, each image run with its bundle fetched from its ConfigMap (or why not): a turn's first step.

    Only a run still to submit is fetched, once: its file (into/<uid>.fab) is its app from then on. The
    files of runs the runner will not submit (no longer listed, taken or refused) are deleted.
    """
    if wanted is None:
        return None
    into.mkdir(parents=True, exist_ok=True)
    out, keep = [], set()
    for run in wanted:
        known = memory.get(run.uid)
        if not run.app_configmap or run.has_app or (known is not None and known.settled) or not _safe(run.uid):
            out.append(run)
            continue
        path = into / f"{run.uid}.fab"
        keep.add(path.name)
        out.append(
            dataclasses.replace(run, has_app=True, bundle=path) if path.is_file() else fetch(api, namespace, run, path)
        )
    for stale in into.iterdir():
        if stale.name not in keep and stale.is_file():
            stale.unlink()
    return out


def _safe(name: str) -> bool:
    """Whether a name from the list can name a file of the runner's own (no path, no hidden file)."""
    return bool(name) and "/" not in name and not name.startswith(".")


def awaiting(run: Wanted) -> str:
    """Why an image run waits: its bundler Job (of its ConfigMap's name) has not written its outcome (yet)."""
    return f"waiting for its app from its image (Job {run.app_configmap})"


def fetch(api: KubeApi | None, namespace: str, run: Wanted, path: pathlib.Path) -> Wanted:
    """One image run after a look at its ConfigMap: its bundle written to path, the bundler's error, or why it waits."""
    waiting = awaiting(run)
    if api is None:
        return dataclasses.replace(run, waiting=f"{waiting}: no Kubernetes API in reach")
    status, answer = api.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{run.app_configmap}")
    if status == HTTP_OK:
        return bundled(run, answer, f"ConfigMap {namespace}/{run.app_configmap}", path)
    if status == HTTP_NOT_FOUND:
        return dataclasses.replace(run, waiting=waiting)
    message = str(answer.get("message", ""))
    said = message if status == 0 else f"the Kubernetes API answered {status} {message}".strip()
    return dataclasses.replace(run, waiting=one_line(f"{waiting}: {said}"))


def bundled(run: Wanted, configmap: dict[str, Any], where: str, path: pathlib.Path) -> Wanted:
    """An image run after its ConfigMap (at where): its bundle written to path, the bundler's error, or still waiting.

    A bundle that is not base64 or too large is the bundler's outcome too (Kubernetes keeps a ConfigMap's last
    write whole): the Job that wrote it has ended, so waiting would never end. A bundle there wins over an error.
    """
    encoded = (configmap.get("binaryData") or {}).get(BUNDLE_KEY)
    error = (configmap.get("data") or {}).get(BUNDLE_ERROR_KEY)
    if isinstance(encoded, str):
        try:
            fab = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return dataclasses.replace(run, unbundled=f"{where} holds {BUNDLE_KEY} data that is not base64")
        if len(fab) > MAX_FAB_BYTES:
            too_large = f"{where} holds a bundle of {len(fab)} bytes; a run's may have at most {MAX_FAB_BYTES}"
            return dataclasses.replace(run, unbundled=too_large)
        write_atomically(path, fab)
        print(f"run {run.name}: fetched its app from {where} ({len(fab)} bytes)", flush=True)
        return dataclasses.replace(run, has_app=True, bundle=path)
    if isinstance(error, str):
        return dataclasses.replace(run, unbundled=one_line(error) or "its bundler said no more")
    return dataclasses.replace(run, waiting=awaiting(run))


def plan(wanted: list[Wanted] | None, flower: dict[str, FlowerRun], memory: dict[str, Remembered], now: float) -> Step:
    """The runner's decisions for one turn, from the wanted runs, Flower's runs (by run ID) and its memory.

    wanted is None while the list was never delivered: then no run counts as
    no longer wanted, so a runner started before its volume stops nothing.
    """
    memory = {uid: dataclasses.replace(m) for uid, m in memory.items()}
    submit, stop = [], []
    for run in wanted or []:
        known = memory.setdefault(run.uid, Remembered(run.name))
        if known.run_id is None:
            if run.unbundled and not known.settled:
                known.unbundled = run.unbundled
            if not known.settled and run.has_app:
                submit.append(run)
            continue
        record = flower.get(known.run_id)
        known.missing = known.missing + 1 if record is None else 0
        if record is None or finished(record):
            continue
        if not known.stopped_for and past_deadline(run, record, now):
            known.stopped_for = DEADLINE
        if known.stopped_for:
            stop.append((known.run_id, known.stopped_for))  # again each turn until Flower says it finished
    if wanted is not None:
        stop.extend(_unwanted(wanted, flower, memory))
    return Step(submit, stop, memory)


def past_deadline(run: Wanted, record: FlowerRun, now: float) -> bool:
    """Whether the run has been running (since Flower started it) for longer than its deadline."""
    return (
        run.deadline is not None and record.started_at is not None and now - seconds(record.started_at) > run.deadline
    )


def _unwanted(
    wanted: list[Wanted], flower: dict[str, FlowerRun], memory: dict[str, Remembered]
) -> list[tuple[str, str]]:
    """The remembered runs no longer wanted (their FederationRuns deleted).

    Stopped while Flower runs them, then forgotten.
    """
    listed = {run.uid for run in wanted}
    stop = []
    for uid, known in sorted(memory.items()):
        if uid in listed:
            continue
        record = flower.get(known.run_id) if known.run_id else None
        if record is None or finished(record):
            del memory[uid]  # finished, never submitted, or unknown to Flower: nothing left to do
            continue
        known.stopped_for = known.stopped_for or UNWANTED
        stop.append((str(known.run_id), known.stopped_for))
    return stop


def entry(run: Wanted, flower: dict[str, FlowerRun], known: Remembered | None) -> dict[str, Any]:
    """One wanted run's report entry: its run ID, phase, Flower's status, times and the reason for its phase."""
    out: dict[str, Any] = {"uid": run.uid, "runId": "", "phase": PENDING, "flowerStatus": ""}
    out.update(startedAt=None, finishedAt=None, reason="")
    if known is None or known.run_id is None:
        unbundled = known.unbundled if known is not None and known.unbundled else run.unbundled
        if known is not None and known.refused:
            out.update(phase=FAILED, reason=f"{REFUSED_PREFIX}{known.refused}")
        elif unbundled:
            out.update(phase=FAILED, reason=f"{UNBUNDLED_PREFIX}{unbundled}")
        elif run.has_app:
            pass  # about to be submitted
        elif run.app_configmap:
            out["reason"] = run.waiting or awaiting(run)
        elif not run.app:
            out["reason"] = "the run names no app"
        else:
            out["reason"] = f"waiting for its app ({run.app})"
        return out
    out["runId"] = known.run_id
    record = flower.get(known.run_id)
    if record is None and known.missing >= LOST_AFTER:
        # Flower lists a run as soon as `flwr run` returns: one it no longer lists, it forgot.
        out.update(phase=FAILED, reason=(
            f"the SuperLink no longer knows run {known.run_id}: it restarted without its state "
            "(spec.superlink.persistence keeps runs across restarts); apply the run again"))  # fmt: skip
        return out
    if record is None:
        out["reason"] = f"Flower does not list run {known.run_id} (yet)"
        return out
    out.update(flowerStatus=record.status, startedAt=record.started_at, finishedAt=record.finished_at)
    phase, reason = phase_of(record, known, run.deadline)
    out.update(phase=phase, reason=reason)
    return out


def phase_of(record: FlowerRun, known: Remembered, deadline: int | None) -> tuple[str, str]:
    """The phase of a run Flower lists, and the reason for it, from Flower's status and what the runner did."""
    status, _, sub = record.status.partition(":")
    if known.stopped_for == DEADLINE and sub != "completed":
        return FAILED, f"the deadline passed ({deadline} s)"
    if status != "finished":
        return {"running": (RUNNING, "")}.get(status, (PENDING, f"Flower has it {record.status or 'unlisted'}"))
    ended = {
        "completed": (COMPLETED, ""),
        "stopped": (STOPPED, "stopped in Flower"),
        "failed": (FAILED, f"the ServerApp exited: {one_line(record.details) or 'Flower records no more'}"),
    }
    return ended.get(sub, (FAILED, f"Flower finished it as {record.status}"))


def report(wanted: list[Wanted] | None, flower: dict[str, FlowerRun], memory: dict[str, Remembered]) -> str:
    """The report: each wanted run's entry by its name, as compact JSON with sorted keys."""
    entries = {run.name: entry(run, flower, memory.get(run.uid)) for run in wanted or []}
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def load(path: pathlib.Path) -> dict[str, Remembered]:
    """The runner's memory; empty when there is none (a new SuperLink, or one without state)."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {
        uid: Remembered(
            e["name"],
            e.get("run-id"),
            e.get("refused", ""),
            e.get("stopped-for", ""),
            e.get("missing", 0),
            e.get("unbundled", ""),
        )
        for uid, e in raw.items()
    }


def save(path: pathlib.Path, memory: dict[str, Remembered]) -> None:
    """The memory, written aside and renamed: a container stopped halfway never leaves half of it."""
    raw = {
        uid: {
            "name": m.name,
            "run-id": m.run_id,
            "refused": m.refused,
            "stopped-for": m.stopped_for,
            "missing": m.missing,
            "unbundled": m.unbundled,
        }
        for uid, m in sorted(memory.items())
    }
    write_atomically(path, json.dumps(raw, indent=1, sort_keys=True))


def recalled(api: KubeApi, namespace: str, configmap: str) -> dict[str, Remembered]:
    """The memory a last report gives: each run it names a run ID of, and each Flower refused."""
    status, answer = api.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{configmap}")
    text = (answer.get("data") or {}).get(REPORT_FIELD) if status == 200 else None  # noqa: PLR2004 - HTTP OK
    return from_report(text or "{}")


def from_report(text: str) -> dict[str, Remembered]:
    """The memory a report's text gives (see recalled); nothing from what is not a report."""
    try:
        entries = json.loads(text)
    except ValueError:
        return {}
    memory = {}
    for name, e in entries.items() if isinstance(entries, dict) else []:
        if not isinstance(e, dict) or not isinstance(e.get("uid"), str):
            continue
        reason = str(e.get("reason") or "")
        if e.get("runId"):
            memory[e["uid"]] = Remembered(name, str(e["runId"]))
        elif e.get("phase") == FAILED and reason.startswith(REFUSED_PREFIX):
            memory[e["uid"]] = Remembered(name, refused=reason.removeprefix(REFUSED_PREFIX))
        elif e.get("phase") == FAILED and reason.startswith(UNBUNDLED_PREFIX):
            memory[e["uid"]] = Remembered(name, unbundled=reason.removeprefix(UNBUNDLED_PREFIX))
    return memory


def write_atomically(path: pathlib.Path, content: str | bytes) -> None:
    """Write content aside and rename it over path: readers see the old content or the new, never half."""
    partial = path.with_name(f".{path.name}.partial")
    if isinstance(content, bytes):
        partial.write_bytes(content)
    else:
        partial.write_text(content)
    os.replace(partial, path)


def toml_value(value: object) -> str:
    """A run config value as TOML: strings quoted (JSON's escapes are TOML's), booleans true/false, numbers as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def run_config_file(run_config: dict[str, Any]) -> str:
    """The run config as the TOML file `flwr run --run-config FILE.toml` reads: each key quoted, as it is."""
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in sorted(run_config.items()))


def unpack(fab: pathlib.Path, into: pathlib.Path) -> None:
    """Unpack a Flower App Bundle into a directory `flwr run` takes (every release runs an app's directory).

    Its own signature files (.info/) stay out: the CLI builds the bundle anew
    from the directory. An entry reaching outside the directory is refused.
    """
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    with zipfile.ZipFile(fab) as archive:
        for name in archive.namelist():
            parts = pathlib.PurePosixPath(name).parts
            if name.startswith("/") or ".." in parts:
                outside = f"the bundle's entry {name!r} reaches outside the app"
                raise ValueError(outside)
            if (parts and parts[0] == ".info") or name.endswith("/"):
                continue
            target = into.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))


def submit(cli: Cli, run: Wanted, wanted_dir: pathlib.Path, work: pathlib.Path) -> Remembered:
    """`flwr run` the wanted run's app with its run config: what the runner remembers of it (a run ID, or a refusal)."""
    known = Remembered(run.name)
    app = work / "apps" / run.uid
    try:
        unpack(run.bundle or wanted_dir / str(run.app), app)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        known.refused = one_line(f"not a Flower App Bundle: {error}")
        return known
    cli.connect_app(app)
    options: tuple[str, ...] = ()
    if run.run_config:
        config = work / "apps" / f"{run.uid}.toml"
        config.write_text(run_config_file(run.run_config))
        options = ("--run-config", str(config))
    answer = cli.call("run", app=app, options=options)
    shutil.rmtree(app, ignore_errors=True)
    run_id = answer.get("run-id")
    if answer.get("success") and run_id is not None:
        known.run_id = str(run_id)
        return known
    message = one_line(str(answer.get("error-message") or answer))
    if any(word in message.lower() for word in UNREACHED):
        print(f"run {run.name}: the SuperLink did not take it, tried again next turn: {message}", flush=True)
        return Remembered(run.name)
    known.refused = message
    return known


class RunReporter:
    """The runner's report: in its file, one log line per changed run, and (with an API) in its ConfigMap."""

    def __init__(self, path: pathlib.Path, api: KubeApi | None, configmap: str | None) -> None:
        """path: the report's file; configmap: its ConfigMap in the pod's namespace (written only with an API)."""
        self.path, self.api, self.configmap = path, api, configmap
        self.logged: dict[str, Any] = {}
        self.said = ""
        # What the ConfigMap holds, as far as the runner knows: None until it first wrote it.
        self.written: str | None = None

    def turn(self, text: str) -> None:
        """Write, log and patch the report, where it changed."""
        if not self.path.exists() or self.path.read_text() != text:
            write_atomically(self.path, text)
        entries = json.loads(text)
        for name, value in sorted(entries.items()):
            if self.logged.get(name) != value:
                print(f"run {name}: {json.dumps(value, sort_keys=True)}", flush=True)
        self.logged = entries
        if self.api is None or not self.configmap or text == self.written:
            return
        namespace = os.environ.get("POD_NAMESPACE", "")
        done, why = patch_configmap(self.api, namespace, self.configmap, {REPORT_FIELD: text})
        said = "" if done else f"cannot report the runs in ConfigMap {namespace}/{self.configmap}: {why}"
        if done:
            self.written = text
        if said != self.said and said:
            print(said, flush=True)
        self.said = said


def stop(cli: Cli, run_id: str, why: str) -> None:
    """`flwr stop` a run, and say so."""
    answer = cli.call("stop", run_id)
    outcome = "stopped" if answer.get("success") else f"not stopped: {one_line(answer.get('error-message', ''))}"
    print(f"run {run_id} ({'its deadline passed' if why == DEADLINE else 'no longer wanted'}): {outcome}", flush=True)


@dataclasses.dataclass(frozen=True)
class Place:
    """Where the runner acts: the wanted runs' volume, its work directory, its API and the pod's namespace."""

    wanted: pathlib.Path
    work: pathlib.Path
    api: KubeApi | None
    namespace: str


def turn(
    cli: Cli, place: Place, flower: dict[str, FlowerRun], memory: dict[str, Remembered], now: float
) -> tuple[list[Wanted] | None, dict[str, Remembered]]:
    """One turn's work once Flower answered: fetch the image runs' apps, plan, submit, stop; (the runs, the memory).

    The wanted runs it returns are those its report is about (with what the fetch found).
    """
    listed = read_wanted(place.wanted)
    wanted = fetch_apps(listed, memory, place.api, place.namespace, place.work / FETCHED_DIR)
    step = plan(wanted, flower, memory, now)
    memory = step.memory
    for run in step.submit:
        memory[run.uid] = submit(cli, run, place.wanted, place.work)
    for run_id, why in step.stop:
        stop(cli, run_id, why)
    return wanted, memory


def runner(cli: Cli, args: argparse.Namespace, api: KubeApi | None = None) -> int:
    """Mode runner: submit, watch and stop the wanted runs, and report them; never returns.

    It turns every interval and whenever the list of wanted runs changes.
    """
    wanted_dir, work = pathlib.Path(args.wanted), pathlib.Path(args.work)
    state = pathlib.Path(args.state) / STATE_FILE
    state.parent.mkdir(parents=True, exist_ok=True)
    memory = load(state)
    namespace = os.environ.get("POD_NAMESPACE", "")
    if not state.exists() and api is not None and args.report:
        # A new pod without the SuperLink's state: what it did before is still in its last report.
        memory = recalled(api, namespace, args.report)
    reporter = RunReporter(work / REPORT_FILE, api, args.report)
    place = Place(wanted_dir, work, api, namespace)
    while True:
        seen = version(wanted_dir / WANTED_FILE)
        flower = flower_runs(answered(cli, args.interval, "ls"))
        wanted, memory = turn(cli, place, flower, memory, time.time())
        save(state, memory)
        reporter.turn(report(wanted, flower, memory))
        sleep_until_changed(wanted_dir / WANTED_FILE, seen, args.interval)


def main(argv: list[str]) -> int:
    """Run the runner (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="flower-runner")
    parser.add_argument("mode", choices=["runner"])
    parser.add_argument("--address", required=True, help="host:port of the SuperLink's Control API")
    parser.add_argument("--cli-config", choices=["pyproject", "config-toml"], default="config-toml")
    parser.add_argument("--root-certificates", help="the SuperLink's CA certificate; plain without")
    parser.add_argument("--work", required=True, help="a writable directory of this container's own")
    parser.add_argument("--state", required=True, help="where it remembers the runs it submitted")
    parser.add_argument("--wanted", required=True, help="the wanted runs and their apps, as the function lists them")
    parser.add_argument("--kube-credentials", help="the projected ServiceAccount token and cluster CA")
    parser.add_argument("--report", help="the ConfigMap beside it where it reports the runs")
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    api = KubeApi.from_environment(pathlib.Path(args.kube_credentials)) if args.kube_credentials else None
    # The CLI runs in a directory of its own: every path it is given must hold from there.
    args.work, args.state, args.wanted = (str(pathlib.Path(p).absolute()) for p in (args.work, args.state, args.wanted))
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    return runner(Cli(work, args.cli_config, args.address, args.root_certificates), args, api)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
