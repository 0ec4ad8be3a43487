"""The identity program's decisions, from the answers Flower's CLI gives (function/programs/identity_program.py).

What it does against real SuperLinks is in tests/real/test_real_node_auth.py; these
cases pin the registrar's decisions (register, keep, unregister) and the parts
that read the CLI's output.
"""

from __future__ import annotations

import copy
import os
import sys
import time

import pytest

from function.programs import flwr_control, identity_program
from function.programs.identity_program import Registered

NOW = 1_000_000.0
GRACE = 600.0
K1, K2 = "ecdsa-sha2-nistp384 AAAAone", "ecdsa-sha2-nistp384 AAAAtwo"
HOLDER = "default/team-a/PersistentVolumeClaim/supernode-identity-fed-default-0"


LIST = "authorized-keys"
SHARD = "authorized-keys-07"


def listed(*keys, hint=None, source=LIST, missing=()):
    """The listing of keys, each of HOLDER, all in one file (the list itself by default)."""
    return identity_program.Listing(
        dict.fromkeys(keys, (HOLDER, hint)), dict.fromkeys(keys, source), frozenset(missing)
    )


@pytest.mark.parametrize(
    ("listing", "nodes", "memory", "register", "unregister", "after", "reason"),
    [
        (listed(K1), {}, {}, [K1], [], {}, "a new published key is registered"),
        (
            listed(K1),
            {"7": "online"},
            {K1: Registered("7")},
            [],
            [],
            {K1: Registered("7", source=LIST)},
            "registered: nothing",
        ),
        (
            listed(K1),
            {"7": "offline"},
            {K1: Registered("7")},
            [],
            [],
            {K1: Registered("7", source=LIST)},
            "offline for however long, still published: away, not gone, never unregistered",
        ),
        (
            listed(K1),
            {},
            {K1: Registered("7")},
            [K1],
            [],
            {K1: Registered("7", source=LIST)},
            "the SuperLink lost its registrations (no database): registered again",
        ),
        (
            listed(K1),
            {"7": "unregistered"},
            {K1: Registered("7")},
            [],
            [],
            {K1: Registered("7", retired=True, source=LIST)},
            "unregistered by hand: Flower never takes it back, so it is not tried again",
        ),
        (
            listed(K1),
            {"7": "unregistered"},
            {K1: Registered("7", retired=True)},
            [],
            [],
            {K1: Registered("7", retired=True, source=LIST)},
            "retired before: nothing, and nothing said again",
        ),
        (
            listed(K1, hint="7"),
            {"7": "online"},
            {},
            [K1],
            [],
            {},
            (
                "a node ID in the line names a node, not the key's: registered as any new key, never adopted "
                "(a publication naming another's node would get that node unregistered when it goes)"
            ),
        ),
        (listed(K1, hint="7"), {"7": "unregistered"}, {}, [K1], [], {}, "a hint whose node is gone adopts nothing"),
        (
            listed(K1),
            {"": "online"},
            {K1: Registered("")},
            [],
            [],
            {K1: Registered("", source=LIST)},
            "in use under a node it cannot name: left alone",
        ),
        (
            listed(),
            {"7": "offline"},
            {K1: Registered("7")},
            [],
            [],
            {K1: Registered("7", NOW)},
            "just left the list: the grace period starts",
        ),
        (
            listed(),
            {"7": "offline"},
            {K1: Registered("7", NOW - GRACE + 1)},
            [],
            [],
            {K1: Registered("7", NOW - GRACE + 1)},
            "out of the list within the grace period: kept",
        ),
        (
            listed(),
            {"7": "offline"},
            {K1: Registered("7", NOW - GRACE - 1)},
            [],
            [(K1, "7")],
            {K1: Registered("7", NOW - GRACE - 1)},
            "out of the list past the grace period: its holder is gone",
        ),
        (
            listed(),
            {},
            {K1: Registered("7", NOW - GRACE - 1)},
            [],
            [],
            {},
            "past the grace period and unknown to the SuperLink: forgotten, nothing to unregister",
        ),
        (
            None,
            {"7": "offline"},
            {K1: Registered("7", NOW - GRACE - 1)},
            [],
            [],
            {K1: Registered("7", NOW - GRACE - 1)},
            "no list written yet: nothing counts as absent",
        ),
        (
            listed(K1),
            {"7": "online"},
            {K1: Registered("7", NOW - GRACE - 1)},
            [],
            [],
            {K1: Registered("7", source=LIST)},
            "back in the list: the grace period ends",
        ),
        (
            listed(K2),
            {"7": "online"},
            {K1: Registered("7")},
            [K2],
            [],
            {K1: Registered("7", NOW)},
            "one key replaced by another: the new one registered, the old one's grace starts",
        ),
        (
            listed(K1, source=SHARD),
            {"7": "online"},
            {K1: Registered("7", source=LIST)},
            [],
            [],
            {K1: Registered("7", source=SHARD)},
            "moved from the list to a group's shard (its cluster now composed by a FederationCluster): kept",
        ),
        (
            listed(missing=[SHARD]),
            {"7": "online"},
            {K1: Registered("7", NOW - GRACE - 1, source=SHARD)},
            [],
            [],
            {K1: Registered("7", source=SHARD)},
            "its shard named but not delivered, however long: not out of the list, its clock stops",
        ),
        (
            listed(),
            {"7": "online"},
            {K1: Registered("7", source=SHARD)},
            [],
            [],
            {K1: Registered("7", NOW, source=SHARD)},
            "its shard no longer named (the group's clusters left): out of the list, the grace period starts",
        ),
        (
            listed(),
            {"7": "unregistered"},
            {K1: Registered("7", NOW - GRACE - 1)},
            [],
            [],
            {K1: Registered("7", NOW - GRACE - 1, retired=True)},
            "away past the grace period and unregistered by hand meanwhile: remembered as retired",
        ),
        (
            listed(),
            {"7": "unregistered"},
            {K1: Registered("7", NOW - GRACE - 1, retired=True)},
            [],
            [],
            {K1: Registered("7", NOW - GRACE - 1, retired=True)},
            "retired and out of the list: remembered, should it come back after an outage of the carriage",
        ),
        (
            listed(),
            {},
            {K1: Registered("7", NOW - identity_program.RETIRED_REMEMBERED - 1, retired=True)},
            [],
            [],
            {},
            "retired and out of the list for longer than any outage: forgotten",
        ),
        (
            listed(K1),
            {"7": "unregistered"},
            {K1: Registered("7", NOW - GRACE - 1, retired=True)},
            [],
            [],
            {K1: Registered("7", retired=True, source=LIST)},
            "back after the registrar unregistered it: not registered again (Flower refuses), still retired",
        ),
    ],
)
def test_the_registrar_decides(listing, nodes, memory, register, unregister, after, reason):
    given = copy.deepcopy(memory)
    step = identity_program.plan(listing, nodes, memory, NOW, GRACE)
    assert (step.register, step.unregister, step.memory) == (register, unregister, after), reason
    assert memory == given, "the memory given is not changed in place"


def test_the_list_and_the_shards_it_names_are_read_together(tmp_path):
    (tmp_path / LIST).write_text(f"{K1} {HOLDER} -\n")
    (tmp_path / identity_program.SHARDS_FILE).write_text(f"{SHARD}\nauthorized-keys-08\n../etc\n..data\n")
    (tmp_path / SHARD).write_text(f"{K2} {HOLDER} 42\n{K1} {HOLDER} -\n")
    # A shard the list does not name (a group whose clusters left, not yet deleted): not read.
    (tmp_path / "authorized-keys-09").write_text(f"ecdsa-sha2-nistp384 AAAAthree {HOLDER} -\n")
    got = identity_program.listing(tmp_path / LIST)
    assert got == identity_program.Listing(
        {K1: (HOLDER, None), K2: (HOLDER, "42")}, {K1: LIST, K2: SHARD}, frozenset({"authorized-keys-08"})
    )
    assert identity_program.listing(tmp_path / "absent") is None


def test_a_retired_key_is_named_with_its_holder_once():
    step = identity_program.plan(listed(K1), {"7": "unregistered"}, {K1: Registered("7")}, NOW, GRACE)
    assert len(step.said) == 1 and HOLDER in step.said[0] and "new one" in step.said[0]
    again = identity_program.plan(listed(K1), {"7": "unregistered"}, step.memory, NOW, GRACE)
    assert again.said == []


def test_a_retired_key_back_in_the_list_is_named_once():
    memory = {K1: Registered("7", NOW - GRACE - 1, retired=True)}
    step = identity_program.plan(listed(K1), {"7": "unregistered"}, memory, NOW, GRACE)
    assert len(step.said) == 1 and HOLDER in step.said[0] and "back" in step.said[0]
    assert identity_program.plan(listed(K1), {"7": "unregistered"}, step.memory, NOW, GRACE).said == []


D1, D2 = identity_program.key_digest(K1), identity_program.key_digest(K2)


@pytest.mark.parametrize(
    ("memory", "listing", "expected", "reason"),
    [
        ({K1: Registered("7")}, listed(K1), "", "nothing retired: an empty report"),
        ({K1: Registered("7", retired=True)}, listed(K1), f"{D1} {HOLDER}\n", "a retired key, named with its holder"),
        ({K1: Registered("7", NOW, retired=True)}, {}, "", "retired and out of the list: nobody holds it to replace"),
        ({K1: Registered("7", retired=True)}, None, "", "no list yet: nothing to report"),
        (
            {K2: Registered("8", retired=True), K1: Registered("7", retired=True)},
            listed(K1, K2),
            "".join(sorted([f"{D1} {HOLDER}\n", f"{D2} {HOLDER}\n"])),
            "sorted, one a line: the same memory always makes the same report",
        ),
    ],
)
def test_the_registrar_reports_retired_keys_still_held(memory, listing, expected, reason):
    assert identity_program.retired_report(memory, listing) == expected, reason


def test_a_report_names_keys_by_digest_never_by_key():
    report = identity_program.retired_report({K1: Registered("7", retired=True)}, listed(K1))
    assert K1.split()[1] not in report
    assert identity_program.key_digest(K1 + "\n") == D1, "the digest ignores the line's end, as files keep it"


def _rekey_args(tmp_path, text):
    keys, report = tmp_path / "keys", tmp_path / "retired"
    keys.mkdir(exist_ok=True)
    if text is not None:
        report.write_text(text)
    parser_args = ["rekey", f"--key-dir={keys}", f"--retired={report}", "--once"]
    return keys, parser_args


@pytest.mark.parametrize(
    ("retire", "made", "reason"),
    [
        (None, False, "no report (no key retired in the namespace): the key stays"),
        ("other", False, "another pod's key retired: this one stays"),
        ("own", True, "this pod's key retired: a new key pair replaces it"),
    ],
)
def test_the_rekey_sidecar_replaces_only_its_own_retired_key(tmp_path, retire, made, reason):
    keys, argv = _rekey_args(tmp_path, None)
    public = identity_program.ensure_key(keys).read_text()
    before = (keys / identity_program.KEY).read_bytes()
    if retire is not None:
        digest = identity_program.key_digest(public) if retire == "own" else "0123456789abcdef"
        (tmp_path / "retired").write_text(f"{digest}\n")
    # No Kubernetes API in reach (no token): the new key is made, and publishing it is left to a retry.
    assert identity_program.main(argv) == 0
    after = (keys / identity_program.KEY).read_bytes()
    assert (after != before) == made, reason
    if made:
        assert (keys / identity_program.PUBLIC_KEY).read_text() != public
        assert (keys / identity_program.KEY).stat().st_mode & 0o077 == 0, "the new private key is its owner's alone"


@pytest.mark.parametrize(
    ("text", "expected", "reason"),
    [
        (f"{K1} {HOLDER} -\n", {K1: (HOLDER, None)}, "published before any registration"),
        (f"{K1} {HOLDER} 42\n", {K1: (HOLDER, "42")}, "published with the node it registered as"),
        (f"{K1} {HOLDER} -\n{K2} {HOLDER} 7", {K1: (HOLDER, None), K2: (HOLDER, "7")}, "one key a line"),
        ("", {}, "no key published"),
        (f"{K1} {HOLDER}\n", {}, "a line missing a field is not a key"),
    ],
)
def test_the_listed_keys_are_read(text, expected, reason):
    assert identity_program.authorized(text) == expected, reason


def test_the_memory_survives_a_restart(tmp_path):
    memory = {K1: Registered("7"), K2: Registered("9", NOW, retired=True)}
    path = tmp_path / identity_program.REGISTRATIONS
    identity_program.save(path, memory)
    assert identity_program.load(path) == memory
    assert identity_program.load(tmp_path / "none.json") == {}
    assert [p.name for p in tmp_path.iterdir()] == [identity_program.REGISTRATIONS], "no partial file left"


@pytest.mark.parametrize(
    ("stdout", "expected", "reason"),
    [
        ('{"success": true, "node-id": 42}', {"success": True, "node-id": 42}, "one line (1.41)"),
        ('{\n  "success": true,\n  "node-id": 42\n}\n', {"success": True, "node-id": 42}, "pretty-printed (1.25)"),
        (
            'Loading project configuration...\n{"success": false, "error-message": "x"}',
            {"success": False, "error-message": "x"},
            "text before the JSON",
        ),
    ],
)
def test_cli_answers_are_read(stdout, expected, reason):
    assert flwr_control.parse(stdout, "") == expected, reason


def test_an_answer_without_json_is_a_failure_that_says_what_came():
    answer = flwr_control.parse("Traceback: boom", "(exit 1)")
    assert answer["success"] is False
    assert "Traceback: boom" in answer["error-message"]
    assert "(exit 1)" in answer["error-message"]


@pytest.mark.parametrize(
    ("answer", "done", "reason"),
    [
        ({"success": True, "node-id": 7}, True, "newly registered"),
        (
            {"success": False, "error-message": "[code: 23] Public key already in use while registering"},
            True,
            "already registered (1.41 wording)",
        ),
        (
            {"success": False, "error-message": "FAILED_PRECONDITION: Public key already in use"},
            True,
            "already registered (1.25 wording)",
        ),
        ({"success": False, "error-message": "Connection to the SuperLink is unavailable"}, False, "not reached"),
    ],
)
def test_registration_outcomes(tmp_path, monkeypatch, answer, done, reason):
    cli = flwr_control.Cli(tmp_path, "config-toml", "superlink:9093", None)
    calls = []
    monkeypatch.setattr(cli, "call", lambda *argv: calls.append(argv) or answer)
    assert identity_program.register(cli, tmp_path / "key.pub")[0] is done, reason
    assert calls == [("supernode", "register", str(tmp_path / "key.pub"))]


@pytest.mark.parametrize(
    ("style", "path", "target", "reason"),
    [
        ("pyproject", "app/pyproject.toml", [".", "federation"], "up to 1.25: a Flower app's pyproject.toml"),
        ("config-toml", "home/config.toml", ["federation"], "from 1.26: $FLWR_HOME/config.toml"),
    ],
)
def test_the_connection_is_written_where_the_release_reads_it(tmp_path, style, path, target, reason):
    cli = flwr_control.Cli(tmp_path, style, "fed-superlink.ns.svc:9093", "/app/tls/ca.crt")
    text = (tmp_path / path).read_text()
    assert 'address = "fed-superlink.ns.svc:9093"' in text, reason
    assert 'root-certificates = "/app/tls/ca.crt"' in text
    assert "insecure" not in text
    assert cli.target == target


def _swap(path):
    """The kubelet's update of a ConfigMap volume: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_text("ecdsa-sha2-nistp384 AAAAnew holder -\n")
    new.replace(path)


@pytest.mark.parametrize(
    ("start", "change", "woke_at", "reason"),
    [
        ("list", None, 30.0, "nothing changes: the whole interval, no turn wasted on the flwr CLI"),
        ("list", _swap, 2.0, "the kubelet swaps the list in: acted on within a second, not at the interval"),
        ("list", lambda p: p.write_text("other\n"), 2.0, "rewritten in place, another size: acted on at once"),
        (None, lambda p: p.write_text("first\n"), 2.0, "the first list arrives: acted on at once"),
        ("list", lambda p: p.unlink(), 2.0, "the list goes: acted on at once"),
    ],
)
def test_a_waiting_registrar_wakes_when_its_file_changes(tmp_path, monkeypatch, start, change, woke_at, reason):
    path = tmp_path / "authorized-keys"
    if start is not None:
        path.write_text(start)
    clock = [0.0]

    class Time:
        @staticmethod
        def monotonic():
            return clock[0]

        @staticmethod
        def sleep(seconds):
            clock[0] += seconds
            if change is not None and clock[0] == 2.0:
                change(path)  # in the second second: seen at the look that ends it

    monkeypatch.setattr(flwr_control, "time", Time)
    flwr_control.sleep_until_changed(path, flwr_control.version(path), 30.0)
    assert clock[0] == woke_at, reason


BIG = "x" * 1_000_000 + "\n"


def _prints_where_it_runs():
    sys.stdout.write(f"{os.getcwd()} {os.environ.get('FLWR_HOME')} {' '.join(sys.argv)}\n")
    sys.stderr.write("to stderr\n")


def _changes_its_globals():
    os.environ["LEAKED"] = "1"
    sys.argv.append("leaked")
    identity_program.KEY = "leaked"
    raise SystemExit(0)


@pytest.mark.parametrize(
    ("entry", "code", "stdout", "stderr", "reason"),
    [
        (_prints_where_it_runs, 0, "{cwd} {cwd}/home flwr supernode ls\n", "to stderr\n",
         "returns: exit 0, run in its directory with its environment and argv, both streams kept apart"),
        (lambda: sys.exit(3), 3, "", "", "sys.exit(3): the command's exit code"),
        (lambda: sys.exit("refused"), 1, "", "refused\n", "sys.exit(message): exit 1, the message on stderr"),
        (lambda: 4, 4, "", "", "an entry point returning a code, as console scripts may"),
        (lambda: 1 / 0, 1, "", "ZeroDivisionError", "an error: exit 1 with its traceback, the caller unharmed"),
        (lambda: sys.stdout.write(BIG) and None, 0, BIG, "", "more output than a pipe holds"),
        (_changes_its_globals, 0, "", "", "what the command changes stays in its own process"),
    ],
)  # fmt: skip
def test_a_loaded_cli_runs_as_its_command_would(tmp_path, entry, code, stdout, stderr, reason):
    env = {**os.environ, "FLWR_HOME": f"{tmp_path}/home"}
    argv_before, key_before = list(sys.argv), identity_program.KEY
    ran = flwr_control.run_forked(entry, ["flwr", "supernode", "ls"], tmp_path, env, 30)
    assert ran is not None, reason
    assert ran[0] == code, (reason, ran)
    assert ran[1] == stdout.format(cwd=tmp_path), reason
    assert stderr in ran[2] if stderr else ran[2] == "", (reason, ran[2])
    assert "LEAKED" not in os.environ and sys.argv == argv_before and identity_program.KEY == key_before, reason
    assert os.getcwd() != str(tmp_path), reason


def _says_then_hangs() -> None:
    # No flush: a line reaches the file as it is written, as Flower's CLI prints a run's logs.
    sys.stdout.write("INFO :      [ROUND 2]\n")
    sys.stderr.write("waiting for results\n")
    time.sleep(60)


def test_a_cli_call_past_its_timeout_is_killed_and_leaves_its_last_words(tmp_path):
    started = time.monotonic()
    code, stdout, stderr = flwr_control.run_forked(_says_then_hangs, ["flwr"], tmp_path, dict(os.environ), 0.5)
    assert time.monotonic() - started < 10, "killed at the timeout, not waited for"
    assert code is None, "past the timeout, no exit code"
    assert (stdout, stderr) == ("INFO :      [ROUND 2]\n", "waiting for results\n"), "what it printed survives"
    assert flwr_control.last_words(stdout, stderr) == "INFO :      [ROUND 2] | waiting for results"


def test_a_subprocess_past_its_timeout_is_killed_and_leaves_its_last_words(tmp_path):
    argv = [sys.executable, "-u", "-c", "import time; print('started', flush=True); time.sleep(60)"]
    code, stdout, stderr = flwr_control.run_subprocess(argv, tmp_path, dict(os.environ), 2)
    assert (code, stdout.strip(), stderr) == (None, "started", "")


@pytest.mark.parametrize(
    ("name", "loads", "reason"),
    [
        ("pytest", True, "a console script of this interpreter: imported once, run in children"),
        ("no-such-command", False, "none here (flwr installed for another Python): each call starts the command"),
    ],
)
def test_the_cli_is_loaded_when_this_python_has_it(name, loads, reason):
    entry = flwr_control.load_entry_point(name)
    assert callable(entry) is loads, reason


def test_a_cli_call_past_its_timeout_says_so_with_its_last_words(tmp_path, monkeypatch):
    monkeypatch.setattr(flwr_control, "CLI_TIMEOUT", 0.5)
    cli = flwr_control.Cli(tmp_path, "config-toml", "127.0.0.1:9093", None)
    cli.entry = _says_then_hangs
    answer = cli.call("supernode", "ls")
    assert answer == {
        "success": False,
        "error-message": "flwr did not answer within 0 s; its last words: INFO :      [ROUND 2] | waiting for results",
    }
