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
tests/real/test_real_flower.py.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from function.builders import identity, published_keys
from function.programs import flwr_control, identity_program
from support.podrunner import PodRunner, unwrap
from support.real_flower import (
    NAMESPACE,
    SUPEREXEC_IMAGES,
    Release,
    add_app,
    add_cli,
    claim,
    cli_exec,
    flwr_run,
    images,
    log_marks,
    pods_after_run,
    render,
    run_failed,
    run_once_more_after_pull_race,
    tls_secret,
)
from support.real_flower import release as release  # noqa: PLC0414 - the fixture, re-exported for pytest
from support.real_node_auth import (
    ONLINE_TIMEOUT,
    REGISTER_EVERY,
    carry,
    checked,
    cli_argv,
    heartbeat_died,
    nodes,
    online,
    public_key,
    public_keys,
    registered,
    supernode_pods,
    wait_for,
)

# Over the registrar's interval and the runner's ConfigMap update: a key out of the list this long is gone.
UNREGISTER_AFTER = 15
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


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.25.0", "the oldest supported: SuperNodes on gRPC"),
        ("1.41.0", "SuperNodes on HTTP, through the Fleet API proxy"),
        ("1.42.0", "the newest supported"),
    ],
    indirect=["release"],
)
def test_daemonset_identities_one_per_node(release: Release, reason: str, tmp_path: pathlib.Path):
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
        assert len(online(first) & online(back)) == 1, f"not exactly one node replaced ({reason})"


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.25.0", "the oldest supported: SuperNodes on gRPC"),
        ("1.41.0", "SuperNodes on HTTP, through the Fleet API proxy"),
        ("1.42.0", "the newest supported"),
    ],
    indirect=["release"],
)
def test_a_federated_run_completes_with_authentication(release: Release, reason: str, tmp_path: pathlib.Path):
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
            marks = log_marks(runner)
            return flwr_run(runner, release), pods_after_run(runner, marks)

    proc, logs = run_once_more_after_pull_race(attempt)
    assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, run_failed(reason, proc, logs)
    assert "Received 2 results and 0 failures" in proc.stdout, run_failed(reason, proc, logs)


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
        assert flwr_control.parse(proc.stdout, proc.stderr).get("success"), (proc.stdout, proc.stderr)

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


def stranger_key() -> str:
    """A P-384 public key no pod holds, in OpenSSH's one-line form: what a pool's pod could publish for itself."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - the tests' own, as the pods'
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    public = ec.generate_private_key(ec.SECP384R1()).public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.mark.parametrize(
    ("release", "reason"),
    [("1.42.0", "the newest release: one HTTP listener for every API, the registrar its only Control client")],
    indirect=["release"],
)
def test_a_publication_naming_anothers_node_acts_on_no_node_but_its_own(
    release: Release, reason: str, tmp_path: pathlib.Path
):
    """From a pool pod's seat: a listed key whose line names another SuperNode's node ID (a publication's
    `node-id`, which an older function carried) is registered as a node of its own; the named node is not
    adopted, and when that line leaves the list, the registrar unregisters the stranger's node alone: the
    victim keeps its node ID and stays online. (Without the fix the registrar adopted the key under the
    victim's node, registered nothing, and unregistered the victim's node once the line was gone.)"""
    with start(release, tmp_path, "StatefulSet", replicas=2) as (runner, _, name):
        pods = supernode_pods(runner)
        carry(runner, name, pods)
        first = wait_for(runner, "2 SuperNodes online", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT, [])
        victim = min(online(first))
        listed = published_keys.authorized_keys(name, NAMESPACE, {}, checked(runner, name, pods))
        forged = f"{stranger_key()} default/{NAMESPACE}/Pod/{pods[0]} {victim}\n"
        text = listed["data"][published_keys.AUTHORIZED_KEYS]
        runner.update({**listed, "data": {**listed["data"], published_keys.AUTHORIZED_KEYS: text + forged}})

        three = wait_for(runner, "the stranger's key registered as its own node", lambda ls: len(registered(ls)) == 3,
                         BACK_TIMEOUT, restarts=[])  # fmt: skip
        stranger = {n["node-id"] for n in registered(three)} - {n["node-id"] for n in registered(first)}
        assert len(stranger) == 1 and victim not in stranger, (reason, first, three)
        assert victim in online(three), "the victim's node was taken over"

        # The line goes (its publication deleted): past the grace period, the stranger's node alone goes.
        runner.update(listed)
        after = wait_for(runner, "the stranger's node unregistered", lambda ls: len(registered(ls)) == 2,
                         BACK_TIMEOUT + UNREGISTER_AFTER, restarts=[])  # fmt: skip
        assert {n["node-id"] for n in registered(after)} == {n["node-id"] for n in registered(first)}, after
        assert victim in online(after), (reason, after)
