"""Rendered Federations run as real Flower processes, and every SuperNode comes online.

The pod runner (podrunner.py) plays kubelet, kube-proxy and cluster DNS for
what `function render` composes, with the images mapped to the venv of the
Flower release the Federation names. A container added to the SuperLink's pod
runs that release's `flwr` CLI against the Control API on the pod's loopback,
where `kubectl port-forward` leads a user (nothing else reaches it), and the
test waits until the CLI lists every SuperNode as online and no container has
exited (the runner restarts none). Needs root (network and
mount namespaces), and openssl for TLS.

A release's venv is $FLWR_VENVS/<release> (as `make unit` builds them), for
1.25.0 also $FLWR_PYTHON's.
"""

from __future__ import annotations

import pathlib
import re
import ssl
import subprocess
import time
import urllib.request
from types import SimpleNamespace

import pytest

from function.builders.supernodes import GIVE_UP_AFTER_SECONDS
from function.releases.flower import CONTROL_PORT
from support.peers import need
from support.podrunner import Manifest, PodRunner, flower_images, unwrap
from support.real_flower import (
    NAMESPACE,
    ONLINE_TIMEOUT,
    RELEASES,
    RUN_TIMEOUT,
    LocalCli,
    Release,
    add_app,
    add_cli,
    federation,
    flwr_run,
    grpc_probe,
    images,
    log_marks,
    online_supernodes,
    pods_after_run,
    render,
    run_failed,
    run_once_more_after_pull_race,
    tls_secret,
    venv_python,
)
from support.real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest

# SuperNodes can be online before a sidecar that cannot connect has given up (a few seconds): the pods must
# have been up this long before the containers are counted.
SETTLE = 6
OFFLINE_WINDOW = 10  # the healthy ones are online within seconds


@pytest.mark.parametrize(
    ("isolation", "tls"),
    [("subprocess", False), ("process", False), ("subprocess", True), ("process", True)],
    ids=["subprocess-insecure", "process-insecure", "subprocess-tls", "process-tls"],
)
def test_every_supernode_comes_online(release: Release, tmp_path: pathlib.Path, isolation: str, *, tls: bool):
    with federation(release, tmp_path, isolation, tls=tls) as (runner, supernodes):
        started = time.monotonic()  # the pods' start: a wait for the runner's lock is no part of it
        online, last = online_supernodes(runner, started + release.online_timeout, len(supernodes))
        time.sleep(max(0, started + SETTLE - time.monotonic()))
        report = f"exited: {runner.exited()}; flwr said: {last}\n{runner.logs()}"
        assert runner.exited() == [], report
        assert online == len(supernodes), report
        # The rendered HTTP readiness probes answer as the kubelet would ask.
        probes = http_readiness(runner)
        assert all(status == 200 for *_, status in probes), probes
        # From 1.40 the Fleet proxy's, which passes GET /health on to the SuperLink's loopback listener.
        assert bool(probes) == (tuple(map(int, release.version.split(".")[:2])) >= (1, 40)), probes


def http_readiness(runner: PodRunner) -> list[tuple[str, str, int]]:
    """GET each httpGet readiness probe on its pod's address, as the kubelet does: (pod, container, status)."""
    out = []
    for pod in runner.pods:
        for c in pod.spec["containers"]:
            get = (c.get("readinessProbe") or {}).get("httpGet")
            if get is None:
                continue
            url = f"{get.get('scheme', 'HTTP').lower()}://{pod.ip}:{get['port']}{get.get('path', '/')}"
            # The kubelet does not verify a probe's certificate either.
            context = ssl._create_unverified_context()  # noqa: S323 - as the kubelet
            with urllib.request.urlopen(url, timeout=5, context=context) as response:  # noqa: S310 - our own URL
                out.append((pod.name, c["name"], response.status))
    return out


@pytest.mark.parametrize("release", RELEASES[-1:], indirect=True)  # about the runner: one release will do
def test_a_supernode_cannot_reach_the_superlink_on_its_own_loopback(release: Release, tmp_path: pathlib.Path):
    """Pods are apart, as in a cluster: the check above fails for an address only one machine would serve."""

    def loopback(manifest: Manifest) -> None:
        if manifest["kind"] == "StatefulSet" and manifest["metadata"]["name"].endswith("-supernode-default"):
            containers = manifest["spec"]["template"]["spec"]["containers"]
            container = next(c for c in containers if c["name"] == "supernode")
            port = next(a for a in container["args"] if a.startswith("--superlink=")).rsplit(":", 1)[1]
            container["args"] = [
                f"--superlink=127.0.0.1:{port}" if a.startswith("--superlink=") else a for a in container["args"]
            ]

    with federation(release, tmp_path, "subprocess", tls=False, change=loopback) as (runner, supernodes):
        online, last = online_supernodes(runner, time.monotonic() + OFFLINE_WINDOW, len(supernodes))
        assert '"success": true' in last, last  # the CLI reached the SuperLink
        assert online == 0, f"{last}\n{runner.logs()}"


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.25.0", "the oldest supported: its CLI reads the federation from the app's pyproject.toml"),
        ("1.41.0", "SuperNodes on HTTP, through the Fleet API proxy"),
        ("1.42.0", "the newest supported"),
    ],
    indirect=["release"],
)
@pytest.mark.parametrize(("isolation", "tls"), [("process", True)], ids=["process-tls"])
def test_a_federated_run_completes(release: Release, reason: str, tmp_path: pathlib.Path, isolation: str, *, tls: bool):
    """`flwr run` of examples/app through a rendered Federation: every round trains on every SuperNode.

    From this machine, as the docs tell users: `kubectl port-forward` to the
    SuperLink pod's Control port, `flwr` with the SuperLink's CA (its
    certificate names 127.0.0.1), not through the Service.
    """

    def attempt(n: int) -> tuple[subprocess.CompletedProcess[str], str]:
        tmp = tmp_path / f"attempt-{n}"
        tmp.mkdir()
        with federation(release, tmp, isolation, tls=tls) as (runner, supernodes):
            superlink = next(p for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "superlink")
            local = runner.port_forward(NAMESPACE, superlink.name, CONTROL_PORT)
            cli = LocalCli.at(release, tmp, f"127.0.0.1:{local}", tmp / "ca.crt")
            cli.wait_online(len(supernodes), runner)
            marks = log_marks(runner)
            return cli("run", ".", "k8s", "--stream", timeout=RUN_TIMEOUT), pods_after_run(runner, marks)

    proc, logs = run_once_more_after_pull_race(attempt)
    # Two rounds of +1 on each SuperNode, averaged: 2.0 everywhere, from both SuperNodes' work.
    assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, run_failed(reason, proc, logs)
    assert "Received 2 results and 0 failures" in proc.stdout, run_failed(reason, proc, logs)


class _LoggedRunner:
    """What pods_after_run reads of a PodRunner: its pods' containers' logs, what exited, the logs' tails."""

    def __init__(self, tmp: pathlib.Path, names: list[str]) -> None:
        container = [SimpleNamespace(log=tmp / f"{name}.log") for name in names]
        self.pods = [
            SimpleNamespace(name=name, containers={"main": c}) for name, c in zip(names, container, strict=True)
        ]

    def write(self, pod: int, text: str) -> None:
        with self.pods[pod].containers["main"].log.open("a") as log:
            log.write(text)

    def exited(self) -> list[str]:
        return ["default/fed-supernode-0/supernode: exit 1"]

    def logs(self, lines: int) -> str:
        return f"the pods' logs ({lines} lines each)"


def test_a_failed_runs_first_line_says_why(tmp_path: pathlib.Path):
    """CI's summary shows a message's first line alone: a run that printed no result names there its exit code,
    the containers that had exited, the trouble its pods logged during the run (not before it), and the CLI's
    last words, colours taken out; everything else follows."""
    runner = _LoggedRunner(tmp_path, ["fed-superlink-0", "fed-supernode-0"])
    runner.write(0, "\x1b[91mERROR \x1b[0m: Exit Code: 305, before the run\n")
    marks = log_marks(runner)
    runner.write(0, "INFO : all well\n")
    runner.write(1, "\x1b[91mERROR \x1b[0m: Failed to receive message 26cc: pull timed out\n")
    logs = pods_after_run(runner, marks)
    proc = subprocess.CompletedProcess(
        ["flwr"], -9, "Starting run\n\x1b[92mINFO \x1b[0m: Round 1\n\n", "killed after 480 s\n"
    )
    first, _, rest = run_failed("over HTTP", proc, logs).partition("\n")
    assert first == (
        "over HTTP: exit -9; exited: ['default/fed-supernode-0/supernode: exit 1']; "
        "logged: fed-supernode-0/main: ERROR : Failed to receive message 26cc: pull timed out; "
        "flwr said: Starting run | INFO : Round 1 | killed after 480 s"
    )
    assert "the pods' logs (200 lines each)" in rest


@pytest.mark.parametrize("release", ["1.41.0"], indirect=True)
def test_a_pool_before_1_40_joins_through_the_grpc_fleet_adapter(release: Release, tmp_path: pathlib.Path):
    """The move across 1.40 (examples/claims/flower-upgrade.yaml): a 1.41 SuperLink, a 1.41 pool and a 1.25 pool,
    TLS and process isolation; both pools come online and a `flwr run` trains on both."""
    old = "1.25.0"
    old_python = venv_python(old)
    need(old_python is not None, f"a venv of Flower {old} (FLWR_VENVS or FLWR_PYTHON; `make unit`)")
    assert old_python is not None
    name = "fed-upgrade"
    federation = {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "version": release.version,
            "mode": "StatefulSet",
            "isolationMode": "process",
            "tls": {"secretName": "superlink-tls"},
            "supernodes": {
                "pools": [
                    {"name": "upgraded", "replicas": 1},
                    {"name": "not-yet", "replicas": 1, "images": {"supernode": f"flwr/supernode:{old}"}},
                ]
            },
        },
    }
    secrets = [tls_secret(tmp_path, f"{name}-superlink")]
    rendered = render(tmp_path, federation, secrets)
    manifests = [unwrap(r) for r in rendered]
    extra = [*add_cli(manifests, release, tls=True), *add_app(manifests)]
    # Each image at its own release: the 1.25 pool's SuperNode and (defaulted) SuperExec from the 1.25 venv.
    pod_images = images(release.bin)
    pod_images |= {f"{repo}:{old}": image for repo, image in flower_images(old_python.parent).items()}
    with PodRunner(tmp_path / "cluster", pod_images, secrets) as runner:
        runner.start([*rendered, *extra])
        supernodes = [p for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "supernode"]
        assert sorted(c["image"] for p in supernodes for c in p.spec["containers"]) == [
            f"flwr/superexec:{old}",
            f"flwr/superexec:{release.version}",
            f"flwr/supernode:{old}",
            f"flwr/supernode:{release.version}",
        ]
        # The 1.25 pool dials gRPC: its wait is the old release's.
        deadline = time.monotonic() + Release(old, old_python.parent).online_timeout
        online, last = online_supernodes(runner, deadline, len(supernodes))
        assert online == len(supernodes) == 2, f"{last}\n{runner.logs()}"
        marks = log_marks(runner)
        proc = flwr_run(runner, release)
        logs = pods_after_run(runner, marks)
        reason = "a 1.41 pool and a 1.25 pool"
        assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, run_failed(reason, proc, logs)
        assert "Received 2 results and 0 failures" in proc.stdout, run_failed(reason, proc, logs)


# What test_a_supernode_that_can_never_connect_is_restarted shortens --max-wait-time to.
SHORT_GIVE_UP = 15


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.25.0", "retries for ever, its health SERVING: only the rendered --max-wait-time ends it"),
        ("1.35.0", "stays up, HTTP /health answering: only the gRPC liveness probe has it restarted"),
        ("1.41.0", "exits, and the kubelet restarts it"),
        ("1.42.0", "the newest: exits as 1.41 does"),
    ],
    indirect=["release"],
)
def test_a_supernode_that_can_never_connect_is_restarted(release: Release, reason: str, tmp_path: pathlib.Path):
    """A SuperNode that does not trust the SuperLink's certificate never joins: it must not look alive.

    From 1.41 it exits and the kubelet restarts it; Flower 1.25 retries for ever with
    its health server saying SERVING, until the --max-wait-time the function renders
    ends it (exit 1); Flower 1.35 keeps the process up with its HTTP /health
    answering, and only the gRPC liveness probe the function renders tells the kubelet
    to restart it. A probe refused before the health server is up (UNAVAILABLE) is no
    verdict: the kubelet's initial delay and threshold wait that out.
    """

    def distrust(manifest: Manifest) -> None:
        if manifest["kind"] == "StatefulSet" and manifest["metadata"]["name"].endswith("-supernode-default"):
            node = next(c for c in manifest["spec"]["template"]["spec"]["containers"] if c["name"] == "supernode")
            # The public CAs (the host's bundle): none signed the SuperLink's certificate.
            public = "--root-certificates=/etc/ssl/certs/ca-certificates.crt"
            node["args"] = [re.sub(r"^--root-certificates=.*", public, a) for a in node["args"]]
            # The rendered bound, shortened to keep the test short: the same exit, sooner.
            rendered = f"--max-wait-time={GIVE_UP_AFTER_SECONDS}"
            assert rendered in node["args"], node["args"]
            node["args"] = [f"--max-wait-time={SHORT_GIVE_UP}" if a == rendered else a for a in node["args"]]

    with federation(release, tmp_path, "subprocess", tls=True, change=distrust) as (runner, supernodes):
        # Generous: slow on two cores shared with the e2e. Done as soon as the verdicts are in.
        deadline = time.monotonic() + 3 * ONLINE_TIMEOUT
        verdicts: dict[str, str] = {}
        while time.monotonic() < deadline and len(verdicts) < len(supernodes):
            for pod in supernodes:
                container = pod.containers["supernode"]
                if not container.running():
                    verdicts[pod.name] = f"exited {container.popen.returncode}"
                    continue
                liveness = next(c for c in pod.spec["containers"] if c["name"] == "supernode")["livenessProbe"]
                port, timeout = liveness["grpc"]["port"], liveness.get("timeoutSeconds", 1)
                probe = grpc_probe(runner, pod, port, timeout)
                if probe.returncode != 0 and "StatusCode.UNAVAILABLE" not in probe.stderr:
                    verdicts[pod.name] = f"liveness probe fails: {probe.stderr.strip().splitlines()[-1:]}"
            time.sleep(2)
        assert len(verdicts) == len(supernodes), f"alive and never connected ({reason}): {verdicts}\n{runner.logs()}"
        assert online_supernodes(runner, time.monotonic() + 5, len(supernodes))[0] == 0
