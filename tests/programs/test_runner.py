"""The runner's decisions, from the wanted runs and the runs Flower lists (function/programs/run_program.py)."""

from __future__ import annotations

import base64
import io
import json
import tomllib
import zipfile

import pytest

from function.programs import flwr_control, run_program
from function.programs.run_program import FlowerRun, Remembered, Wanted

NOW = 1_800_000_000.0
STARTED = "2027-01-15T07:58:20Z"  # NOW - 100 s
ENDED = "2027-01-15T07:59:20Z"


def want(name="a", uid="u1", *, has_app=True, deadline=None, app="a.fab"):
    return Wanted(name, uid, app, {}, deadline, has_app)


def flower(run_id="7", status="running", details="", started=STARTED, ended=None):
    return {run_id: FlowerRun(run_id, status, details, started, ended)}


def test_the_clock_of_the_table():
    assert run_program.seconds(STARTED) == NOW - 100, "the table's runs started 100 s before NOW"


@pytest.mark.parametrize(
    ("wanted", "runs", "memory", "submit", "stop", "after", "reason"),
    [
        ([want()], {}, {}, ["u1"], [], {"u1": Remembered("a")}, "a new run with its app: submitted"),
        ([want(has_app=False)], {}, {}, [], [], {"u1": Remembered("a")}, "its app not delivered yet: waits"),
        (
            [want()], flower(), {"u1": Remembered("a", "7")}, [], [], {"u1": Remembered("a", "7")},
            "submitted before (a restarted runner remembers): never submitted again",
        ),
        (
            [want()], {}, {"u1": Remembered("a", refused="bad")}, [], [], {"u1": Remembered("a", refused="bad")},
            "refused by Flower: not submitted again",
        ),
        (
            [want(deadline=60)], flower(), {"u1": Remembered("a", "7")}, [], [("7", "deadline")],
            {"u1": Remembered("a", "7", stopped_for="deadline")}, "running for 100 s of a 60 s deadline: stopped",
        ),
        (
            [want(deadline=600)], flower(), {"u1": Remembered("a", "7")}, [], [], {"u1": Remembered("a", "7")},
            "within its deadline: left running",
        ),
        (
            [want(deadline=60)], flower(status="pending", started=None), {"u1": Remembered("a", "7")}, [], [],
            {"u1": Remembered("a", "7")}, "not started by Flower yet: its deadline has not begun",
        ),
        (
            [want(deadline=60)], flower(), {"u1": Remembered("a", "7", stopped_for="deadline")}, [],
            [("7", "deadline")], {"u1": Remembered("a", "7", stopped_for="deadline")},
            "stopped for its deadline but still running: stopped again (once a turn)",
        ),
        (
            [want(deadline=60)], flower(status="finished:stopped", ended=ENDED),
            {"u1": Remembered("a", "7", stopped_for="deadline")}, [], [],
            {"u1": Remembered("a", "7", stopped_for="deadline")}, "stopped for its deadline and finished: done",
        ),
        (
            [], flower(), {"u1": Remembered("a", "7")}, [], [("7", "unwanted")],
            {"u1": Remembered("a", "7", stopped_for="unwanted")},
            "its FederationRun deleted while Flower runs it: stopped, remembered until finished",
        ),
        (
            [], flower(status="finished:completed", ended=ENDED), {"u1": Remembered("a", "7")}, [], [], {},
            "its FederationRun deleted once finished: nothing to do to Flower, forgotten",
        ),
        (
            [], flower(status="finished:stopped", ended=ENDED), {"u1": Remembered("a", "7", stopped_for="unwanted")},
            [], [], {}, "stopped as unwanted and now finished: forgotten",
        ),
        ([], {}, {"u1": Remembered("a")}, [], [], {}, "deleted before it was ever submitted: forgotten"),
        (
            None, flower(), {"u1": Remembered("a", "7")}, [], [], {"u1": Remembered("a", "7")},
            "the list never delivered (the runner started before its volume): nothing counts as deleted",
        ),
        (
            [want()], {}, {"u1": Remembered("a", "7")}, [], [], {"u1": Remembered("a", "7", missing=1)},
            "a run Flower does not list (a SuperLink without its database): never submitted twice, counted missing",
        ),
        (
            [want()], flower(status="running"), {"u1": Remembered("a", "7", missing=1)}, [], [],
            {"u1": Remembered("a", "7")}, "listed again (a SuperLink back with its state): no longer missing",
        ),
    ],
)  # fmt: skip
def test_each_turn_submits_and_stops_what_it_must(wanted, runs, memory, submit, stop, after, reason):
    step = run_program.plan(wanted, runs, memory, NOW)
    assert [w.uid for w in step.submit] == submit, reason
    assert step.stop == stop, reason
    assert step.memory == after, reason


def test_the_plan_leaves_the_memory_it_was_given_alone():
    memory = {"u1": Remembered("a", "7")}
    run_program.plan([want(deadline=1)], flower(), memory, NOW)
    assert memory == {"u1": Remembered("a", "7")}


@pytest.mark.parametrize(
    ("runs", "known", "phase", "reason_text", "why"),
    [
        ({}, Remembered("a"), "Pending", "", "about to be submitted"),
        (flower(status="pending", started=None), Remembered("a", "7"), "Pending", "Flower has it pending",
         "submitted, waiting for Flower to start it"),
        (flower(status="starting", started=None), Remembered("a", "7"), "Pending", "Flower has it starting",
         "Flower is starting its ServerApp: not running yet"),
        (flower(status="running"), Remembered("a", "7"), "Running", "", "running"),
        (flower(status="finished:completed", ended=ENDED), Remembered("a", "7"), "Completed", "",
         "Completed only when Flower says it finished completed"),
        (flower(status="finished:failed", details="ServerApp failed with exception: boom", ended=ENDED),
         Remembered("a", "7"), "Failed", "the ServerApp exited: ServerApp failed with exception: boom",
         "a ServerApp that raised: Flower's details carried (1.35 and later record them)"),
        (flower(status="finished:failed", ended=ENDED), Remembered("a", "7"), "Failed",
         "the ServerApp exited: Flower records no more", "failed without details"),
        (flower(status="finished:stopped", ended=ENDED), Remembered("a", "7"), "Stopped", "stopped in Flower",
         "stopped by someone else through the Control API"),
        (flower(status="finished:stopped", ended=ENDED), Remembered("a", "7", stopped_for="deadline"), "Failed",
         "the deadline passed (60 s)", "stopped for its deadline: Failed, not Stopped"),
        (flower(status="running"), Remembered("a", "7", stopped_for="deadline"), "Failed",
         "the deadline passed (60 s)", "past its deadline, the stop asked for: Failed at once"),
        (flower(status="finished:completed", ended=ENDED), Remembered("a", "7", stopped_for="deadline"), "Completed",
         "", "it completed before the stop took: Flower's word wins"),
        (flower(status="finished:weird", ended=ENDED), Remembered("a", "7"), "Failed",
         "Flower finished it as finished:weird", "finished some other way: not Completed"),
        ({}, Remembered("a", refused="Invalid TOML"), "Failed", "the app was refused: Invalid TOML",
         "flwr run refused it"),
        ({}, Remembered("a", "7"), "Pending", "Flower does not list run 7 (yet)", "submitted, not listed (yet)"),
        ({}, Remembered("a", "7", missing=1), "Pending", "Flower does not list run 7 (yet)",
         "one turn without it may race a SuperLink starting again"),
        ({}, Remembered("a", "7", missing=2), "Failed",
         ("the SuperLink no longer knows run 7: it restarted without its state (spec.superlink.persistence keeps "
         "runs across restarts); apply the run again"), "lost with a SuperLink that kept no state: Failed"),
    ],
)  # fmt: skip
def test_the_phase_comes_from_flowers_record(runs, known, phase, reason_text, why):
    got = run_program.entry(want(deadline=60), runs, known)
    assert (got["phase"], got["reason"]) == (phase, reason_text), why
    assert got["runId"] == (known.run_id or ""), why


def test_an_entry_carries_flowers_status_and_times():
    got = run_program.entry(want(), flower(status="finished:completed", ended=ENDED), Remembered("a", "7"))
    assert got == {
        "uid": "u1",
        "runId": "7",
        "phase": "Completed",
        "flowerStatus": "finished:completed",
        "startedAt": STARTED,
        "finishedAt": ENDED,
        "reason": "",
    }


@pytest.mark.parametrize(
    ("run", "reason_text", "why"),
    [
        (want(has_app=False), "waiting for its app (a.fab)", "the FAB not delivered yet"),
        (want(app=None, has_app=False), "the run names no app", "no app at all"),
    ],
)
def test_a_run_without_its_app_stays_pending_and_says_why(run, reason_text, why):
    got = run_program.entry(run, {}, None)
    assert (got["phase"], got["reason"], got["runId"]) == ("Pending", reason_text, ""), why


def test_the_report_is_every_wanted_run_by_name_compact_and_sorted():
    memory = {"u1": Remembered("b", "7")}
    text = run_program.report([want("b", "u1"), want("a", "u2", has_app=False)], flower(), memory)
    assert list(json.loads(text)) == ["a", "b"]
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")), "deterministic text"
    assert run_program.report(None, {}, {}) == "{}"


@pytest.mark.parametrize(
    ("value", "expected", "reason"),
    [
        ("2026-01-02 03:04:05Z", "2026-01-02T03:04:05Z", "as the CLI prints it (1.35 and later)"),
        ("2026-01-02T03:04:05.123456+00:00", "2026-01-02T03:04:05Z", "ISO 8601 with an offset and fractions"),
        ("N/A", None, "not reached yet"),
        ("", None, "empty"),
        ("soon", None, "not a time"),
    ],
)
def test_flowers_timestamps_become_rfc3339(value, expected, reason):
    assert run_program.rfc3339(value) == expected, reason


def test_flowers_listing_is_read_by_run_id():
    answer = {
        "success": True,
        "runs": [
            {"run-id": "12", "status": "finished:failed", "status-details": "boom", "running-at": "N/A"},
            {"run-id": 13, "status": "running", "running-at": "2026-01-02 03:04:05Z", "finished-at": "N/A"},
        ],
    }
    assert run_program.flower_runs(answer) == {
        "12": FlowerRun("12", "finished:failed", "boom", None, None),
        "13": FlowerRun("13", "running", "", "2026-01-02T03:04:05Z", None),
    }


def test_the_wanted_runs_are_read_with_their_apps(tmp_path):
    (tmp_path / "a.fab").write_bytes(b"PK")
    runs = [
        {"name": "a", "uid": "u1", "app": "a.fab", "runConfig": {"lr": 0.1}, "deadlineSeconds": 60},
        {"name": "b", "uid": "u2", "app": "b.fab", "runConfig": {}, "deadlineSeconds": None},
        {"name": "c", "uid": "u3", "app": "../etc/passwd"},
        {"name": "d"},
    ]
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs}))
    assert run_program.read_wanted(tmp_path) == [
        Wanted("a", "u1", "a.fab", {"lr": 0.1}, 60, has_app=True),
        Wanted("b", "u2", "b.fab", {}, None, has_app=False),
        Wanted("c", "u3", "../etc/passwd", {}, None, has_app=False),
    ], "an app outside the volume never counts as there; an entry without a uid is left out"
    assert run_program.read_wanted(tmp_path / "absent") is None


def test_the_memory_survives_a_restart(tmp_path):
    path = tmp_path / run_program.STATE_FILE
    memory = {"u1": Remembered("a", "7", stopped_for="deadline", missing=1), "u2": Remembered("b", refused="no")}
    run_program.save(path, memory)
    assert run_program.load(path) == memory
    assert run_program.load(tmp_path / "none.json") == {}
    assert [p.name for p in tmp_path.iterdir()] == [run_program.STATE_FILE], "no partial file left"


@pytest.mark.parametrize(
    ("text", "memory", "reason"),
    [
        ('{"a":{"uid":"u1","runId":"7","phase":"Running","reason":""}}', {"u1": Remembered("a", "7")},
         "a run Flower took: its ID, so it is followed and never submitted again"),
        ('{"a":{"uid":"u1","runId":"","phase":"Failed","reason":"the app was refused: bad TOML"}}',
         {"u1": Remembered("a", refused="bad TOML")}, "a refused app stays refused"),
        ('{"a":{"uid":"u1","runId":"","phase":"Pending","reason":"waiting for its app"}}', {},
         "never submitted: nothing to remember"),
        ("not json", {}, "not a report"),
        ('{"a": 3, "b": {"runId": "7"}}', {}, "entries that are not a run's"),
    ],
)  # fmt: skip
def test_a_new_pod_recalls_what_it_did_from_its_last_report(text, memory, reason):
    assert run_program.from_report(text) == memory, reason


def test_the_run_config_is_typed_toml():
    text = run_program.run_config_file({"name": 'say "hi"', "rounds": 3, "lr": 0.5, "fast": True, "a.b": "x"})
    assert text == '"a.b" = "x"\n"fast" = true\n"lr" = 0.5\n"name" = "say \\"hi\\""\n"rounds" = 3\n'


def test_a_bundle_reaching_outside_its_directory_is_refused(tmp_path):
    fab = tmp_path / "evil.fab"
    with zipfile.ZipFile(fab, "w") as archive:
        archive.writestr("../outside.py", "x")
    with pytest.raises(ValueError, match="outside"):
        run_program.unpack(fab, tmp_path / "app")


def test_a_bundle_unpacks_without_its_signature_files(tmp_path):
    fab = tmp_path / "app.fab"
    with zipfile.ZipFile(fab, "w") as archive:
        archive.writestr("pyproject.toml", "[project]\n")
        archive.writestr("smoke/server_app.py", "x")
        archive.writestr(".info/CONTENT", "hashes")
    run_program.unpack(fab, tmp_path / "app")
    files = sorted(str(p.relative_to(tmp_path / "app")) for p in (tmp_path / "app").rglob("*") if p.is_file())
    assert files == ["pyproject.toml", "smoke/server_app.py"]


def test_a_long_message_becomes_one_bounded_line():
    said = flwr_control.one_line("Error:\n" + "x" * 1000)
    assert "\n" not in said and len(said) == flwr_control.REASON_LENGTH and said.startswith("Error: x")


APP = (
    '[project]\nname = "smoke"\n\n[tool.flwr.app]\npublisher = "x"\n\n'
    '[tool.flwr.federations]\ndefault = "local"\n\n'
    '[tool.flwr.federations.local]\naddress = "127.0.0.1:9093"\ninsecure = true\n\n'
    "[tool.other]\nkept = 1\n"
)


@pytest.mark.parametrize(
    ("style", "reason"),
    [
        ("config-toml", "from 1.26 `flwr run` would move the app's federations into $FLWR_HOME: commented out"),
        ("pyproject", "up to 1.25 the app's pyproject.toml names the SuperLink: this one's table added"),
    ],
)
def test_an_app_is_pointed_at_this_superlink(tmp_path, style, reason):
    cli = flwr_control.Cli(tmp_path / "work", style, "127.0.0.1:19093", None)
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text(APP)
    cli.connect_app(app)
    parsed = tomllib.loads((app / "pyproject.toml").read_text())
    federations = parsed["tool"]["flwr"].get("federations")
    if style == "config-toml":
        assert federations is None, reason
        assert parsed["tool"]["other"] == {"kept": 1}, "the tables after them are kept"
    else:
        ours = {"address": "127.0.0.1:19093", "insecure": True}
        assert federations == {"default": "local", "local": federations["local"], "federation": ours}, reason


class FakeApi:
    """The Kubernetes API as the reporter sees it: each PATCH answered with the next status."""

    def __init__(self, *statuses):
        self.statuses, self.patches = list(statuses), []

    def call(self, method, path, body=None, content_type=""):
        self.patches.append((method, path, body, content_type))
        status = self.statuses.pop(0)
        return status, {} if status == 200 else {"message": "forbidden"}


def test_the_report_is_written_and_patched_only_when_it_changes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    api = FakeApi(403, 200, 200)
    reporter = run_program.RunReporter(tmp_path / "report.json", api, "fed-runs")
    first = run_program.report([want(has_app=False)], {}, {})
    reporter.turn(first)
    reporter.turn(first)
    assert (tmp_path / "report.json").read_text() == first, "the file always holds the latest report"
    assert len(api.patches) == 2, "a refused write is tried again at the next turn"
    method, path, body, content_type = api.patches[1]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/team-a/configmaps/fed-runs")
    assert body == {"data": {"runs": first}} and content_type == "application/merge-patch+json"
    reporter.turn(first)
    assert len(api.patches) == 2, "unchanged since it was written: not patched again"
    reporter.turn(run_program.report([want()], {}, {}))
    assert len(api.patches) == 3, "changed: patched"
    log = capsys.readouterr().out
    assert log.count("cannot report the runs in ConfigMap team-a/fed-runs: 403 forbidden") == 1, log
    assert log.count("run a: ") == 2, "one line per change of a run's entry"


class FakeCli:
    """The CLI as submit sees it: the answer of `flwr run`, and what it was asked."""

    def __init__(self, answer):
        self.answer, self.calls, self.connected = answer, [], []

    def connect_app(self, app):
        self.connected.append(app)

    def call(self, *argv, app=None, options=()):
        self.calls.append((argv, app, options, (app / "pyproject.toml").read_text()))
        return self.answer


@pytest.mark.parametrize(
    ("answer", "run_id", "refused", "reason"),
    [
        ({"success": True, "run-id": "42"}, "42", "", "Flower took it: its run ID remembered, as a string"),
        ({"success": True, "run-id": 42}, "42", "", "a numeric run ID is remembered as a string"),
        (
            {"success": False, "error-message": "pyproject.toml is invalid:\n- Missing [tool.flwr.app] section"},
            None, "pyproject.toml is invalid: - Missing [tool.flwr.app] section", "refused: Flower's words, one line",
        ),
        (
            {"success": False, "error-message": "Connection to the SuperLink is unavailable."},
            None, "", "the SuperLink not reached: not a refusal, tried again next turn",
        ),
        (
            {"success": False, "error-message": "flwr did not answer within 60 s"},
            None, "", "the CLI timed out: tried again next turn",
        ),
        (
            {"success": False, "error-message": "flwr did not answer within 60 s; its last words: Loading project"},
            None, "", "the CLI timed out after printing something: still tried again next turn",
        ),
    ],
)  # fmt: skip
def test_a_submission_remembers_a_run_id_or_a_refusal(tmp_path, answer, run_id, refused, reason):
    wanted_dir = tmp_path / "wanted"
    wanted_dir.mkdir()
    with zipfile.ZipFile(wanted_dir / "a.fab", "w") as archive:
        archive.writestr("pyproject.toml", "[project]\n")
    cli = FakeCli(answer)
    run = Wanted("a", "u1", "a.fab", {"num-server-rounds": 1}, None, has_app=True)
    known = run_program.submit(cli, run, wanted_dir, tmp_path / "work")
    assert (known.run_id, known.refused) == (run_id, refused), reason
    ((argv, app, options, pyproject),) = cli.calls
    assert argv == ("run",) and pyproject == "[project]\n" and cli.connected == [app]
    assert options == ("--run-config", str(tmp_path / "work" / "apps" / "u1.toml"))
    assert not app.exists(), "the unpacked app is removed once submitted"


# Runs whose app is an image: the runner fetches the bundle its Job wrote into a ConfigMap (run_program.fetch_apps).

NAMESPACE = "team-a"
JOB = "run-a-app"  # the image run's ConfigMap and Job
CONFIGMAP_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{JOB}"
WAITING = f"waiting for its app from its image (Job {JOB})"
BUILD_ERROR = "flwr build failed: Invalid Flower App configuration in '/app/pyproject.toml': - Missing [tool.flwr.app]"


def fab_bytes(pyproject="[project]\n"):
    """A Flower App Bundle as `flwr build` makes one: a zip holding the app's pyproject.toml."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pyproject.toml", pyproject)
    return buffer.getvalue()


def filled(*, fab=None, encoded=None, error=None):
    """A 200 answer: the ConfigMap as its bundler left it (fab base64-encoded, or encoded as is)."""
    body = {"metadata": {"name": JOB}}
    if fab is not None or encoded is not None:
        body["binaryData"] = {"app.fab": encoded if encoded is not None else base64.b64encode(fab).decode()}
    if error is not None:
        body["data"] = {"error": error}
    return 200, body


class ConfigMapApi:
    """The Kubernetes API as the runner's fetch sees it: every GET answered the same, each call recorded."""

    def __init__(self, status, body):
        self.answer, self.calls = (status, body), []

    def call(self, method, path, body=None, content_type=""):  # noqa: ARG002 - KubeApi.call's signature
        self.calls.append((method, path))
        return self.answer


class RunCli:
    """The CLI as a turn uses it: `flwr run` answers answer; each call recorded with the app's pyproject.toml."""

    def __init__(self, answer=None):
        self.answer = answer or {"success": True, "run-id": "42"}
        self.runs, self.stops = [], []

    def connect_app(self, app):
        pass

    def call(self, *argv, app=None, options=()):  # noqa: ARG002 - Cli.call's signature
        if argv[0] == "stop":
            self.stops.append(argv[1])
            return {"success": True}
        self.runs.append((app / "pyproject.toml").read_text())
        return self.answer


def image_run(tmp_path, name="a", uid="u1", configmap=JOB):
    """The wanted runs' volume listing one image run, as the function lists it: no app file, its ConfigMap."""
    wanted = tmp_path / "wanted"
    wanted.mkdir(exist_ok=True)
    runs = [{"name": name, "uid": uid, "app": None, "appConfigMap": configmap, "runConfig": {}}]
    (wanted / "runs.json").write_text(json.dumps({"runs": runs}))
    return wanted


def one_turn(tmp_path, api, cli, memory, flower_runs=None):
    """A runner's turn as the runner takes it: (the report's entry of run a, the memory after)."""
    place = run_program.Place(tmp_path / "wanted", tmp_path / "work", api, NAMESPACE)
    wanted, memory = run_program.turn(cli, place, flower_runs or {}, memory, NOW)
    return json.loads(run_program.report(wanted, flower_runs or {}, memory))["a"], memory


@pytest.mark.parametrize(
    ("answer", "phase", "reason_text", "submitted", "why"),
    [
        (filled(fab=fab_bytes("[project]\nname = 'mine'\n")), "Pending", "Flower does not list run 42 (yet)",
         ["[project]\nname = 'mine'\n"], "its Job wrote the bundle: submitted, the image's app as it was built"),
        (filled(error=BUILD_ERROR), "Failed", f"the app's image could not be bundled: {BUILD_ERROR}", [],
         "its Job wrote why there is no bundle: Failed with its words, never submitted"),
        ((404, {"message": 'configmaps "run-a-app" not found'}), "Pending", WAITING, [],
         "its ConfigMap not created yet: waits, naming the Job"),
        (filled(), "Pending", WAITING, [], "its ConfigMap as the function created it, empty: the Job still builds"),
        ((403, {"message": "forbidden"}), "Pending", f"{WAITING}: the Kubernetes API answered 403 forbidden", [],
         "the runner may not read it (its Role): waits, saying so, as an administrator can fix it"),
        ((0, {"message": "no answer from the Kubernetes API: timed out"}), "Pending",
         f"{WAITING}: no answer from the Kubernetes API: timed out", [], "no answer: waits, saying why"),
        (filled(fab=b"x" * (flwr_control.MAX_FAB_BYTES + 1)), "Failed",
         (f"the app's image could not be bundled: ConfigMap {NAMESPACE}/{JOB} holds a bundle of 524289 bytes; "
          "a run's may have at most 524288"), [],
         "too large for a run (as the function refuses a ConfigMap's): Failed, since its Job has ended"),
        (filled(encoded="not base64!"), "Failed",
         f"the app's image could not be bundled: ConfigMap {NAMESPACE}/{JOB} holds app.fab data that is not base64",
         [], "what Kubernetes would not keep, from a fake or a bug: Failed, waiting would never end"),
        (filled(fab=b"not a zip"), "Failed", "the app was refused: not a Flower App Bundle: File is not a zip file", [],
         "a bundle that is no zip: refused as a bundle beside the list is"),
        (filled(fab=fab_bytes(), error="stale"), "Pending", "Flower does not list run 42 (yet)", ["[project]\n"],
         "a bundle and an error: the bundle wins, it is what the run needs"),
    ],
)  # fmt: skip
def test_an_image_runs_app_comes_from_the_configmap_its_job_fills(tmp_path, answer, phase, reason_text, submitted, why):
    image_run(tmp_path)
    api, cli = ConfigMapApi(*answer), RunCli()
    got, memory = one_turn(tmp_path, api, cli, {})
    assert (got["phase"], got["reason"]) == (phase, reason_text), why
    assert cli.runs == submitted, why
    assert api.calls == [("GET", CONFIGMAP_PATH)], "one look at its ConfigMap, in the pod's namespace"
    again = ConfigMapApi(*answer)
    second, _ = one_turn(tmp_path, again, RunCli(), memory)
    if phase == "Pending" and not submitted:
        assert again.calls == [("GET", CONFIGMAP_PATH)], f"{why}: looked at again next turn"
    else:
        assert again.calls == [], f"{why}: settled, its ConfigMap is not read again"
        assert second["phase"] == phase, why


def test_without_an_api_an_image_run_waits_and_says_so(tmp_path):
    image_run(tmp_path)
    got, _ = one_turn(tmp_path, None, RunCli(), {})
    assert (got["phase"], got["reason"]) == ("Pending", f"{WAITING}: no Kubernetes API in reach")


def test_an_unbundled_image_run_stays_failed_after_a_restart(tmp_path):
    """The bundler's error is the run's end: a runner that restarts (with its state, or from its last report)
    neither submits it nor reads its ConfigMap again."""
    image_run(tmp_path)
    cli = RunCli()
    got, memory = one_turn(tmp_path, ConfigMapApi(*filled(error=BUILD_ERROR)), cli, {})
    assert memory == {"u1": Remembered("a", unbundled=BUILD_ERROR)}
    state = tmp_path / "state.json"
    run_program.save(state, memory)
    report = json.dumps({"a": got})
    for recalled, how in ((run_program.load(state), "its state"), (run_program.from_report(report), "its report")):
        api = ConfigMapApi(*filled(fab=fab_bytes()))  # even were a bundle there now
        again, _ = one_turn(tmp_path, api, cli, recalled)
        assert (again["phase"], again["reason"]) == (got["phase"], got["reason"]), how
        assert api.calls == [] and cli.runs == [], f"restarted with {how}: not fetched, not submitted"


def test_a_fetched_app_is_not_fetched_again_and_is_deleted_once_not_needed(tmp_path):
    wanted = image_run(tmp_path)
    fetched = tmp_path / "work" / "fetched"
    fetched.mkdir(parents=True)
    (fetched / "gone.fab").write_bytes(b"a run no longer listed")
    unreached = RunCli({"success": False, "error-message": "Connection to the SuperLink is unavailable."})
    got, memory = one_turn(tmp_path, ConfigMapApi(*filled(fab=fab_bytes())), unreached, {})
    assert unreached.runs == ["[project]\n"] and got["phase"] == "Pending", "the SuperLink not reached: tried again"
    assert sorted(p.name for p in fetched.iterdir()) == ["u1.fab"], "kept for the next try; the unlisted one deleted"
    api, cli = ConfigMapApi(404, {}), RunCli()
    got, memory = one_turn(tmp_path, api, cli, memory)
    assert api.calls == [], "its file is there: its ConfigMap is not read again"
    assert cli.runs == ["[project]\n"] and memory["u1"].run_id == "42", "submitted from the fetched file"
    one_turn(tmp_path, api, cli, memory, flower(run_id="42"))
    assert list(fetched.iterdir()) == [], "taken by Flower: its file is no longer needed"
    (fetched / "u1.fab").write_bytes(fab_bytes())
    (wanted / "runs.json").write_text(json.dumps({"runs": []}))
    run_program.turn(RunCli(), run_program.Place(wanted, tmp_path / "work", api, NAMESPACE), {}, {}, NOW)
    assert list(fetched.iterdir()) == [], "its FederationRun deleted before it was submitted: its file deleted"


@pytest.mark.parametrize(
    ("raw", "configmap", "why"),
    [
        ({"app": None, "appConfigMap": "run-a-app"}, "run-a-app", "an image run, as the function lists it"),
        ({"app": "a.fab"}, None, "a bundle beside the list: no ConfigMap"),
        ({"app": None, "appConfigMap": "../secrets/x"}, None, "not a ConfigMap's name: never put in an API path"),
        ({"app": None, "appConfigMap": 3}, None, "not a name at all"),
    ],
)
def test_an_image_runs_configmap_is_read_from_the_list(tmp_path, raw, configmap, why):
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [{"name": "a", "uid": "u1", **raw}]}))
    (run,) = run_program.read_wanted(tmp_path)
    assert (run.app_configmap, run.has_app) == (configmap, False), why
