"""The e2e harness's own resilience (tests/e2e/controlplane.py), without a control plane."""

from __future__ import annotations

import os
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


def plane_in(tmp_path) -> controlplane.ControlPlane:
    """A control plane's harness, nothing started."""
    return controlplane.ControlPlane(
        tools=controlplane.Tools(tmp_path, "1.35", "crank"),
        workdir=tmp_path,
        package=tmp_path / "function.xpkg",
        configuration=tmp_path / "configuration.xpkg",
        function_manifest=tmp_path / "function.yaml",
        configuration_manifest=tmp_path / "configuration.yaml",
    )


def test_control_plane_processes_get_the_go_settings_and_the_function_none_of_the_harness(tmp_path):
    """GOGC reaches what the harness spawns; a pod's process starts from its own env alone."""
    plane = plane_in(tmp_path)
    harness = plane.spawn("harness", ["env"])
    pod = plane.spawn("pod", ["env"], env={"ONLY": "mine"}, inherit=False)
    for proc in (harness, pod):
        proc.popen.wait(timeout=10)
    harness_env = (tmp_path / "logs" / "harness.log").read_text().splitlines()
    assert "GOGC=400" in harness_env
    assert "PATH=" + os.environ["PATH"] in harness_env
    assert (tmp_path / "logs" / "pod.log").read_text().splitlines() == ["ONLY=mine"]


def test_kwokctl_passes_the_go_settings_to_the_clusters_components(monkeypatch, tmp_path):
    """kwokctl starts etcd and the API servers with its own environment: GOGC must be in it."""
    seen = []

    def run(args, **kw):
        seen.append((args, kw.get("env") or {}))
        return subprocess.CompletedProcess(args, 0, "v1.35.0", "")

    monkeypatch.setattr(controlplane.subprocess, "run", run)
    (tmp_path / "kwokctl").touch()  # a path only: run above stands in for it
    plane_in(tmp_path)._kwokctl("get", "clusters")
    (args, env), *_ = [call for call in seen if "clusters" in call[0]]
    assert env["GOGC"] == "400", args
