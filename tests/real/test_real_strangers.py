"""Network reach of a SuperLink grants the Fleet API and health, nothing else: tried from the attacker's seats.

A rendered Federation (TLS and node authentication on) runs as real processes (podrunner.py), and
three strangers try every door: a pod in another namespace, a SuperNode's own
pod (a compromised workload) and this machine, which reaches the Service's
address as a client outside the cluster reaches an exposed Service. Each asks
the Control API (`flwr supernode list`, and over HTTP what `flwr ls`, `flwr
run`, `flwr stop`, `flwr supernode register/list/unregister` send), the
Runtime API (`acquire-task`, which hands out a run's ServerApp task), `/docs`
and `/openapi.json`, at the Service and at every port of the SuperLink pod's
address, with path tricks a filter could read apart from Flower. None gets an
answer from Flower; the SuperNodes still join through the Fleet API, and the
same Control request on the pod's loopback (where `kubectl port-forward`
leads) is answered, so the refusals are the network's doing.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from function.programs import flwr_control
from function.releases.flower import CONTROL_PORT, FLEET_PROXY_PORT
from support.podrunner import PodRunner, unwrap
from support.real_flower import (
    NAMESPACE,
    REPLICAS,
    Release,
    add_cli,
    claim,
    cli_exec,
    cli_parts,
    images,
    render,
    tls_secret,
)
from support.real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest
from support.real_node_auth import ONLINE_TIMEOUT, REGISTER_EVERY, carry, online, supernode_pods, wait_for

ELSEWHERE = "elsewhere"
# What the flwr CLI sends for ls, run, stop and supernode register/list/unregister, and the Runtime API's
# task handout: each answers 200 to anyone who reaches it (../FACTS: no caller authentication).
CONTROL = [f"/v1/control/{e}" for e in ("list-runs", "start-run", "stop-run", "register-node", "list-nodes",
                                        "unregister-node")]  # fmt: skip
FORBIDDEN = [
    *(("POST", path) for path in CONTROL),
    ("POST", "/v1/runtime/acquire-task"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    # Paths a filter and Flower could read apart.
    ("POST", "/v1/fleet/../control/list-nodes"),
    ("POST", "/v1/fleet/%2e%2e/control/list-nodes"),
    ("POST", "/v1/fleet/..%2fcontrol/list-nodes"),
    ("POST", "//v1/control/list-nodes"),
    ("POST", "/v1/control/list-nodes?/v1/fleet/x"),
    ("GET", "/v1/fleet/pull-messages"),  # the Fleet API's paths, by another method
]

# Asks each (method, path) at each base URL with stdlib HTTP, the path sent as written: JSON of
# [url, method, path, status or error]. Runs in any container with Python (Flower's images) and here.
# The TCP handshake is the kernel's, so a connection not made in CONNECT seconds was dropped (silent);
# once connected, TLS and the answer are Flower's, which may take long on a loaded machine: a slow
# answer is still an answer, so it gets ANSWER seconds (a 3 s deadline once called Flower silent on
# its own loopback, and could have called a slow answer to a stranger a refusal).
PROBE = """
import http.client, json, socket, ssl, sys
CONNECT, ANSWER = 3, 30
context = ssl._create_unverified_context()  # a stranger need not trust the CA to knock
out = []
for base in json.loads(sys.argv[1]):
    scheme, hostport = base.split("://")
    host, port = hostport.rsplit(":", 1)
    silent = None  # a port that drops the connection, or never answers: asked once
    for method, path in json.loads(sys.argv[2]):
        if silent:
            out.append([base, method, path, silent])
            continue
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT)
            sock.settimeout(ANSWER)
            if scheme == "https":
                sock = context.wrap_socket(sock, server_hostname=host)
            conn = http.client.HTTPConnection(host, int(port))
            conn.sock = sock
            conn.request(method, path, body=b"" if method == "POST" else None,
                         headers={"Content-Type": "application/protobuf"})
            answer = conn.getresponse()
            out.append([base, method, path, answer.status])
            conn.close()
        except TimeoutError as e:
            silent = type(e).__name__
            out.append([base, method, path, silent])
        except Exception as e:
            out.append([base, method, path, type(e).__name__])
print(json.dumps(out))
"""


def probe(run: Any, bases: list[str], requests: list[tuple[str, str]]) -> list[list[Any]]:
    """PROBE's answers, run by run(argv) (in a container, or here)."""
    proc = run(["python", "-c", PROBE, json.dumps(bases), json.dumps(requests)])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def answered(results: list[list[Any]]) -> list[list[Any]]:
    """The requests something answered with success: what a stranger got."""
    return [r for r in results if isinstance(r[3], int) and 200 <= r[3] < 300]


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.35.0", "Fleet and Control over gRPC, the Runtime API over HTTP on the loopback"),
        ("1.41.0", "one HTTP listener for Fleet, Control and Runtime, the Fleet API proxy in front"),
        ("1.42.0", "the newest supported"),
    ],
    indirect=["release"],
)
def test_strangers_reach_the_fleet_api_and_nothing_else(release: Release, reason: str, tmp_path: pathlib.Path):
    name = "fed-strangers"
    secret = tls_secret(tmp_path, f"{name}-superlink")
    federation = claim(name, release.version, "subprocess", tls=True)
    # Node authentication on: its registrations no longer travel the network either.
    federation["spec"]["nodeAuthentication"] = {"enabled": True, "registrationIntervalSeconds": REGISTER_EVERY}
    rendered = render(tmp_path, federation, [secret])
    manifests = [unwrap(r) for r in rendered]
    service = next(m for m in manifests if m["kind"] == "Service")
    assert [p["name"] for p in service["spec"]["ports"]] == ["fleet"], "the Service carries the Fleet API alone"
    fleet_port = service["spec"]["ports"][0]["port"]
    fleet = f"{service['metadata']['name']}.{NAMESPACE}.svc:{fleet_port}"
    # The stranger in another namespace has the flwr CLI, pointed at the only address it reaches, and the CA.
    elsewhere_secret = {**secret, "metadata": {"name": "superlink-tls", "namespace": ELSEWHERE}}
    configmap, container, volumes = cli_parts(release, fleet, tls=True, namespace=ELSEWHERE)
    stranger = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stranger", "namespace": ELSEWHERE},
        "spec": {"containers": [container], "volumes": volumes},
    }
    extra = [*add_cli(manifests, release, tls=True), configmap, stranger]
    minor = tuple(map(int, release.version.split(".")[:2]))
    http_control, http_fleet = minor >= (1, 37), minor >= (1, 40)
    with PodRunner(tmp_path / "cluster", images(release.bin), [secret, elsewhere_secret]) as runner:
        runner.start([*rendered, *extra])
        # The Fleet API works: every SuperNode joins through it, once its key is published and carried
        # (the test plays Kubernetes and Crossplane, as in test_real_node_auth) and the registrar registered it.
        carry(runner, name, supernode_pods(runner))
        # Flower 1.35 keeps a refused SuperNode up: its liveness probe has the kubelet restart it.
        wait_for(runner, f"{REPLICAS} SuperNodes online", lambda ls: len(online(ls)) == REPLICAS,
                 release.online_timeout + ONLINE_TIMEOUT, restarts=[], liveness=True)  # fmt: skip

        superlink = next(p for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "superlink")
        supernode = next(p for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "supernode")
        # Every port of the pod's address a listener could be on, and the Service.
        ports = sorted({FLEET_PROXY_PORT, CONTROL_PORT, 9091, 9092, 9096, 8000})
        pod_bases = [f"https://{superlink.ip}:{port}" for port in ports]
        # Outside, the Service's address (cluster DNS names are the cluster's own).
        service_ip = next(ip for svc, ip in runner.services if svc["metadata"]["name"] == service["metadata"]["name"])
        seats = {
            "a pod in another namespace": (
                lambda argv: runner.exec(ELSEWHERE, "stranger", "cli", argv, timeout=300),
                f"https://{fleet}",
            ),
            "a SuperNode's pod": (
                lambda argv: runner.exec(NAMESPACE, supernode.name, "supernode", argv, timeout=300),
                f"https://{fleet}",
            ),
            # As a client outside reaches an exposed Service.
            "outside the cluster": (
                lambda argv: subprocess.run(
                    [sys.executable, *argv[1:]], capture_output=True, text=True, timeout=300, check=False
                ),
                f"https://{service_ip}:{fleet_port}",
            ),
        }
        for seat, (run, at_service) in seats.items():
            results = probe(run, [*pod_bases, at_service], FORBIDDEN)
            assert answered(results) == [], (seat, reason)
            # Each address was reached (answered, refused or silent): no name failed to resolve.
            assert not [r for r in results if r[3] == "gaierror"], (seat, results)
            if http_fleet:  # health is the one other thing it passes (the kubelet's probes)
                assert answered(probe(run, [at_service], [("GET", "/health")])) != [], seat

        # The CLI of the stranger's pod, at the one address it reaches: refused.
        argv = container["env"][0]["value"].split()
        listed = runner.exec(ELSEWHERE, "stranger", "cli", argv, timeout=60)
        answer = flwr_control.parse(listed.stdout, listed.stderr)
        assert answer.get("success") is not True, f"{listed.stdout}\n{listed.stderr}"
        assert "nodes" not in answer, answer

        # The test can fail: on the pod's loopback (kubectl port-forward's end) Flower answers the same asks.
        local = probe(lambda argv: cli_exec(runner, argv, timeout=300), [f"https://127.0.0.1:{CONTROL_PORT}"],
                      [("POST", "/v1/control/list-nodes")])  # fmt: skip
        mine = cli_exec(runner, argv)
        assert flwr_control.parse(mine.stdout, mine.stderr).get("success") is True, mine
        if http_control:
            assert answered(local) != [], local
