"""The identity program's decisions, from the answers Flower's CLI gives (function/builders/identity_program.py).

What it does against real SuperLinks is in tests/test_real_node_auth.py; these
cases pin the parts that read the CLI's output and pick identities to reap.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time

import pytest

from function.builders import identity, identity_program

NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.timezone.utc)  # noqa: UP017 - as the program writes it


def node(node_id, status, created="2026-11-22 11:00:00Z", offline="N/A"):
    return {"node-id": node_id, "status": status, "created-at": created, "offline-at": offline}


@pytest.mark.parametrize(
    ("nodes", "grace", "reaped", "reason"),
    [
        ([node("1", "online")], 60, [], "online nodes stay"),
        ([node("1", "offline", offline="2026-11-22 11:58:30Z")], 60, ["1"], "offline 90 s, past a 60 s grace"),
        ([node("1", "offline", offline="2026-11-22 11:59:30Z")], 60, [], "offline 30 s: may come back"),
        ([node("1", "registered", created="2026-11-22 11:50:00Z")], 300, ["1"], "registered, never online, 10 min"),
        ([node("1", "registered", created="2026-11-22 11:59:00Z")], 300, [], "registered a minute ago: starting"),
        ([node("1", "unregistered", created="2026-11-01 00:00:00Z")], 60, [], "already gone"),
        ([node("1", "offline", offline="N/A")], 60, [], "no time given: nothing to judge by"),
        ([node("1", "offline", offline="2026-11-22T11:00:00+00:00")], 60, ["1"], "ISO form with an offset"),
        (
            [node("1", "online"), node("2", "offline", offline="2026-11-22 10:00:00Z"), node("3", "offline")],
            60,
            ["2"],
            "only the long-offline one of several",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_stale_identities(nodes, grace, reaped, reason):
    assert identity_program.stale(nodes, NOW, grace) == reaped, reason


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
    assert identity_program.parse(stdout, "") == expected, reason


def test_an_answer_without_json_is_a_failure_that_says_what_came():
    answer = identity_program.parse("Traceback: boom", "(exit 1)")
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
    cli = identity_program.Cli(tmp_path, "config-toml", "superlink:9093", None)
    calls = []
    monkeypatch.setattr(cli, "call", lambda *argv: calls.append(argv) or answer)
    assert cli.register(tmp_path / "key.pub")[0] is done, reason
    assert calls == [("register", str(tmp_path / "key.pub"))]


@pytest.mark.parametrize(
    ("nodes", "node_id", "burned", "reason"),
    [
        ([{"node-id": 7, "status": "unregistered"}], "7", True, "unregistered: its key is refused for good"),
        ([{"node-id": "7", "status": "deleted"}], "7", True, "deleted, as some releases say"),
        ([{"node-id": 7, "status": "offline"}], "7", False, "offline comes back under the same key"),
        ([{"node-id": 8, "status": "unregistered"}], "7", False, "another node's"),
        ([], "7", False, "not listed: cannot tell, keep the key"),
    ],
)
def test_an_unregistered_node_is_told_apart(nodes, node_id, burned, reason):
    assert identity_program.gone(nodes, node_id) is burned, reason


@pytest.mark.parametrize(
    ("style", "path", "target", "reason"),
    [
        ("pyproject", "app/pyproject.toml", [".", "federation"], "up to 1.25: a Flower app's pyproject.toml"),
        ("config-toml", "home/config.toml", ["federation"], "from 1.26: $FLWR_HOME/config.toml"),
    ],
)
def test_the_connection_is_written_where_the_release_reads_it(tmp_path, style, path, target, reason):
    cli = identity_program.Cli(tmp_path, style, "fed-superlink.ns.svc:9093", "/app/tls/ca.crt")
    text = (tmp_path / path).read_text()
    assert 'address = "fed-superlink.ns.svc:9093"' in text, reason
    assert 'root-certificates = "/app/tls/ca.crt"' in text
    assert "insecure" not in text
    assert cli.target == target


def test_the_readiness_check_follows_the_marker_age(tmp_path):
    """The sidecar's probe: ready while the SuperLink confirmed the key recently."""
    marker = tmp_path / identity_program.REGISTERED

    def probe(max_age: str) -> int:
        return subprocess.run([sys.executable, "-c", identity.FRESH, str(marker), max_age], check=False).returncode

    marker.touch()
    assert probe("90") == 0
    old = time.time() - 120
    os.utime(marker, (old, old))
    assert probe("90") == 1
    marker.unlink()
    assert probe("90") != 0, "no registration yet: not ready"
