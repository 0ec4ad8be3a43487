"""Rendered Federations as real Flower processes: what the real-Flower tests and the e2e's walk share.

What `function render` composes, run by the pod runner (podrunner.py) with the
images mapped to the venv of the Flower release the Federation names (Release;
the `release` fixture, which each module that takes it imports); that release's
`flwr` CLI in a container added to the SuperLink's pod (add_cli, cli_exec,
online_supernodes) or on this machine, as a user runs it (LocalCli); the
smoke-test app (add_app, flwr_run); the kubelet's gRPC probe (grpc_probe).
Needs root (network and mount namespaces), and openssl for TLS.

A release's venv is $FLWR_VENVS/<release> (as `make unit` builds them), for
1.25.0 also $FLWR_PYTHON's.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import yaml

from function.api.spec import FLEET_PROXY_IMAGE
from function.programs import flwr_control
from function.releases.flower import CONTROL_PORT
from support import cli_server
from support.peers import ROOT, need
from support.podrunner import Image, Manifest, Pod, PodRunner, flower_images, nginx_image, repository, unwrap

# The oldest supported, the first with HTTP runtime APIs, the last two (1.42 runs 1.41's command lines).
RELEASES = ["1.25.0", "1.35.0", "1.41.0", "1.42.0"]


NAMESPACE = "default"


REPLICAS = 2


ONLINE_TIMEOUT = 60


# A SuperNode before Flower 1.40 dials gRPC on one channel for its whole life, and gRPC spaces a
# failing channel's reconnects by up to 120 s: one started well before its SuperLink (a busy
# machine, a slow 1.41 SuperLink) may connect that long after the SuperLink is up. Seen in CI:
# a 1.25 pool still refused 100 s after a 1.41 SuperLink's gRPC Fleet API was listening.
GRPC_RECONNECT_BACKOFF = 120


ANSWER_GRACE = 60  # a busy machine's CLI may need longer for its first answer


# Between two `flwr` calls of a wait: each is a Python process that imports Flower, about
# 2 CPU seconds; at half a second apart a waiting test kept most of a core busy asking, at 3 a third.
CLI_POLL_SECONDS = 5


# Custom SuperExec images, as production.yaml names them: they run flower-superexec too.
SUPEREXEC_IMAGES = ("registry.example.com/ml/serverapp", "registry.example.com/ml/clientapp")


@dataclass(frozen=True)
class Release:
    version: str
    bin: pathlib.Path

    @property
    def reads_pyproject(self) -> bool:
        """Up to 1.25 the flwr CLI reads its federations from a Flower app's pyproject.toml."""
        return tuple(map(int, self.version.split(".")[:2])) < (1, 26)

    @property
    def online_timeout(self) -> float:
        """How long its SuperNodes may take to come online: longer on gRPC (GRPC_RECONNECT_BACKOFF)."""
        grpc = tuple(map(int, self.version.split(".")[:2])) < (1, 40)
        return ONLINE_TIMEOUT + (GRPC_RECONNECT_BACKOFF if grpc else 0)


def venv_python(version: str) -> pathlib.Path | None:
    candidates = []
    if os.environ.get("FLWR_VENVS"):
        candidates.append(pathlib.Path(os.environ["FLWR_VENVS"]) / version / "bin" / "python")
    if version == "1.25.0" and os.environ.get("FLWR_PYTHON"):
        candidates.append(pathlib.Path(os.environ["FLWR_PYTHON"]))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Release:
    return installed_release(request.param)


def installed_release(version: str) -> Release:
    """The release's venv, checked, and what the pod runner needs to run it (skipped without, failed in CI)."""
    need(os.geteuid() == 0, "root (the pod runner makes network and mount namespaces)")
    need(shutil.which("ip") is not None, "iproute2's ip (the pod runner's network)")
    python = venv_python(version)
    need(python is not None, f"a venv of Flower {version} (FLWR_VENVS or FLWR_PYTHON; `make unit`)")
    assert python is not None
    installed = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('flwr'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert installed == version, f"{python} has Flower {installed}"
    return Release(installed, python.parent)


def claim(name: str, version: str, isolation: str, *, tls: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mode": "StatefulSet",
        "isolationMode": isolation,
        "superlink": {"image": f"flwr/superlink:{version}"},
        "supernodes": {"image": f"flwr/supernode:{version}", "pools": [{"name": "default", "replicas": REPLICAS}]},
    }
    if isolation == "process":
        spec["superlink"]["superexecImage"] = f"{SUPEREXEC_IMAGES[0]}:{version}"
        spec["supernodes"]["pools"][0]["images"] = {"superexecClientApp": f"{SUPEREXEC_IMAGES[1]}:{version}"}
    if tls:
        spec["tls"] = {"secretName": "superlink-tls"}
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def tls_secret(tmp: pathlib.Path, service: str) -> dict[str, Any]:
    """A CA and a certificate for the SuperLink Service's cluster names, as a kubernetes.io/tls Secret.

    It names localhost too, as docs/flower-versions.md asks from Flower 1.37: the pod's own SuperExec
    then dials the SuperLink over the same TLS, at localhost.
    """
    need(shutil.which("openssl") is not None, "openssl (the TLS certificates)")
    names = [
        service,
        f"{service}.{NAMESPACE}",
        f"{service}.{NAMESPACE}.svc",
        f"{service}.{NAMESPACE}.svc.cluster.local",
        "localhost",
    ]
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
    ca, key, crt = tmp / "ca.crt", tmp / "tls.key", tmp / "tls.crt"
    for args in (
        ["-x509", *ec, "-subj", "/CN=test-ca", "-keyout", str(tmp / "ca.key"), "-out", str(ca),
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["-x509", *ec, "-subj", f"/CN={names[2]}", "-keyout", str(key), "-out", str(crt),
         "-CA", str(ca), "-CAkey", str(tmp / "ca.key"),
         "-addext", f"subjectAltName={','.join('DNS:' + n for n in names)},IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"],
    ):  # fmt: skip
        subprocess.run(["openssl", "req", *args], check=True, capture_output=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "superlink-tls", "namespace": NAMESPACE},
        "data": {p.name: base64.b64encode(p.read_bytes()).decode() for p in (ca, crt, key)},
    }


def render(tmp: pathlib.Path, federation: dict[str, Any], required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`function render`, the Secret handed over as Crossplane's required resources."""
    (tmp / "claim.yaml").write_text(yaml.safe_dump(federation))
    args = [sys.executable, "-m", "function.serving.main", "render", str(tmp / "claim.yaml")]
    if required:
        (tmp / "required.yaml").write_text(yaml.safe_dump_all(required))
        args += ["--required", str(tmp / "required.yaml")]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


CLI_CONTAINER = "cli"


def nginx_root() -> pathlib.Path:
    """nginx unpacked from Debian's package (`make unit`): the Fleet API proxy's image from Flower 1.40."""
    root = pathlib.Path(os.environ.get("NGINX_ROOT") or ROOT / ".cache" / "nginx")
    need(os.access(root / "usr" / "sbin" / "nginx", os.X_OK), f"nginx from Debian's package ({root}; `make unit`)")
    return root


def images(bin_dir: pathlib.Path, superexec_repositories: tuple[str, ...] = ()) -> dict[str, Image]:
    """Flower's images at one release's venv, and the Fleet API proxy's nginx."""
    return flower_images(bin_dir, superexec_repositories) | {repository(FLEET_PROXY_IMAGE): nginx_image(nginx_root())}


def superlink_pod(manifests: list[Manifest]) -> str:
    """The SuperLink's pod: its StatefulSet's one replica."""
    sts = next(m for m in manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"].endswith("-superlink"))
    return f"{sts['metadata']['name']}-0"


def cli_parts(
    release: Release, address: str, *, tls: bool, configmap: str = "flwr-cli", namespace: str = NAMESPACE
) -> tuple[Manifest, Manifest, list[Manifest]]:
    """A container with the release's flwr CLI configured for address: (its ConfigMap, the container, its volumes)."""
    ca = "/app/cli-tls/ca.crt"
    security = f'root-certificates = "{ca}"' if tls else "insecure = true"
    if release.reads_pyproject:
        path, config = "/app/cli/pyproject.toml", (
            '[project]\nname = "cli"\nversion = "1.0.0"\n\n[tool.flwr.app]\npublisher = "test"\n\n'
            '[tool.flwr.app.components]\nserverapp = "cli:server"\nclientapp = "cli:client"\n\n'
            '[tool.flwr.app.config]\n\n[tool.flwr.federations]\ndefault = "k8s"\n\n'
            f'[tool.flwr.federations.k8s]\naddress = "{address}"\n{security}\n'
        )  # fmt: skip
        argv = ["flwr", "supernode", "ls", ".", "k8s", "--format", "json"]
    else:
        # From 1.26 it reads $FLWR_HOME/config.toml (FLWR_HOME is ~/.flwr = /app/.flwr).
        path = "/app/.flwr/config.toml"
        config = f'[superlink]\ndefault = "k8s"\n\n[superlink.k8s]\naddress = "{address}"\n{security}\n'
        argv = ["flwr", "supernode", "list", "--format", "json"]
    # The CLI writes beside its config (1.25: <app>/.flwr), so that directory is an emptyDir.
    volumes = [{"name": "cli-config", "configMap": {"name": configmap}}, {"name": "cli", "emptyDir": {}}]
    directory = str(pathlib.PurePosixPath(path).parent)
    mounts = [
        {"name": "cli", "mountPath": directory},
        {"name": "cli-config", "mountPath": path, "subPath": "config", "readOnly": True},
    ]
    if tls:  # only the CA, as a user's machine has it
        items = [{"key": "ca.crt", "path": "ca.crt"}]
        volumes.append({"name": "cli-tls", "secret": {"secretName": "superlink-tls", "items": items}})
        mounts.append({"name": "cli-tls", "mountPath": "/app/cli-tls", "readOnly": True})
    container = {
        "name": CLI_CONTAINER,
        "image": f"flwr/superlink:{release.version}",
        "command": ["sleep", "infinity"],
        "workingDir": directory,
        "volumeMounts": mounts,
        "env": [{"name": "FLWR_CLI", "value": " ".join(argv)}],
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": configmap, "namespace": namespace},
        "data": {"config": config},
    }
    return config_map, container, volumes


def add_cli(manifests: list[Manifest], release: Release, *, tls: bool) -> list[Manifest]:
    """A `cli` container with the release's flwr CLI in the SuperLink's pod; returns the ConfigMap it reads.

    The Control API listens on that pod's loopback alone: this is where
    `kubectl port-forward` leads, so the CLI dials 127.0.0.1, with the CA where
    TLS is on (the certificate names 127.0.0.1). Changes the SuperLink's
    StatefulSet in manifests.
    """
    configmap, container, volumes = cli_parts(release, f"127.0.0.1:{CONTROL_PORT}", tls=tls)
    sts = next(m for m in manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"].endswith("-superlink"))
    pod_spec = sts["spec"]["template"]["spec"]
    pod_spec["containers"].append(container)
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *volumes]
    return [configmap]


def cli_exec(runner: PodRunner, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A command in the SuperLink pod's `cli` container; `flwr` through the container's CLI server."""
    pod = next(p for p in runner.pods if CLI_CONTAINER in p.containers)
    if argv[0] != "flwr":
        return runner.exec(NAMESPACE, pod.name, CLI_CONTAINER, argv, timeout=timeout)
    container = pod.containers[CLI_CONTAINER]
    server = CLI_SERVERS.get(container.popen.pid)
    if server is None or server.poll() is not None:
        server = runner.attach(NAMESPACE, pod.name, CLI_CONTAINER, ["python", "-c", cli_server.BOOT, *CLI_PROGRAM])
        CLI_SERVERS[container.popen.pid] = server
    assert server.stdin is not None and server.stdout is not None  # attach() pipes both
    server.stdin.write(json.dumps({"argv": argv, "timeout": timeout}).encode() + b"\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline() or b'{"code": -1, "stdout": "", "stderr": "the CLI server ended"}')
    code = answer["code"] if answer["code"] is not None else -9
    return subprocess.CompletedProcess(argv, code, answer["stdout"], answer["stderr"])


# What a CLI server runs: flwr_control's source (the programs' forked calls), then tests/support/cli_server.py's.
CLI_PROGRAM = (inspect.getsource(flwr_control), (ROOT / "tests" / "support" / "cli_server.py").read_text())


# The CLI server (tests/support/cli_server.py) of each CLI container, by the container's process: a container
# started again gets a server of its own, and a stopped runner's servers have ended (poll() is not None).
CLI_SERVERS: dict[int, subprocess.Popen[bytes]] = {}


def online_supernodes(runner: PodRunner, deadline: float, expected: int) -> tuple[int, str]:
    """Ask the CLI until `expected` SuperNodes are online or the deadline passes: (online, last answer).

    The counts and the answer are the SuperLink's: the wait goes on past the
    deadline (by ANSWER_GRACE at most) until one answer came from the
    SuperLink, because from 1.42 `--format json` also exits 0 when the CLI
    fails (a timeout on a busy machine: "success": false). A container that
    exited ends the wait too: the runner restarts nothing.
    """
    pod = next(p for p in runner.pods if CLI_CONTAINER in p.containers)
    argv = pod.containers[CLI_CONTAINER].spec["env"]["FLWR_CLI"].split()
    online, last, answered = 0, "", False
    while not runner.exited():
        now = time.monotonic()
        if now >= deadline + ANSWER_GRACE or (now >= deadline and answered):
            break
        proc = cli_exec(runner, argv)
        reached = proc.returncode == 0 and '"success": true' in proc.stdout
        if reached or not answered:
            last = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        if reached:
            answered = True
            nodes = json.loads(proc.stdout).get("nodes") or []
            online = sum(1 for n in nodes if n.get("status") == "online")
            if online >= expected:
                break
        time.sleep(CLI_POLL_SECONDS)
    return online, last


@contextlib.contextmanager
def federation(
    release: Release,
    tmp: pathlib.Path,
    isolation: str,
    *,
    tls: bool,
    change: Callable[[Manifest], None] | None = None,
    app: bool = False,
    claim_change: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[tuple[PodRunner, list[Pod]]]:
    """A Federation rendered and run with the CLI in the SuperLink's pod: the runner and the SuperNode pods.

    app: the smoke-test app mounted in the CLI's container too (flwr_run). claim_change changes the
    claim before it is rendered, change each rendered manifest.
    """
    name = f"fed-{isolation}{'-tls' if tls else ''}"
    secrets = [tls_secret(tmp, f"{name}-superlink")] if tls else []
    fed = claim(name, release.version, isolation, tls=tls)
    if claim_change:
        claim_change(fed)
    rendered = render(tmp, fed, secrets)
    manifests = [unwrap(r) for r in rendered]
    for manifest in manifests if change else []:
        change(manifest)
    extra = add_cli(manifests, release, tls=tls)
    if app:
        extra += add_app(manifests)
    with PodRunner(tmp / "cluster", images(release.bin, SUPEREXEC_IMAGES), secrets) as runner:
        runner.start([*rendered, *extra])
        supernodes = [p for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "supernode"]
        assert len(supernodes) == REPLICAS
        yield runner, supernodes


# The smoke-test app users run against their Federation (docs/operations.md).
APP = ROOT / "examples" / "app"


RUN_TIMEOUT = 480


def app_configmap() -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The app's files as a ConfigMap (keys cannot hold "/": items put them back in place)."""
    files = sorted(
        p.relative_to(APP).as_posix() for p in APP.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    data = {f.replace("/", "__"): (APP / f).read_text() for f in files}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "smoke-app", "namespace": NAMESPACE},
                 "data": data}  # fmt: skip
    return configmap, [{"key": f.replace("/", "__"), "path": f} for f in files]


def add_app(manifests: list[Manifest]) -> list[Manifest]:
    """The app, mounted read-only at /app/smoke-src in the CLI's container (add_cli first); its ConfigMap."""
    configmap, items = app_configmap()
    sts = next(m for m in manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"].endswith("-superlink"))
    pod_spec = sts["spec"]["template"]["spec"]
    pod_spec["volumes"].append({"name": "app", "configMap": {"name": "smoke-app", "items": items}})
    container = next(c for c in pod_spec["containers"] if c["name"] == CLI_CONTAINER)
    container["volumeMounts"].append({"name": "app", "mountPath": "/app/smoke-src", "readOnly": True})
    return [configmap]


# Flower 1.25's SuperLink fails a SuperNode's pull of an object the ServerApp has announced but
# not yet pushed (it counts 0 bytes of traffic and raises); that SuperNode never gets its message
# and the run never ends. A race that a busy machine widens, gone from later releases' traffic
# accounting.
UPSTREAM_PULL_RACE = "Both bytes_sent and bytes_recv cannot be zero"


RunAttempt = Callable[[int], tuple[subprocess.CompletedProcess[str], str]]


def run_once_more_after_pull_race(attempt: RunAttempt) -> tuple[subprocess.CompletedProcess[str], str]:
    """attempt(n) runs the app on new pods: (the run, the pods' logs). A run that met the race runs once more."""
    for n in range(2):
        proc, logs = attempt(n)
        if "SMOKE-RESULT" in proc.stdout or UPSTREAM_PULL_RACE not in logs:
            break
    return proc, logs


LogMarks = dict[pathlib.Path, int]
# The colours Flower's log lines carry, out of a one-line summary.
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")
# What a line of a container's log looks like when something went wrong: Flower's ERROR level, a Python
# traceback, nginx's error log, and Flower's retries (a healthy run retries nothing once it has started).
TROUBLE = ("ERROR", "Traceback", "[error]", "[crit]", "[alert]", "[emerg]", "Connection attempt failed", "Giving up")
# How many such lines, and how much of each, a failed run's first line carries.
TROUBLE_LINES, TROUBLE_CHARS = 3, 160


def log_marks(runner: PodRunner) -> LogMarks:
    """Where each container's log ends now: pods_after_run names the trouble logged after it."""
    logs = [c.log for p in runner.pods for c in p.containers.values()]
    return {log: log.stat().st_size if log.exists() else 0 for log in logs}


def trouble_since(runner: PodRunner, marks: LogMarks) -> list[str]:
    """`<pod>/<container>: <line>` for each line of trouble (TROUBLE) logged after marks, in pod order."""
    found = []
    for pod in runner.pods:
        for name, container in pod.containers.items():
            if not container.log.exists():
                continue
            with container.log.open("rb") as log:
                log.seek(marks.get(container.log, 0))
                text = log.read().decode(errors="replace")
            lines = [ANSI_COLOR.sub("", line).strip() for line in text.splitlines()]
            found += [f"{pod.name}/{name}: {line}" for line in lines if any(t in line for t in TROUBLE)]
    return found


def pods_after_run(runner: PodRunner, marks: LogMarks) -> str:
    """What a run's attempt returns as its pods' logs: first a line naming the containers that had exited by
    its end (nothing restarts them while `flwr run` streams) and the trouble they logged during the run (marks:
    log_marks before it), then their logs."""
    trouble = trouble_since(runner, marks)
    shown = "; ".join(line[:TROUBLE_CHARS] for line in trouble[:TROUBLE_LINES])
    more = f" (and {len(trouble) - TROUBLE_LINES} more)" if len(trouble) > TROUBLE_LINES else ""
    return f"exited: {runner.exited() or 'none'}; logged: {shown or 'no errors'}{more}\n{runner.logs(lines=200)}"


def run_failed(reason: str, proc: subprocess.CompletedProcess[str], logs: str) -> str:
    """Why a run printed no result, its first line whole: CI's summary shows only a message's beginning, and a
    run that fails once in many needs its cause there. The CLI's exit code (-9: killed at RUN_TIMEOUT), the
    containers that had exited and the trouble the pods logged (pods_after_run), the CLI's last words (what a
    killed CLI had streamed by then too); then everything."""
    said = ANSI_COLOR.sub("", flwr_control.last_words(proc.stdout, proc.stderr))
    exited = logs.partition("\n")[0]
    return (f"{reason}: exit {proc.returncode}; {exited}; flwr said: {said}\n"
            f"{proc.stdout}\n{proc.stderr}\n{logs}")  # fmt: skip


def flwr_run(runner: PodRunner, release: Release, run_config: str = "") -> subprocess.CompletedProcess[str]:
    """`flwr run` of the app in the CLI's container (add_app), streaming until the run ends; run_config
    overrides the app's (`--run-config`, "array-size=1000000")."""
    # The app, writable (the CLI writes beside it), with the federation's address where the release reads it.
    copy = "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])"
    steps = [["python", "-c", copy, "/app/smoke-src", "/app/.flwr/smoke"]]
    if release.reads_pyproject:
        append = (
            "import sys; c = open(sys.argv[1]).read(); "
            "open(sys.argv[2], 'a').write(chr(10) + c[c.index('[tool.flwr.federations]'):])"
        )
        steps.append(["python", "-c", append, "/app/cli/pyproject.toml", "/app/.flwr/smoke/pyproject.toml"])
    for argv in steps:
        proc = cli_exec(runner, argv)
        assert proc.returncode == 0, proc.stderr
    overrides = ["--run-config", run_config] if run_config else []
    return cli_exec(runner, ["flwr", "run", "/app/.flwr/smoke", "k8s", "--stream", *overrides], timeout=RUN_TIMEOUT)


@dataclass(frozen=True)
class LocalCli:
    """The release's `flwr` on this machine, as a user runs it: its own config, the SuperLink's CA, an address."""

    release: Release
    home: pathlib.Path  # FLWR_HOME and HOME
    app: pathlib.Path  # a copy of examples/app

    @classmethod
    def at(cls, release: Release, tmp: pathlib.Path, address: str, ca: pathlib.Path | None) -> LocalCli:
        """Configured for address, trusting ca (None: a SuperLink without TLS, `insecure = true`)."""
        home, app = tmp / "flwr-home", tmp / "flwr-app"
        home.mkdir()
        shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
        security = f'root-certificates = "{ca}"' if ca else "insecure = true"
        connection = f'address = "{address}"\n{security}\n'
        if release.reads_pyproject:  # up to 1.25: a federation in the app's pyproject.toml
            with (app / "pyproject.toml").open("a") as pyproject:
                pyproject.write(
                    f'\n[tool.flwr.federations]\ndefault = "k8s"\n\n[tool.flwr.federations.k8s]\n{connection}'
                )
        else:
            (home / "config.toml").write_text(f'[superlink]\ndefault = "k8s"\n\n[superlink.k8s]\n{connection}')
        return cls(release, home, app)

    def __call__(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "FLWR_HOME": str(self.home), "HOME": str(self.home), "NO_COLOR": "1"}
        return subprocess.run([str(self.release.bin / "flwr"), *argv], cwd=self.app, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip

    def wait_online(self, count: int, runner: PodRunner) -> None:
        """Until count SuperNodes are online, within its release's bound, or a container exited; asserts it."""
        deadline = time.monotonic() + self.release.online_timeout
        while self.online() < count and time.monotonic() < deadline and not runner.exited():
            time.sleep(CLI_POLL_SECONDS)
        assert self.online() == count, runner.logs()

    def online(self) -> int:
        listing = ["supernode", "ls", ".", "k8s"] if self.release.reads_pyproject else ["supernode", "list"]
        proc = self(*listing, "--format", "json")
        nodes = flwr_control.parse(proc.stdout, proc.stderr).get("nodes") or []
        return sum(1 for n in nodes if n.get("status") == "online")


# The kubelet's gRPC probe: grpc.health.v1's Check by its wire form, an empty request (every
# service) and an answer whose field 1 is the status, named as the kubelet's probe names it.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def grpc_probe(runner: PodRunner, pod: Pod, port: int, timeout: float) -> subprocess.CompletedProcess[str]:
    """The kubelet's gRPC liveness probe of a pod's port, from this process through a port-forward.

    As a command would answer: exit 0 with the serving status, or 1 with the gRPC error
    (StatusCode.UNAVAILABLE when nothing listens yet). A probe process per call (one
    Python importing grpc inside the pod) cost more CPU than the SuperNodes it probed.
    """
    argv = ["grpc-probe", f"{pod.name}:{port}"]
    with grpc.insecure_channel(f"127.0.0.1:{runner.port_forward(pod.namespace, pod.name, port)}") as channel:
        try:
            answer = channel.unary_unary(HEALTH_CHECK)(b"", timeout=timeout)
        except grpc.RpcError as e:
            return subprocess.CompletedProcess(argv, 1, "", f"{e.code()}: {e.details()}")
    status = answer[1] if answer[:1] == b"\x08" else 0
    return subprocess.CompletedProcess(argv, 0, SERVING_STATUS.get(status, str(status)), "")
