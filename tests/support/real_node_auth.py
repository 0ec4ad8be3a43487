"""Node authentication as real Flower processes: the waits and the keys' carriage the tests share.

The registrar's pace and the bounds its waits keep (REGISTER_EVERY, ONLINE_TIMEOUT); the SuperLink's
nodes as the CLI in its pod lists them (nodes, online, registered), polled while containers are
restarted as the kubelet would (wait_for); and each SuperNode's public key published and carried to
the SuperLink's side with the function's own builders (carry), as Kubernetes and Crossplane would.
Used with support/real_flower.py's Federations, TLS on.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from function.builders import identity, published_keys
from function.programs import flwr_control, gather_program, key_publications
from support.podrunner import CrashLoopBackOff, PodRunner
from support.real_flower import CLI_CONTAINER, CLI_POLL_SECONDS, NAMESPACE, cli_exec, grpc_probe

# The registrar's interval: it registers a carried key at once (it wakes when its list changes), so this
# paces only its listing of the SuperLink's nodes, a `flwr` call of about 2 CPU seconds each time.
REGISTER_EVERY = 10
# From the keys' carriage to SuperNodes online: the registrar's turn, then a `flwr` call per key, one
# after another (each tens of seconds while the e2e's control planes load both cores), then the kubelet's
# restart of the refused SuperNode. Once 240 s was not enough (Flower 1.25 in CI, beside both control
# planes and the other real-Flower lane): one key of three was registered. Then 360 s was not either
# (Flower 1.41, load average 57 on the two cores: the SuperLink's own listener answered only after four
# minutes, and its SuperNodes had exited and waited out their back-off). A liveness bound: only a test
# that fails waits it out.
ONLINE_TIMEOUT = 600
# The kubelet's back-off before it restarts a SuperNode that exited (refused, its key not registered yet):
# its 10 s, doubling, capped lower than its 5 minutes so a test waits less once the key is registered.
# Restarted at every look instead, three refused SuperNodes of Flower 1.25 start over and over (half a CPU
# second each), on the cores the registrar's `flwr` calls need to register their keys.
RESTART_BACKOFF = (10.0, 40.0)
# Every this many polls the liveness probes run, and a container
# failing them LIVENESS_FAILURES times in a row is restarted: a restart before the key is registered is wasted.
PROBE_EVERY = 2
LIVENESS_FAILURES = 2
# Seconds a probe waits for its answer (more than the kubelet's 1: these machines are slower).
PROBE_TIMEOUT = 5


def nodes(runner: PodRunner) -> list[dict[str, Any]]:
    """The SuperLink's registered SuperNodes, as the CLI lists them (none when it cannot answer)."""
    proc = cli_exec(runner, cli_argv(runner))
    if proc.returncode != 0:
        return []
    return list(flwr_control.parse(proc.stdout, proc.stderr).get("nodes") or [])


def cli_argv(runner: PodRunner) -> list[str]:
    """The release's `flwr` listing command, as add_cli wrote it for the CLI's container."""
    pod = next(p for p in runner.pods if CLI_CONTAINER in p.containers)
    return pod.containers[CLI_CONTAINER].spec["env"]["FLWR_CLI"].split()


def wait_for(
    runner: PodRunner,
    what: str,
    test: Any,
    timeout: float,
    restarts: list[str] | None = None,
    *,
    liveness: bool = False,
) -> list[dict[str, Any]]:
    """Poll nodes() until test(nodes) holds with every container running; fail with the last listing and the logs.

    With restarts, containers that exited are started again, as the kubelet does (after its back-off), and
    listed there, and so are SuperNodes whose heartbeat thread died (heartbeat_dead_restarted);
    with liveness too, those its gRPC liveness probe finds unhealthy (live_or_restart: for releases
    whose refused SuperNode stays up).
    """
    deadline, listing, turns, failures = time.monotonic() + timeout, [], itertools.count(), {}
    backoff, read = CrashLoopBackOff(*RESTART_BACKOFF), {}
    while time.monotonic() < deadline:
        if restarts is not None:
            restarts += runner.restart_exited(backoff)
            restarts += heartbeat_dead_restarted(runner, read)
            if liveness and next(turns) % PROBE_EVERY == PROBE_EVERY - 1:
                restarts += live_or_restart(runner, failures)
        listing = nodes(runner)
        if test(listing) and not runner.exited():
            return listing
        time.sleep(CLI_POLL_SECONDS)
    # The registrar's last words first: CI's summary line shows only the message's beginning.
    pytest.fail(f"{what} within {timeout} s; the registrar said: {registrar_said(runner)}; last listing: {listing}; "
                f"exited: {runner.exited()}\n{runner.logs()}")  # fmt: skip


def registrar_said(runner: PodRunner, lines: int = 4) -> str:
    """The registrar container's last lines, on one line."""
    pod = next((p for p in runner.pods if identity.REGISTRAR in p.containers), None)
    if pod is None:
        return "(no registrar)"
    said = pod.containers[identity.REGISTRAR].log.read_text(errors="replace").splitlines()[-lines:]
    return " | ".join(line.strip() for line in said)


def live_or_restart(runner: PodRunner, failures: dict[tuple[str, str], int]) -> list[str]:
    """The kubelet's gRPC liveness probes, as the function renders them: a container whose health check fails
    LIVENESS_FAILURES times in a row is restarted (UNAVAILABLE, nothing listening yet, is no verdict).

    Flower 1.35 keeps a refused SuperNode's process up (its key not registered yet): only this restarts it.
    Fewer failures than the rendered threshold, and turns instead of its period: the same verdict, sooner.
    """
    out = []
    for pod in list(runner.pods):
        for spec in pod.spec["containers"]:
            grpc = (spec.get("livenessProbe") or {}).get("grpc")
            container = pod.containers.get(spec["name"])
            if grpc is None or container is None or not container.running():
                continue
            probe = grpc_probe(runner, pod, grpc["port"], max(PROBE_TIMEOUT, 1))
            key = (pod.name, spec["name"])
            failed = probe.returncode != 0 and "StatusCode.UNAVAILABLE" not in probe.stderr
            failures[key] = failures.get(key, 0) + 1 if failed else 0
            if failures[key] >= LIVENESS_FAILURES:
                runner.restart(pod.namespace, pod.name, spec["name"])  # SIGTERM first, as the kubelet
                failures[key] = 0
                out.append(f"{pod.namespace}/{pod.name}/{spec['name']}: liveness probe failed")
    return out


# Flower's heartbeat thread (1.25 to 1.35 at least) retries UNAVAILABLE and DEADLINE_EXCEEDED alone: any other
# gRPC error (CANCELLED, once under CI's load, as its connection was re-made) ends the thread, and the SuperNode,
# its process up, pulling messages and its health server SERVING, is listed offline for good. No probe can see
# that, and it is no matter of identities: the harness restarts such a container, once per death, and the
# restarted process must come back as the same node (tests/real/test_real_node_auth.py's claims hold or fail as before).
HEARTBEAT_DIED = (b"Exception in thread", b"flwr/supercore/heartbeat.py")


def heartbeat_died(log: bytes) -> bool:
    """Whether a SuperNode's output shows its heartbeat thread ended by an exception."""
    return all(mark in log for mark in HEARTBEAT_DIED)


def heartbeat_dead_restarted(runner: PodRunner, read: dict[tuple[str, str], int]) -> list[str]:
    """Restart each SuperNode container whose output, since its last restart here, shows its heartbeat thread dead.

    read: how much of each container's output was read by the last restart (logs are appended to).
    """
    out = []
    for pod in list(runner.pods):
        container = pod.containers.get("supernode")
        if container is None or not container.running() or not container.log.exists():
            continue
        data = container.log.read_bytes()
        key = (pod.namespace, pod.name)
        if heartbeat_died(data[read.get(key, 0) :]):
            read[key] = len(data)
            runner.restart(pod.namespace, pod.name, "supernode")
            out.append(f"{pod.namespace}/{pod.name}/supernode: its heartbeat thread died (Flower's)")
    return out


def registered(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The identities the SuperLink still accepts (it lists unregistered ones too)."""
    return [n for n in listing if n.get("status") not in ("unregistered", "deleted")]


def online(listing: list[dict[str, Any]]) -> set[str]:
    return {n["node-id"] for n in listing if n.get("status") == "online"}


def supernode_pods(runner: PodRunner) -> list[str]:
    return sorted(p.name for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "supernode")


def public_key(runner: PodRunner, pod: str) -> str:
    """A SuperNode's public key, as its identity containers printed it last (the SuperNode may be between
    restarts, and a DaemonSet's key lives in memory the host does not see): the rekeyer's, once it made one."""
    containers = runner.pod(NAMESPACE, pod).containers
    log = "".join(containers[c].log.read_text() for c in (identity.INIT_CONTAINER, identity.REKEY_CONTAINER))
    said = [line for line in log.splitlines() if line.startswith("public key: ")]
    assert said, log
    return said[-1].removeprefix("public key: ").strip()


def public_keys(runner: PodRunner, pods: list[str]) -> set[str]:
    return {public_key(runner, pod) for pod in pods}


def carry(runner: PodRunner, name: str, pods: list[str]) -> None:
    """Publish the pods' keys as their identity containers would, and list them beside the SuperLink.

    The ConfigMaps the program makes (owned by each pod's claim, or by a
    DaemonSet's pod), listed by the gatherer's code and read by the
    function's own builders; the kubelet then
    updates the registrar's volume. Only these pods' keys: the others'
    publications are gone (their holders deleted).
    """
    runner.update(published_keys.authorized_keys(name, NAMESPACE, {}, checked(runner, name, pods)))


def checked(runner: PodRunner, name: str, pods: list[str]) -> list[published_keys.PublishedKey]:
    """The pods' keys, published and gathered as carry says, read by the function's own builder."""
    publications = []
    for pod in pods:
        target = runner.pod(NAMESPACE, pod)
        if identity.IDENTITY_VOLUME in target.claims:
            owner = key_publications.Owner("PersistentVolumeClaim", target.claims[identity.IDENTITY_VOLUME],
                                           f"uid-{target.claims[identity.IDENTITY_VOLUME]}")  # fmt: skip
        else:
            owner = key_publications.Owner("Pod", pod, target.uid)
        labels = identity.publication_labels(name, "default")
        publications.append(key_publications.key_configmap(owner, NAMESPACE, labels, public_key(runner, pod)))
    # What the namespace's gatherer lists of them, with its own code; then the function's reading of the list.
    place = published_keys.Place("default", NAMESPACE, ("default",))
    text = gather_program.listed(published_keys.expected(name, place), publications)
    keys = published_keys.gathered(place, {"metadata": {"namespace": NAMESPACE}, "data": {"keys": text}})
    assert len(keys) == len(pods), keys
    return keys
