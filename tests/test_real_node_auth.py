"""Node authentication as real Flower processes: each SuperNode makes its own key and registers it.

What function/builders/identity.py promises, run through the pod runner with TLS on:
every SuperNode of a StatefulSet pool of 3 (or a DaemonSet on the runner's 2
nodes) comes online under its own key; after the SuperLink process restarts
they are all online again with the same node IDs; a key nobody registered is
refused; once a pool shrinks, the SuperLink's reaper leaves only the
identities that still run, and when it grows again the replicas that were
gone past every grace period join under new keys (no lockout); unless their
keys are published through Kubernetes (at 1.41), when the reaper keeps them and
they come back as the same nodes; and a `flwr run` completes. Needs root, like tests/test_real_flower.py.
"""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from function.builders import identity, identity_program, published_keys
from podrunner import PodRunner, unwrap
from test_real_flower import (
    CLI_CONTAINER,
    CLI_POLL_SECONDS,
    NAMESPACE,
    SUPEREXEC_IMAGES,
    Release,
    add_app,
    add_cli,
    claim,
    cli_exec,
    flwr_run,
    images,
    render,
    run_once_more_after_pull_race,
    tls_secret,
)
from test_real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest

REGISTER_EVERY = 5
UNREGISTER_AFTER = 45  # over the ~20 s SuperNodes take to reconnect to a restarted SuperLink
ONLINE_TIMEOUT = 120
# Where the SuperNodes' keys are published (the test carries them): the reaper keeps them when away.
PUBLISHED_AT = "1.41.0"
# The bound for every SuperNode to be back after the SuperLink restarts.
BACK_TIMEOUT = 120


def auth_claim(name: str, version: str, mode: str) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "default"}
    if mode == "StatefulSet":
        pool["replicas"] = 3
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "mode": mode,
            "isolationMode": "subprocess",
            "tls": {"secretName": "superlink-tls"},
            "nodeAuthentication": {
                "enabled": True,
                "registrationIntervalSeconds": REGISTER_EVERY,
                "unregisterAfterSeconds": UNREGISTER_AFTER,
            },
            "superlink": {"image": f"flwr/superlink:{version}"},
            "supernodes": {"image": f"flwr/supernode:{version}", "pools": [pool]},
        },
    }


def nodes(runner: PodRunner) -> list[dict[str, Any]]:
    """The SuperLink's registered SuperNodes, as the CLI lists them (none when it cannot answer)."""
    proc = cli_exec(runner, cli_argv(runner))
    if proc.returncode != 0:
        return []
    return list(identity_program.parse(proc.stdout, proc.stderr).get("nodes") or [])


def cli_argv(runner: PodRunner) -> list[str]:
    """The release's `flwr` listing command, as add_cli wrote it for the CLI's container."""
    pod = next(p for p in runner.pods if CLI_CONTAINER in p.containers)
    return pod.containers[CLI_CONTAINER].spec["env"]["FLWR_CLI"].split()


def wait_for(
    runner: PodRunner, what: str, test: Any, timeout: float, restarts: list[str] | None = None
) -> list[dict[str, Any]]:
    """Poll nodes() until test(nodes) holds with every container running; fail with the last listing and the logs.

    With restarts, exited containers are started again, as the kubelet does, and listed there.
    """
    deadline, listing = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        if restarts is not None:
            restarts += runner.restart_exited()
        listing = nodes(runner)
        if test(listing) and not runner.exited():
            return listing
        time.sleep(CLI_POLL_SECONDS)
    pytest.fail(f"{what} within {timeout} s; last listing: {listing}; exited: {runner.exited()}\n{runner.logs()}")


def registered(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The identities the SuperLink still accepts (it lists unregistered ones too)."""
    return [n for n in listing if n.get("status") not in ("unregistered", "deleted")]


def online(listing: list[dict[str, Any]]) -> set[str]:
    return {n["node-id"] for n in listing if n.get("status") == "online"}


@contextlib.contextmanager
def start(release: Release, tmp: pathlib.Path, mode: str) -> Iterator[tuple[PodRunner, list[dict[str, Any]], str]]:
    """The Federation rendered and running, with the CLI in the SuperLink's pod: the runner, the manifests, its name."""
    name = f"fed-auth-{mode.lower()}"
    secrets = [tls_secret(tmp, f"{name}-superlink")]
    rendered = render(tmp, auth_claim(name, release.version, mode), secrets)
    text = yaml.safe_dump_all(rendered)
    assert "PRIVATE KEY" not in text, "a private key in a composed resource"
    manifests = [unwrap(r) for r in rendered]
    extra = add_cli(manifests, release, tls=True)
    with PodRunner(tmp / "cluster", images(release.bin), secrets) as runner:
        runner.start([*rendered, *extra])
        yield runner, manifests, name


def supernode_pods(runner: PodRunner) -> list[str]:
    return sorted(p.name for p in runner.pods if p.labels.get("app.kubernetes.io/name") == "supernode")


def public_keys(runner: PodRunner, pods: list[str]) -> set[str]:
    """Each SuperNode's public key, as its identity volume holds it."""
    out = set()
    for pod in pods:
        proc = runner.exec(
            NAMESPACE, pod, "supernode", ["python", "-c", "print(open('/app/auth/supernode.pub').read())"]
        )
        assert proc.returncode == 0, proc.stderr
        out.add(proc.stdout.strip())
    return out


def publish(runner: PodRunner, name: str, pods: list[str]) -> None:
    """Publish the pods' keys as their identity containers would, and list them beside the SuperLink.

    The ConfigMaps the program makes (owned by each pod's claim, with its node
    ID), observed as provider-kubernetes' collection would, checked and listed
    by the function's own builders; the kubelet then updates the reaper's volume.
    """
    place = published_keys.Place("default", NAMESPACE)
    collection = published_keys.collection_name(name, NAMESPACE, place.cluster, place.namespace)
    members = []
    for pod in pods:
        read = "print(open('/app/auth/supernode.pub').read().strip(), open('/app/auth/supernode.node-id').read())"
        proc = runner.exec(NAMESPACE, pod, "supernode", ["python", "-c", read])
        assert proc.returncode == 0, proc.stderr
        *key, node_id = proc.stdout.split()
        claim = identity_program.Owner("PersistentVolumeClaim", f"{identity.IDENTITY_VOLUME}-{pod}", f"uid-{pod}")
        labels = identity.publication_labels(name, "default")
        configmap = identity_program.key_configmap(claim, NAMESPACE, labels, " ".join(key), node_id)
        members.append({
            "metadata": {"labels": {published_keys.MEMBER_LABEL: collection,
                                    published_keys.CARRIED_LABEL: published_keys.carried_label(name, NAMESPACE)}},
            "status": {"atProvider": {"manifest": configmap}},
        })  # fmt: skip
    keys = published_keys.published(name, NAMESPACE, {collection: place}, members)
    assert len(keys) == len(pods), keys
    runner.update(published_keys.authorized_keys(name, NAMESPACE, {}, keys))


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0"], indirect=True)
def test_statefulset_identities_register_survive_a_superlink_restart_and_are_reaped(
    release: Release, tmp_path: pathlib.Path
):
    with start(release, tmp_path, "StatefulSet") as (runner, manifests, name):
        pods = supernode_pods(runner)
        assert len(pods) == 3
        assert len(public_keys(runner, pods)) == 3, "SuperNodes share a key"
        old_keys = public_keys(runner, pods[1:])
        first = wait_for(runner, "3 SuperNodes online", lambda ls: len(online(ls)) == 3, ONLINE_TIMEOUT)
        ids = online(first)

        # The SuperLink restarts; its state (kept by default with node authentication) keeps the registrations.
        # A SuperNode may exit when its stream is cut (Flower 1.25 does, with code 0): the kubelet restarts it,
        # and with its key it is the same node.
        runner.restart(NAMESPACE, f"{name}-superlink-0", "superlink")
        restarts: list[str] = []
        wait_for(runner, "the same 3 SuperNodes online again", lambda ls: online(ls) == ids, BACK_TIMEOUT, restarts)
        assert all(r.rsplit("/", 1)[1].startswith("supernode:") for r in restarts), restarts

        # A key nobody registered is refused: the SuperNode exits.
        fleet = next(
            f"{m['metadata']['name']}.{NAMESPACE}.svc:{p['port']}"
            for m in manifests
            if m["kind"] == "Service"
            for p in m["spec"]["ports"]
            if p["name"] == "fleet"
        )
        keygen = (
            "from cryptography.hazmat.primitives import serialization as s; "
            "from cryptography.hazmat.primitives.asymmetric import ec; import sys; "
            "k = ec.generate_private_key(ec.SECP384R1()); "
            "open(sys.argv[1], 'wb').write(k.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))"
        )
        scratch = "/app/cli" if release.reads_pyproject else "/app/.flwr"
        made = cli_exec(runner, ["python", "-c", keygen, f"{scratch}/stranger.key"])
        assert made.returncode == 0, made.stderr
        stranger = cli_exec(
            runner,
            ["flower-supernode", f"--superlink={fleet}", "--root-certificates=/app/cli-tls/ca.crt",
             f"--auth-supernode-private-key={scratch}/stranger.key"],
            timeout=90,
        )  # fmt: skip
        assert stranger.returncode not in (0, -9), f"exit {stranger.returncode}\n{stranger.stdout}\n{stranger.stderr}"
        assert len(registered(nodes(runner))) == 3, "the stranger's key got registered"

        if release.version == PUBLISHED_AT:
            # Kubernetes holds the replicas' keys, published by their claims (the runner has no API server:
            # the test publishes as the pods would, and carries them as Crossplane would). Scaled 3 -> 1 ->
            # 3, past every grace period, they are away, not gone: the reaper keeps them, and they come back
            # with the same keys and node IDs.
            publish(runner, name, pods[1:])
            for pod in pods[1:]:
                runner.delete(NAMESPACE, pod)
            time.sleep(UNREGISTER_AFTER + 2 * CLI_POLL_SECONDS + 20)
            kept = registered(nodes(runner))
            assert {n["node-id"] for n in kept} == ids, f"a published identity was unregistered: {kept}"
            for pod in pods[1:]:
                runner.create(NAMESPACE, pod)
            back = wait_for(runner, "the same 3 SuperNodes back after 3 -> 1 -> 3", lambda ls: online(ls) == ids,
                            ONLINE_TIMEOUT, restarts=[])  # fmt: skip
            assert len(registered(back)) == 3
            assert public_keys(runner, pods[1:]) == old_keys, "a published identity was replaced"
            return

        # Scaled from 3 to 1: the two replicas go, and the reaper unregisters their identities.
        for pod in pods[1:]:
            runner.delete(NAMESPACE, pod)
        # The kubelet keeps restarting the one left if it exits meanwhile (Flower 1.25 may, on a slow machine).
        left = wait_for(
            runner, "1 registered identity", lambda ls: len(registered(ls)) == 1, UNREGISTER_AFTER + 60, restarts=[]
        )
        assert {n["node-id"] for n in registered(left)} <= ids

        # Scaled back to 3: the two replicas return, offline past every grace period, with their claims and
        # the keys the reaper unregistered (Flower never takes such a key back). Nobody is locked out: each
        # makes a new key pair, registers it and joins, and the SuperLink holds 3 registered identities.
        for pod in pods[1:]:
            runner.create(NAMESPACE, pod)
        wait_for(
            runner,
            "3 SuperNodes online and 3 registered after 3 -> 1 -> 3",
            lambda ls: len(online(ls)) == 3 and len(registered(ls)) == 3,
            ONLINE_TIMEOUT,
            restarts=[],
        )
        new_keys = public_keys(runner, pods[1:])
        assert len(new_keys) == 2, "the returning replicas share a key"
        assert not new_keys & old_keys, "a returning replica kept a key its SuperLink unregistered"


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0", "1.42.0"], indirect=True)
def test_daemonset_identities_one_per_node(release: Release, tmp_path: pathlib.Path):
    with start(release, tmp_path, "DaemonSet") as (runner, _, _):
        pods = supernode_pods(runner)
        assert len(pods) == 2
        keys = public_keys(runner, pods)
        assert len(keys) == 2, "SuperNodes share a key"
        first = wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT)
        assert runner.exited() == [], runner.logs()

        # Unregistered (by hand here, by the reaper after an outage): Flower never takes that key back.
        # Its pod makes a new key pair and joins as a new node, with nobody acting.
        victim = sorted(online(first))[0]
        argv = cli_argv(runner)
        argv[2:3] = ["unregister", victim]
        done = cli_exec(runner, argv, timeout=60)
        assert identity_program.parse(done.stdout, done.stderr).get("success") is True, done
        restarts: list[str] = []

        def rejoined(listing: list[dict[str, Any]]) -> bool:
            return len(online(listing)) == 2 and victim not in online(listing)

        back = wait_for(runner, "2 SuperNodes online, one under a new key", rejoined, ONLINE_TIMEOUT * 2, restarts)
        assert online(first) - {victim} <= online(back)
        now = public_keys(runner, pods)
        assert len(now) == 2 and len(now & keys) == 1, "not exactly one key replaced"


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0", "1.42.0"], indirect=True)
def test_a_federated_run_completes_with_authentication(release: Release, tmp_path: pathlib.Path):
    """`flwr run` of examples/app, process isolation and TLS, on SuperNodes that registered their own keys."""
    name = "fed-auth-run"
    federation = claim(name, release.version, "process", tls=True)
    federation["spec"]["nodeAuthentication"] = {"enabled": True}
    secrets = [tls_secret(tmp_path, f"{name}-superlink")]
    rendered = render(tmp_path, federation, secrets)
    manifests = [unwrap(r) for r in rendered]
    extra = [*add_cli(manifests, release, tls=True), *add_app(manifests)]

    def attempt(n: int) -> tuple[subprocess.CompletedProcess[str], str]:
        with PodRunner(tmp_path / f"cluster-{n}", images(release.bin, SUPEREXEC_IMAGES), secrets) as runner:
            runner.start([*rendered, *extra])
            wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT)
            return flwr_run(runner, release), runner.logs(lines=200)

    proc, logs = run_once_more_after_pull_race(attempt)
    out = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, f"{out}\n{logs}"
    assert "Received 2 results and 0 failures" in proc.stdout, out
