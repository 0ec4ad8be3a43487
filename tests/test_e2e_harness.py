"""The e2e harness's own resilience (tests/e2e/controlplane.py), without a control plane."""

from __future__ import annotations

import subprocess
import sys

import pytest

from peers import ROOT

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import controlplane  # after its folder is on the path


def hanging_then(answers: list[object]):
    """A subprocess.run that raises TimeoutExpired for each None in answers, else returns the text."""
    calls = []

    def run(args, **_):
        calls.append(args)
        answer = answers.pop(0)
        if answer is None:
            raise subprocess.TimeoutExpired(args, 60)
        return subprocess.CompletedProcess(args, 0, answer, "")

    return run, calls


def test_a_read_that_hangs_is_asked_again(monkeypatch, tmp_path):
    run, calls = hanging_then([None, None, '{"items": [{"kind": "Pod"}]}'])
    monkeypatch.setattr(controlplane.subprocess, "run", run)
    cluster = controlplane.Cluster("hub", tmp_path / "kubeconfig", "kubectl")
    assert cluster.get("pods") == [{"kind": "Pod"}]
    assert len(calls) == controlplane.GET_ATTEMPTS


def test_a_read_that_keeps_hanging_fails(monkeypatch, tmp_path):
    run, _ = hanging_then([None] * controlplane.GET_ATTEMPTS)
    monkeypatch.setattr(controlplane.subprocess, "run", run)
    with pytest.raises(subprocess.TimeoutExpired):
        controlplane.Cluster("hub", tmp_path / "kubeconfig", "kubectl").get("pods")


def test_a_wait_counts_a_hung_call_as_not_yet():
    answers: list[object] = [subprocess.TimeoutExpired(["kubectl"], 60), "ready"]

    def check() -> object:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert controlplane.wait_for("it", check, timeout=5, interval=0) == "ready"
