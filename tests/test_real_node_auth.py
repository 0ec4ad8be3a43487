"""Node authentication as real Flower processes: keys made in pods, proven by Kubernetes, registered by the SuperLink.

What function/builders/identity.py promises, run through the pod runner with TLS on.
The runner has no API server, so the test plays Kubernetes and Crossplane: it
publishes each pod's public key as the pod's identity container would (the
program's own ConfigMap, owned by the claim or the pod) and carries the
publications to the SuperLink's side with the function's own builders; the
kubelet (the runner) then updates the registrar's volume. The rest is real:
the SuperLink's registrar registers the listed keys over the pod's loopback,
and the SuperNodes, refused until then and restarted as the kubelet would,
join. Every SuperNode of a StatefulSet pool of 3 (or a DaemonSet on the
runner's 2 nodes) comes online under its own key; a key nobody published is
never registered; after the SuperLink process restarts they are all online
again with the same node IDs; a pool scaled 3 -> 1 -> 3 with its claims kept
(its keys still published) keeps its node IDs however long it was away; keys
whose holders are gone for good are unregistered and their new holders join
under new keys (no lockout); and a `flwr run` completes. Needs root, like
tests/test_real_flower.py.
"""

from __future__ import annotations

import contextlib
import itertools
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from function.builders import identity, published_keys
from function.programs import identity_program
from support.podrunner import CrashLoopBackOff, PodRunner, unwrap
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
    grpc_probe,
    images,
    render,
    run_once_more_after_pull_race,
    tls_secret,
)
from test_real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest

# The registrar's interval: it registers a carried key at once (it wakes when its list changes), so this
# paces only its listing of the SuperLink's nodes, a `flwr` call of about 2 CPU seconds each time.
REGISTER_EVERY = 10
# Over the registrar's interval and the runner's ConfigMap update: a key out of the list this long is gone.
UNREGISTER_AFTER = 15
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
# The bound for every SuperNode to be back after the SuperLink restarts.
BACK_TIMEOUT = 120


# The SuperLink's cluster, labelled for a selector pool: its SuperLink then reads the groups' shards.
SITE = {"flower.flwr.ai/site": "yes"}
HUB = {
    "apiVersion": "kubernetes.crossplane.io/v1alpha1",
    "kind": "ProviderConfig",
    "metadata": {"name": "default", "labels": SITE},
    "spec": {"credentials": {"source": "InjectedIdentity"}},
}
SHARD = "07"


def auth_claim(name: str, version: str, mode: str, replicas: int = 3) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "default"}
    if mode == "StatefulSet":
        pool["replicas"] = replicas
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
# restarted process must come back as the same node (tests/test_real_node_auth.py's claims hold or fail as before).
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


@pytest.mark.parametrize(
    ("reason", "log", "died"),
    [
        (
            "the thread's traceback, as Python prints it (Flower 1.25 under CI's load)",
            (
                b"INFO: Connection successful after 24.11 seconds and 7 tries.\n"
                b"Exception in thread Thread-2 (_run):\nTraceback (most recent call last):\n"
                b'  File "/opt/venv/lib/python3.11/site-packages/flwr/supercore/heartbeat.py", line 105, in _run\n'
                b"grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
                b"\tstatus = StatusCode.CANCELLED\n"
            ),
            True,
        ),
        ("retries only", b"WARNING: Connection attempt failed, retrying in 0.49 seconds\n", False),
        (
            "another thread's death is not the heartbeat's",
            b'Exception in thread Thread-3 (run):\n  File "/opt/venv/lib/python3.11/site-packages/grpc/_channel.py"\n',
            False,
        ),
    ],
)
def test_a_dead_heartbeat_thread_is_told_from_the_supernodes_output(reason, log, died):
    assert heartbeat_died(log) is died, reason


def registered(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The identities the SuperLink still accepts (it lists unregistered ones too)."""
    return [n for n in listing if n.get("status") not in ("unregistered", "deleted")]


def online(listing: list[dict[str, Any]]) -> set[str]:
    return {n["node-id"] for n in listing if n.get("status") == "online"}


@contextlib.contextmanager
def start(
    release: Release, tmp: pathlib.Path, mode: str, replicas: int = 3, *, sharded: bool = False
) -> Iterator[tuple[PodRunner, list[dict[str, Any]], str]]:
    """The Federation rendered and running, with the CLI in the SuperLink's pod: the runner, the manifests, its name.

    sharded: its pool a selector matching the SuperLink's own cluster, so its SuperLink reads groups' shards too.
    """
    name = f"fed-auth-{mode.lower()}" + ("-sharded" if sharded else "")
    secrets = [tls_secret(tmp, f"{name}-superlink")]
    federation = auth_claim(name, release.version, mode, replicas)
    required = list(secrets)
    if sharded:
        federation["spec"]["supernodes"]["pools"] = [{"name": "site", "clusterSelector": {"matchLabels": SITE}}]
        required.append(HUB)
    rendered = render(tmp, federation, required)
    text = yaml.safe_dump_all(rendered)
    assert "PRIVATE KEY" not in text, "a private key in a composed resource"
    manifests = [unwrap(r) for r in rendered]
    extra = add_cli(manifests, release, tls=True)
    with PodRunner(tmp / "cluster", images(release.bin), secrets) as runner:
        runner.start([*rendered, *extra])
        yield runner, manifests, name


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
    DaemonSet's pod), observed as provider-kubernetes' collection would,
    checked and listed by the function's own builders; the kubelet then
    updates the registrar's volume. Only these pods' keys: the others'
    publications are gone (their holders deleted).
    """
    runner.update(published_keys.authorized_keys(name, NAMESPACE, {}, checked(runner, name, pods)))


def checked(runner: PodRunner, name: str, pods: list[str]) -> list[published_keys.PublishedKey]:
    """The pods' keys, published and observed as carry says, checked by the function's own builder."""
    place = published_keys.Place("default", NAMESPACE)
    collection = published_keys.collection_name(name, NAMESPACE, place.cluster, place.namespace)
    members = []
    for pod in pods:
        target = runner.pod(NAMESPACE, pod)
        if identity.IDENTITY_VOLUME in target.claims:
            owner = identity_program.Owner("PersistentVolumeClaim", target.claims[identity.IDENTITY_VOLUME],
                                           f"uid-{target.claims[identity.IDENTITY_VOLUME]}")  # fmt: skip
        else:
            owner = identity_program.Owner("Pod", pod, target.uid)
        labels = identity.publication_labels(name, "default")
        configmap = identity_program.key_configmap(owner, NAMESPACE, labels, public_key(runner, pod))
        members.append({
            "metadata": {"labels": {published_keys.MEMBER_LABEL: collection,
                                    published_keys.CARRIED_LABEL: published_keys.carried_label(name, NAMESPACE)}},
            "status": {"atProvider": {"manifest": configmap}},
        })  # fmt: skip
    keys = published_keys.published(name, NAMESPACE, {collection: place}, members)
    assert len(keys) == len(pods), keys
    return keys


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0"], indirect=True)
def test_statefulset_identities_join_once_published_and_are_never_locked_out(release: Release, tmp_path: pathlib.Path):
    with start(release, tmp_path, "StatefulSet") as (runner, manifests, name):
        pods = supernode_pods(runner)
        assert len(pods) == 3
        keys = public_keys(runner, pods)
        assert len(keys) == 3, "SuperNodes share a key"

        # Nothing published yet: the SuperLink registers no key, and the SuperNodes are refused.
        time.sleep(2 * REGISTER_EVERY)
        assert registered(nodes(runner)) == [], "a key was registered without a publication"
        assert not online(nodes(runner))

        # Published and carried: the registrar registers them, the SuperNodes (restarted) join.
        carry(runner, name, pods)
        restarts: list[str] = []
        first = wait_for(runner, "3 SuperNodes online", lambda ls: len(online(ls)) == 3, ONLINE_TIMEOUT, restarts)
        ids = online(first)

        # The SuperLink restarts; its state (kept by default with node authentication) keeps the registrations.
        # A SuperNode may exit when its stream is cut (Flower 1.25 does, with code 0): the kubelet restarts it,
        # and with its key it is the same node.
        runner.restart(NAMESPACE, f"{name}-superlink-0", "superlink")
        restarts = []
        wait_for(runner, "the same 3 SuperNodes online again", lambda ls: online(ls) == ids, BACK_TIMEOUT, restarts)
        assert all(r.rsplit("/", 1)[1].startswith("supernode:") for r in restarts), restarts

        # A key nobody published is refused: the SuperNode exits, and nothing registers it.
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

        # Scaled 3 -> 1 -> 3 with the claims kept, so their keys stay published: away past every grace
        # period, not gone. The registrar keeps them, and they come back as the same nodes with the same keys.
        for pod in pods[1:]:
            runner.delete(NAMESPACE, pod)
        time.sleep(UNREGISTER_AFTER + 2 * REGISTER_EVERY)  # a turn past the grace period, at least
        kept = registered(nodes(runner))
        assert {n["node-id"] for n in kept} == ids, f"an identity away with its key published was unregistered: {kept}"
        for pod in pods[1:]:
            runner.create(NAMESPACE, pod)
        back = wait_for(runner, "the same 3 SuperNodes back after 3 -> 1 -> 3", lambda ls: online(ls) == ids,
                        ONLINE_TIMEOUT, restarts=[])  # fmt: skip
        assert len(registered(back)) == 3
        assert public_keys(runner, pods) == keys, "an identity away was replaced"

        # Gone for good: two replicas and their claims deleted (the pool removed, say), so their publications
        # go with the claims. Past the grace period the registrar unregisters those keys and nothing else.
        for pod in pods[1:]:
            runner.delete(NAMESPACE, pod)
            shutil.rmtree(runner.workdir / "claims" / NAMESPACE / f"{identity.IDENTITY_VOLUME}-{pod}")
        carry(runner, name, pods[:1])
        left = wait_for(runner, "1 registered identity", lambda ls: len(registered(ls)) == 1,
                        UNREGISTER_AFTER + ONLINE_TIMEOUT, restarts=[])  # fmt: skip
        assert {n["node-id"] for n in registered(left)} < ids

        # The pool back (new claims, new keys): nobody is locked out. Each new key is published and registered,
        # and the SuperLink holds 3 registered identities, 3 online.
        for pod in pods[1:]:
            runner.create(NAMESPACE, pod)
        carry(runner, name, pods)
        wait_for(
            runner,
            "3 SuperNodes online and 3 registered after the pool came back",
            lambda ls: len(online(ls)) == 3 and len(registered(ls)) == 3,
            ONLINE_TIMEOUT,
            restarts=[],
        )
        new_keys = public_keys(runner, pods[1:])
        assert len(new_keys) == 2, "the returning replicas share a key"
        assert not new_keys & keys, "a returning replica kept a key its SuperLink unregistered"


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0", "1.42.0"], indirect=True)
def test_daemonset_identities_one_per_node(release: Release, tmp_path: pathlib.Path):
    with start(release, tmp_path, "DaemonSet") as (runner, _, name):
        pods = supernode_pods(runner)
        assert len(pods) == 2
        keys = public_keys(runner, pods)
        assert len(keys) == 2, "SuperNodes share a key"
        carry(runner, name, pods)
        first = wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT, [])

        # A replaced pod is a new identity (its key lived in memory): the new key is published and joins,
        # and the old one, whose publication went with its pod, is unregistered after the grace period.
        victim = pods[0]
        runner.delete(NAMESPACE, victim)
        runner.create(NAMESPACE, victim)
        assert public_key(runner, victim) not in keys, "a new pod kept the key of the one it replaced"
        carry(runner, name, pods)

        def rejoined(listing: list[dict[str, Any]]) -> bool:
            return len(online(listing)) == 2 and len(registered(listing)) == 2 and online(listing) != online(first)

        back = wait_for(runner, "2 SuperNodes online, one under a new key", rejoined,
                        ONLINE_TIMEOUT + UNREGISTER_AFTER, [])  # fmt: skip
        assert len(online(first) & online(back)) == 1, "not exactly one node replaced"


@pytest.mark.parametrize("release", ["1.25.0", "1.41.0", "1.42.0"], indirect=True)
def test_a_federated_run_completes_with_authentication(release: Release, tmp_path: pathlib.Path):
    """`flwr run` of examples/app, process isolation and TLS, on SuperNodes whose keys Kubernetes vouched for."""
    name = "fed-auth-run"
    federation = claim(name, release.version, "process", tls=True)
    federation["spec"]["nodeAuthentication"] = {"enabled": True, "registrationIntervalSeconds": REGISTER_EVERY}
    secrets = [tls_secret(tmp_path, f"{name}-superlink")]
    rendered = render(tmp_path, federation, secrets)
    manifests = [unwrap(r) for r in rendered]
    extra = [*add_cli(manifests, release, tls=True), *add_app(manifests)]

    def attempt(n: int) -> tuple[subprocess.CompletedProcess[str], str]:
        with PodRunner(tmp_path / f"cluster-{n}", images(release.bin, SUPEREXEC_IMAGES), secrets) as runner:
            runner.start([*rendered, *extra])
            carry(runner, name, supernode_pods(runner))
            wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT, [])
            return flwr_run(runner, release), runner.logs(lines=200)

    proc, logs = run_once_more_after_pull_race(attempt)
    out = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, f"{out}\n{logs}"
    assert "Received 2 results and 0 failures" in proc.stdout, out


@pytest.mark.parametrize("release", ["1.42.0"], indirect=True)
def test_keys_in_a_groups_shard_register_and_a_missing_shard_locks_no_one_out(release: Release, tmp_path: pathlib.Path):
    """Remote clusters' keys reach the registrar in their group's shard (function/composition/groups.py), which
    the SuperLink mounts beside its own list. A shard the list names but the kubelet does not deliver (its
    ConfigMap deleted, or not made yet) unregisters no one, however long; once the list no longer names it (the
    group's clusters left), its keys are gone and unregistered after the grace period."""
    with start(release, tmp_path, "DaemonSet", sharded=True) as (runner, _, name):
        pods = supernode_pods(runner)
        assert len(pods) == 2
        # As a FederationCluster reports them and its group lists them, checked at each step.
        reported = published_keys.reported(checked(runner, name, pods))
        lines = published_keys.reported_lines("default", reported)
        assert lines == reported
        runner.update(published_keys.shard(name, NAMESPACE, {}, SHARD, lines))
        runner.update(published_keys.authorized_keys(name, NAMESPACE, {}, [], [SHARD]))
        first = wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT, [])
        ids = online(first)

        runner.remove("ConfigMap", NAMESPACE, identity.shard_name(name, SHARD))
        time.sleep(UNREGISTER_AFTER + 2 * REGISTER_EVERY)  # a turn past the grace period, at least
        kept = registered(nodes(runner))
        assert {n["node-id"] for n in kept} == ids, f"keys of a named shard not delivered were unregistered: {kept}"

        # The group's clusters left: their pods are gone, and the list no longer names the shard.
        for pod in pods:
            runner.delete(NAMESPACE, pod)
        runner.update(published_keys.authorized_keys(name, NAMESPACE, {}, [], []))
        wait_for(runner, "no identity registered once the shard is no longer named",
                 lambda ls: not registered(ls), UNREGISTER_AFTER + ONLINE_TIMEOUT)  # fmt: skip


def retired_report(runner: PodRunner, name: str) -> list[str]:
    """The last report of retired keys the registrar made, from its log: `<digest> <holder>` lines."""
    log = runner.pod(NAMESPACE, f"{name}-superlink-0").containers[identity.REGISTRAR].log.read_text()
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("retired keys to replace: ")]
    if not starts:
        return []
    return [line.removeprefix("retired: ") for line in lines[starts[-1] + 1 :] if line.startswith("retired: ")]


@pytest.mark.parametrize("release", ["1.41.0"], indirect=True)
def test_an_unregistered_key_is_replaced_and_joins_with_no_one_acting(release: Release, tmp_path: pathlib.Path):
    """Unregistered by hand through the Control API (the loopback, as `kubectl port-forward` reaches it): Flower
    never takes that key back. The registrar retires it and reports it; Crossplane carries the report to the pool's
    namespace (here the test, with the function's own builders); the pod's rekey sidecar makes a new key and
    publishes it; the registrar registers it, and the SuperNode, restarted by the kubelet, joins under it."""
    with start(release, tmp_path, "StatefulSet", replicas=2) as (runner, _, name):
        pods = supernode_pods(runner)
        keys = {pod: public_key(runner, pod) for pod in pods}
        carry(runner, name, pods)
        first = wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT, [])

        gone = min(online(first))
        argv = cli_argv(runner)
        verb = next(i for i, word in enumerate(argv) if word in ("ls", "list"))
        unregister = [*argv[:verb], "unregister", str(gone), *argv[verb + 1 :]]
        proc = cli_exec(runner, unregister)
        assert identity_program.parse(proc.stdout, proc.stderr).get("success"), (proc.stdout, proc.stderr)

        # The registrar sees the node unregistered, retires its key and reports it with its holder.
        deadline = time.monotonic() + ONLINE_TIMEOUT
        while not (report := retired_report(runner, name)) and time.monotonic() < deadline:
            time.sleep(REGISTER_EVERY)
        assert len(report) == 1, runner.logs()
        digest, holder = report[0].split()
        victim = next(pod for pod in pods if identity_program.key_digest(keys[pod]) == digest)
        assert holder == f"default/{NAMESPACE}/PersistentVolumeClaim/{identity.IDENTITY_VOLUME}-{victim}"

        # Carried to the pool's namespace as the function composes it; the kubelet updates the sidecar's volume.
        reported = identity.reported_retired({"data": {identity_program.RETIRED_FIELD: "\n".join(report) + "\n"}})
        digests = [d for d, h in reported if h.startswith(f"default/{NAMESPACE}/")]
        runner.update(identity.retired_keys(name, NAMESPACE, {}, digests))
        deadline = time.monotonic() + ONLINE_TIMEOUT
        while public_key(runner, victim) == keys[victim] and time.monotonic() < deadline:
            time.sleep(REGISTER_EVERY)
        assert public_key(runner, victim) != keys[victim], runner.logs()
        assert public_key(runner, pods[1 - pods.index(victim)]) == keys[pods[1 - pods.index(victim)]], (
            "a key nobody retired was replaced"
        )

        # Its new publication carried: registered, and the SuperNode joins under it, beside the other one.
        carry(runner, name, pods)
        back = wait_for(
            runner,
            "2 SuperNodes online again, one under a new key",
            lambda ls: len(online(ls)) == 2 and len(registered(ls)) == 2,
            ONLINE_TIMEOUT,
            restarts=[],
        )
        assert gone not in online(back) and len(online(back) & online(first)) == 1, (first, back)
