"""A Flower upgrade under a live federation, as real Flower processes: spec.version 1.41.0 -> 1.42.0.

A Federation with node authentication and TLS (its SuperLink's state on a claim, as node authentication
keeps it by default) and a StatefulSet pool of 2, rendered by the function at 1.41.0 and run by the pod
runner, whose images map both releases by full reference (flwr/superlink:1.41.0 to 1.41's venv,
flwr/superlink:1.42.0 to 1.42's, and so for flwr/supernode and flwr/superexec): each pod runs the
release its template names, and nothing else. Rendered again at 1.42.0, it rolls as Kubernetes rolls
it: the SuperLink's StatefulSet and the pool's each on their own, at once, a pool one pod at a time,
highest ordinal first (PodRunner.roll, its claims kept). The order tested covers both skews: the pool's
highest ordinal (a 1.42 SuperNode beside the 1.41 SuperLink), then the SuperLink (1.42, beside a 1.41
SuperNode), then the pool's last pod. Before each pod rolls, the new render's ConfigMaps and Secrets are
applied and the keys carried (the kubelet syncs the volumes). After each step the SuperLink lists
exactly the nodes it had, all online (none locked out, none registered twice); a rolled SuperNode's
new process says it runs as the node ID it had; every SuperNode has heartbeated the SuperLink of the
moment since the roll (its `online_until` in the state moved on: across the SuperLink's roll they keep
their node and do not activate again, so the listing alone would show the old SuperLink's word); and
while a SuperNode rolls its peer stays online, so the federation keeps a SuperNode to train with. The
state's alembic revision moves to 1.42's head once its SuperLink starts, and a `flwr run` completes on
1.42. Then the downgrade the API server refuses (function/api/spec.py NO_DOWNGRADE): a 1.41 SuperLink on
the state 1.42 migrated exits, saying it cannot locate 1.42's revision, and leaves the state as it was.
Needs root, like tests/real/test_real_flower.py.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import sqlite3
import time
from typing import Any

from function.api.spec import FLEET_PROXY_IMAGE
from function.builders import published_keys
from support.podrunner import Image, Manifest, PodRunner, flower_images, nginx_image, repository, unwrap
from support.real_flower import (
    NAMESPACE,
    Release,
    add_app,
    add_cli,
    flwr_run,
    installed_release,
    nginx_root,
    render,
    tls_secret,
)
from support.real_node_auth import (
    ONLINE_TIMEOUT,
    REGISTER_EVERY,
    carry,
    online,
    public_key,
    registered,
    supernode_pods,
    wait_for,
)

NAME = "fed-upgrade"
FROM, TO = "1.41.0", "1.42.0"
SUPERLINK = f"{NAME}-superlink-0"
# The SuperLink's state, on its claim (the StatefulSet's volumeClaimTemplate `state`), as its --database names it.
STATE_DB = pathlib.PurePosixPath(f"state-{SUPERLINK}") / "state.db"
# Where a release's state migrations are (one file per alembic revision).
MIGRATIONS = "flwr/supercore/state/alembic/versions"


def federation(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "mode": "StatefulSet",
            "isolationMode": "process",
            "version": version,
            "tls": {"secretName": "superlink-tls"},
            "nodeAuthentication": {"enabled": True, "registrationIntervalSeconds": REGISTER_EVERY},
            "supernodes": {"pools": [{"name": "default", "replicas": 2}]},
        },
    }


def rendered(tmp: pathlib.Path, release: Release, secrets: list[Manifest]) -> list[Manifest]:
    """The Federation at the release, rendered by the function, with the release's CLI (and the app) in the
    SuperLink's pod: the manifests, the CLI's and the app's ConfigMaps last."""
    tmp.mkdir()
    manifests = [unwrap(r) for r in render(tmp, federation(release.version), secrets)]
    return [*manifests, *add_cli(manifests, release, tls=True), *add_app(manifests)]


def images_by_reference(*releases: Release) -> dict[str, Image]:
    """Each release's Flower images by full reference (flwr/superlink:1.41.0), and the Fleet proxy's nginx:
    a pod runs the release its images name, and an image of any other release has no entrypoint."""
    out = {repository(FLEET_PROXY_IMAGE): nginx_image(nginx_root())}
    for release in releases:
        out |= {f"{repo}:{release.version}": image for repo, image in flower_images(release.bin).items()}
    return out


def template(manifests: list[Manifest], workload: str) -> Manifest:
    """The pod template of the StatefulSet whose name ends so (-superlink, -supernode-default)."""
    sts = next(m for m in manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"].endswith(workload))
    pod: Manifest = sts["spec"]["template"]
    return pod


def apply(runner: PodRunner, manifests: list[Manifest], pods: list[str]) -> None:
    """The render's ConfigMaps and Secrets, as Crossplane applies them and the kubelet syncs pods' volumes; the
    keys' list as the function composes it from the publications it observes (carry), not as rendered alone."""
    listed = published_keys.authorized_keys_name(NAME)
    for m in manifests:
        if m["kind"] in ("ConfigMap", "Secret") and m["metadata"]["name"] != listed:
            runner.update(m)
    carry(runner, NAME, pods)


def revisions(release: Release) -> set[str]:
    """The alembic revisions the release's state migrations define."""
    (versions,) = release.bin.parent.glob(f"lib/python*/site-packages/{MIGRATIONS}")
    found = (re.search(r'^revision: str = "(\w+)"', p.read_text(), re.MULTILINE) for p in versions.glob("rev_*.py"))
    return {m.group(1) for m in found if m}


def state(runner: PodRunner, query: str) -> list[tuple[Any, ...]]:
    """Rows of the SuperLink's state database, read on its claim as the SuperLink runs (read-only)."""
    path = runner.workdir / "claims" / NAMESPACE / STATE_DB
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
        return db.execute(query).fetchall()


def state_revision(runner: PodRunner) -> set[str]:
    """The alembic revisions the SuperLink's state is at."""
    return {row[0] for row in state(runner, "SELECT version_num FROM alembic_version")}


def heartbeats(runner: PodRunner) -> dict[str, float]:
    """Each node's `online_until` in the SuperLink's state, by node ID as the CLI lists it: the SuperLink moves it
    on at each of the node's heartbeats (its interval, times Flower's patience, past the heartbeat)."""
    rows = state(runner, "SELECT node_id, online_until FROM node WHERE online_until IS NOT NULL")
    return {str(node % 2**64): float(until) for node, until in rows}  # stored signed, listed unsigned


def said_node_id(runner: PodRunner, pod: str, since: int = 0) -> str:
    """The node ID a pod's SuperNode said it runs as ("SuperNode ID: ..."), in its output from since on ("": none)."""
    log = runner.pod(NAMESPACE, pod).containers["supernode"].log
    said = re.findall(r"SuperNode ID: (\d+)", log.read_bytes()[since:].decode(errors="replace"))
    return said[-1] if said else ""


def runs(runner: PodRunner, pod: str) -> dict[str, tuple[str, pathlib.Path]]:
    """Each Flower container of a pod (init containers too): the release its image names, the venv it runs."""
    spec = runner.pod(NAMESPACE, pod).spec
    containers = runner.pod(NAMESPACE, pod).containers
    return {
        c["name"]: (c["image"].rsplit(":", 1)[1], pathlib.Path(containers[c["name"]].spec["binds"][0][0]))
        for c in [*spec.get("initContainers", []), *spec["containers"]]
        if c["image"].startswith("flwr/")
    }


def assert_releases(runner: PodRunner, expected: dict[str, Release]) -> None:
    """Every Flower container of each pod names its release's image and runs that release's venv."""
    for pod, release in expected.items():
        want = (release.version, release.bin.absolute().parent)
        seen = runs(runner, pod)
        assert seen, pod
        assert all(ran == want for ran in seen.values()), (pod, release.version, seen)


def rolled(runner: PodRunner, pod: str, new: Manifest, nodes: dict[str, str]) -> None:
    """Roll the pod to the template; wait until the same SuperNodes are online, each heartbeating the SuperLink
    since (the new one, or the one they had) and a rolled SuperNode's new process under the node ID it had.

    nodes: each SuperNode's pod and node ID. Then exactly those nodes are registered, and while a SuperNode
    rolls its peer is online in every answer of the SuperLink: the pool rolling one pod at a time keeps a
    SuperNode to train with."""
    ids, seen = set(nodes.values()), []
    logs = {p: runner.pod(NAMESPACE, p).containers["supernode"].log.stat().st_size for p in nodes}
    until = heartbeats(runner)

    def back(listing: list[dict[str, Any]]) -> bool:
        seen.append(listing)
        beat = heartbeats(runner)
        anew = pod not in nodes or said_node_id(runner, pod, logs[pod]) != ""
        return online(listing) == ids and all(beat.get(i, 0) > until.get(i, 0) for i in ids) and anew

    runner.roll(NAMESPACE, pod, new)
    listing = wait_for(runner, f"the same SuperNodes online after {pod} rolled", back, ONLINE_TIMEOUT, restarts=[])
    assert {n["node-id"] for n in registered(listing)} == ids, f"{pod}: registrations changed: {listing}"
    assert len(registered(listing)) == len(ids), f"{pod}: a SuperNode registered twice: {listing}"
    if pod in nodes:
        assert said_node_id(runner, pod, logs[pod]) == nodes[pod], f"{pod} came back as another node"
        peer = ids - {nodes[pod]}
        answered = [ls for ls in seen if ls]
        assert answered, f"{pod}: the SuperLink never answered while it rolled"
        assert all(peer <= online(ls) for ls in answered), f"{pod}: its peer went offline: {answered}"


def refused_downgrade(runner: PodRunner, old: Manifest) -> str:
    """Roll the SuperLink's pod back to the older release's template: what its SuperLink said before it exited."""
    log = runner.pod(NAMESPACE, SUPERLINK).containers["superlink"].log
    offset = log.stat().st_size  # the log is appended to: only what the new container says
    runner.roll(NAMESPACE, SUPERLINK, old)
    superlink = runner.pod(NAMESPACE, SUPERLINK).containers["superlink"]
    deadline = time.monotonic() + ONLINE_TIMEOUT  # a liveness bound: it exits in seconds
    while superlink.running() and time.monotonic() < deadline:
        time.sleep(1)
    said = log.read_bytes()[offset:].decode(errors="replace")
    assert not superlink.running(), f"a {FROM} SuperLink runs on the state {TO} migrated:\n{said}"
    assert superlink.popen.returncode == 1, said  # Python's exit on an uncaught exception
    return said


def test_a_flower_upgrade_rolls_under_a_live_federation_and_an_older_superlink_cannot_start(tmp_path: pathlib.Path):
    old, new = installed_release(FROM), installed_release(TO)
    secrets = [tls_secret(tmp_path, f"{NAME}-superlink")]
    before, after = rendered(tmp_path / FROM, old, secrets), rendered(tmp_path / TO, new, secrets)
    only_new = revisions(new) - revisions(old)
    assert only_new, f"{TO} adds no state migration to {FROM}'s"
    pool, superlink = template(after, "-supernode-default"), template(after, "-superlink")
    with PodRunner(tmp_path / "cluster", images_by_reference(old, new), secrets) as runner:
        runner.start(before)
        pods = supernode_pods(runner)
        assert len(pods) == 2
        keys = {pod: public_key(runner, pod) for pod in pods}
        carry(runner, NAME, pods)
        listing = wait_for(runner, f"2 SuperNodes online at {FROM}", lambda ls: len(online(ls)) == 2, ONLINE_TIMEOUT,
                           restarts=[])  # fmt: skip
        nodes = {pod: said_node_id(runner, pod) for pod in pods}
        assert set(nodes.values()) == online(listing), (nodes, listing)
        assert_releases(runner, {SUPERLINK: old, pods[0]: old, pods[1]: old})
        at_old = state_revision(runner)
        assert at_old <= revisions(old), at_old

        # The pool's highest ordinal first: a 1.42 SuperNode beside the 1.41 SuperLink, whose state stays as it was.
        apply(runner, after, pods)
        rolled(runner, pods[1], pool, nodes)
        assert_releases(runner, {SUPERLINK: old, pods[0]: old, pods[1]: new})
        assert state_revision(runner) == at_old

        # The SuperLink: 1.42 migrates the state 1.41 left, keeps its registrations, beside a 1.41 SuperNode.
        apply(runner, after, pods)
        rolled(runner, SUPERLINK, superlink, nodes)
        assert_releases(runner, {SUPERLINK: new, pods[0]: old, pods[1]: new})
        at_new = state_revision(runner)
        assert len(at_new & only_new) == 1, f"the state is at {at_new}, not at {TO}'s head"

        # The pool's last pod: every part at 1.42, the same nodes, each under the key it had.
        apply(runner, after, pods)
        rolled(runner, pods[0], pool, nodes)
        assert_releases(runner, {SUPERLINK: new, pods[0]: new, pods[1]: new})
        assert {pod: public_key(runner, pod) for pod in pods} == keys, "a SuperNode's identity changed"

        proc = flwr_run(runner, new)
        out = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in proc.stdout, f"{out}\n{runner.logs(lines=200)}"
        assert "Received 2 results and 0 failures" in proc.stdout, out

        # Back to 1.41 (what the API server refuses): its SuperLink cannot start on the state 1.42 migrated.
        apply(runner, before, pods)
        said = refused_downgrade(runner, template(before, "-superlink"))
        (head,) = at_new & only_new
        assert f"No such revision or branch '{head}'" in said, said
        assert f"alembic.util.exc.CommandError: Can't locate revision identified by '{head}'" in said, said
        assert state_revision(runner) == at_new, "the older SuperLink changed the state"
