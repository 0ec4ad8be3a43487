"""The pod runner does what a kubelet does with the parts of a pod spec it supports.

A pod of shell and Python containers (the host's /bin and this venv, as an
image) reports what it sees: argv and env after $(VAR) expansion, its user
and groups, its volumes, its root file system, and the network through a
Service. Runner tests need root.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from support.peers import need
from support.podrunner import NO_API_TOKEN, CrashLoopBackOff, PodRunner, expand, repository, venv_image

TOOLS = "example.test/tools:1"
HELD = "example.test/held:1"  # a venv kept under /tmp, in a folder with spaces, as a clone there would keep it
# What a script of that venv sees in a container: where it runs from, its
# image's files, its /tmp; then it leaves a file in that /tmp.
LOOK = """
import json, os, sys
print(json.dumps({"prefix": sys.prefix, "data": open(os.path.join(sys.prefix, "share", "held.txt")).read(),
                  "tmp": sorted(os.listdir("/tmp")), "host": os.path.exists(sys.argv[1])}))
open("/tmp/mine", "w").close()
"""
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "creds", "namespace": "team"},
    "data": {"token": base64.b64encode(b"t0ken").decode(), "unused": base64.b64encode(b"x").decode()},
}
CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "settings", "namespace": "team"},
    "data": {"greeting": "hello", "flower.conf": "rounds = 3\n"},
}


@pytest.mark.parametrize(
    ("text", "expected", "reason"),
    [
        ("$(A)", "a", "a defined variable"),
        ("x$(A)y$(B)", "xayb", "two, amid text"),
        ("$$(A)", "$(A)", "$$ escapes a reference"),
        ("$$$(A)", "$a", "an escaped $, then a reference"),
        ("$$$$", "$$", "two escapes"),
        ("$(MISSING)", "$(MISSING)", "an undefined variable stays as written"),
        ("$()", "$()", "an empty name stays as written"),
        ("$(A", "$(A", "a reference never closed stays as written"),
        ("$A", "$A", "no parentheses, no reference"),
        ("a$", "a$", "a $ at the end"),
        ("$(A)$", "a$", "a reference, then a $ at the end"),
    ],
)
def test_expand_follows_kubernetes(text, expected, reason):
    assert expand(text, {"A": "a", "B": "b"}) == expected, reason


@pytest.mark.parametrize(
    ("image", "expected", "reason"),
    [
        ("flwr/superlink:1.25.0", "flwr/superlink", "a tag"),
        (
            "registry.example.com:5000/ml/clientapp:1.25.0",
            "registry.example.com:5000/ml/clientapp",
            "a registry's port is no tag",
        ),
        ("flwr/superexec@sha256:0123", "flwr/superexec", "a digest"),
        ("localhost:5000/app", "localhost:5000/app", "a registry's port and no tag"),
        ("busybox", "busybox", "a bare name"),
    ],
)
def test_repository_drops_tag_and_digest(image, expected, reason):
    assert repository(image) == expected, reason


def test_crash_loop_back_off_doubles_up_to_its_cap(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("support.podrunner.time.monotonic", lambda: now[0])
    backoff, a, b = CrashLoopBackOff(first=10, cap=25), ("ns", "pod", "a"), ("ns", "pod", "b")
    starts = []
    for _ in range(90):  # one look a second; each container exits at once, seen so at the next look
        starts += [(now[0], c[2]) for c in (a, b) if backoff.due(c)]
        now[0] += 1
    # Each waits 10 s after the look that saw it exit, then 20, then the cap: each container on its own count.
    assert [t for t, c in starts if c == "a"] == [110, 131, 157, 183]
    assert [t for t, c in starts if c == "b"] == [110, 131, 157, 183]


def probe_pod() -> dict[str, Any]:
    shared = {"name": "shared", "mountPath": "/shared"}
    memory = {"name": "memory", "mountPath": "/memory"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "team", "labels": {"app": "probe"}},
        "spec": {
            "securityContext": {"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456, "supplementalGroups": [4567]},
            "initContainers": [
                {"name": "init", "image": TOOLS, "command": ["sh", "-c", "echo init > /shared/init"],
                 "volumeMounts": [shared]},
                {"name": "sidecar", "image": TOOLS, "restartPolicy": "Always", "volumeMounts": [shared, memory],
                 "command": ["sh", "-c", "echo sidecar > /shared/sidecar; exec sleep infinity"]},
            ],
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "command": ["python", "-c", "import time; time.sleep(1e6)"],
                "args": ["$(B)", "$$(B)", "$(NOPE)", "$(LATER)"],
                "workingDir": "/usr/local/probe",
                "securityContext": {"readOnlyRootFilesystem": True},
                "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "S_"}],
                "env": [
                    {"name": "A", "value": "x"},
                    {"name": "B", "value": "$(A)-y"},
                    {"name": "C", "value": "$$(A) $(LATER)"},
                    {"name": "LATER", "value": "z"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
                ],
                "volumeMounts": [
                    shared,
                    memory,
                    {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
                    {"name": "settings", "mountPath": "/etc/flower/flower.conf", "subPath": "flower.conf"},
                    {"name": "both", "mountPath": "/both", "readOnly": True},
                    {"name": "shared", "mountPath": "/tmp", "subPath": "tmp"},
                ],
            }],
            "volumes": [
                {"name": "shared", "emptyDir": {}},
                {"name": "memory", "emptyDir": {"medium": "Memory"}},
                {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400,
                                             "items": [{"key": "token", "path": "sub/token"}]}},
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "both", "projected": {"defaultMode": 0o444, "sources": [
                    {"secret": {"name": "creds", "items": [{"key": "token", "path": "token"}]}},
                    {"configMap": {"name": "settings", "items": [{"key": "greeting", "path": "conf/greeting"}]}},
                    {"serviceAccountToken": {"path": "sa/token", "expirationSeconds": 3600}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "sa/ca.crt"}]}},
                    {"configMap": {"name": "later", "optional": True, "items": [{"key": "note", "path": "note"}]}},
                ]}},
            ],
        },
    }  # fmt: skip


def web() -> list[dict[str, Any]]:
    """A StatefulSet serving HTTP on a named port, one on loopback only, and their Services."""
    serve = ["python", "-m", "http.server", "--bind"]
    everywhere = "0.0.0.0"  # noqa: S104 - inside the pod's own network namespace
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"securityContext": {"fsGroup": 1000}, "containers": [
            {"name": "public", "image": TOOLS, "command": [*serve, everywhere, "8080"], "workingDir": "/data",
             "ports": [{"name": "http", "containerPort": 8080}],
             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "private", "image": TOOLS, "command": [*serve, "127.0.0.1", "8081"]},
        ]},
    }  # fmt: skip
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    statefulset = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "team"},
                   "spec": {"replicas": 2, "serviceName": "web-headless", "template": template,
                            "volumeClaimTemplates": [claim]}}  # fmt: skip
    ports = [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "private", "port": 81, "targetPort": 8081}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "team"},
               "spec": {"selector": {"app": "web"}, "ports": ports}}  # fmt: skip
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-headless", "namespace": "team"},
                "spec": {"clusterIP": "None", "selector": {"app": "web"}}}  # fmt: skip
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "team"},
                 "spec": {"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [
                     {"name": "agent", "image": TOOLS, "command": ["sleep", "infinity"]}]}}}}  # fmt: skip
    deployment = {**daemonset, "kind": "Deployment", "metadata": {"name": "api", "namespace": "team"}}
    return [statefulset, service, headless, daemonset, deployment]


def held_pod() -> dict[str, Any]:
    """Two containers of the image whose venv the host keeps under /tmp."""
    sleep = ["python", "-c", "import time; time.sleep(1e6)"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held", "namespace": "team"},
            "spec": {"containers": [{"name": "one", "image": HELD, "command": sleep},
                                    {"name": "two", "image": HELD, "command": sleep}]}}  # fmt: skip


def held_venv(parent: pathlib.Path) -> pathlib.Path:
    """A venv in a folder with spaces, with a script as pip writes one there (its #! cannot hold a space)."""
    venv = parent / "a clone with spaces" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "share").mkdir()
    (venv / "share" / "held.txt").write_text("from the image")
    look = venv / "bin" / "look"
    look.write_text(f"#!/bin/sh\n'''exec' \"{venv}/bin/python\" \"$0\" \"$@\"\n' '''\n{LOOK}")
    look.chmod(0o755)
    return venv


@pytest.fixture(scope="module")
def held() -> Iterator[pathlib.Path]:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # under /tmp, whatever TMPDIR says
        yield held_venv(pathlib.Path(tmp))


@pytest.fixture(scope="module")
def runner(tmp_path_factory, held) -> Iterator[PodRunner]:
    need(os.geteuid() == 0, "root (the pod runner makes network and mount namespaces)")
    need(shutil.which("ip") is not None, "iproute2's ip (the pod runner's network)")
    images = {repository(TOOLS): venv_image(pathlib.Path(sys.executable).parent, user=(1000, 1000)),
              repository(HELD): venv_image(held / "bin", user=(1000, 1000))}  # fmt: skip
    with PodRunner(tmp_path_factory.mktemp("cluster"), images, [SECRET, CONFIGMAP]) as runner:
        runner.start([probe_pod(), *web(), held_pod()])
        yield runner


def sh(runner: PodRunner, script: str, pod: str = "probe", container: str = "main") -> str:
    proc = runner.exec("team", pod, container, ["sh", "-c", script])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_pods_of_each_workload(runner):
    names = sorted(p.name for p in runner.pods)
    assert names == ["agent-node-1", "agent-node-2", "api-0", "held", "probe", "web-0", "web-1"]
    assert runner.exited() == []


def test_args_are_expanded_never_through_a_shell(runner):
    main = runner.pod("team", "probe").containers["main"]
    argv = pathlib.Path(f"/proc/{main.popen.pid}/cmdline").read_bytes().split(b"\0")[:-1]
    assert [a.decode() for a in argv[-4:]] == ["x-y", "$(B)", "$(NOPE)", "z"]


def test_env_as_kubernetes_resolves_it(runner):
    env = dict(line.split("=", 1) for line in sh(runner, "env").splitlines())
    pod = runner.pod("team", "probe")
    assert {k: env[k] for k in ("A", "B", "C", "LATER", "POD", "NS", "IP", "NODE", "APP", "TOKEN", "GREETING")} == {
        "A": "x",
        "B": "x-y",
        "C": "$(A) $(LATER)",  # LATER comes after C: not yet defined for it
        "LATER": "z",
        "POD": "probe",
        "NS": "team",
        "IP": pod.ip,
        "NODE": pod.node,
        "APP": "probe",
        "TOKEN": "t0ken",
        "GREETING": "hello",
    }
    assert (env["S_token"], env["HOSTNAME"], env["PWD"]) == ("t0ken", "probe", "/usr/local/probe")


def test_user_groups_and_volume_ownership(runner):
    assert sh(runner, "id -u; id -g; id -G").split("\n") == ["1234", "2345", "2345 3456 4567"]
    # A Secret is the group's to read (defaultMode 0400 + fsGroup), an emptyDir to write.
    assert sh(runner, "stat -c '%a %g' /etc/creds/sub/token /shared") == "440 3456\n2777 3456"
    assert sh(runner, "cat /etc/creds/sub/token; echo; ls /etc/creds") == "t0ken\nsub"


def test_mounts_init_containers_and_sidecars_share(runner):
    assert sh(runner, "cat /shared/init /shared/sidecar /etc/flower/flower.conf") == "init\nsidecar\nrounds = 3"
    assert (
        sh(runner, "cat /both/token; echo; cat /both/conf/greeting; echo; stat -c %a /both/token")
        == "t0ken\nhello\n444"
    )
    # No API server here: a token nothing accepts, an empty CA, and no address to dial.
    assert sh(runner, "cat /both/sa/token; echo; wc -c < /both/sa/ca.crt") == f"{NO_API_TOKEN}\n0"
    assert sh(runner, "echo ${KUBERNETES_SERVICE_HOST:-none}") == "none"
    sh(runner, "echo memo > /memory/note", container="main")
    assert sh(runner, "cat /memory/note", container="sidecar") == "memo"
    assert sh(runner, "grep ' /memory ' /proc/mounts | cut -d' ' -f3") == "tmpfs"


def test_mounted_objects_are_synced_as_the_kubelet_does(runner):
    later = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later", "namespace": "team"},
             "data": {"note": "one"}}  # fmt: skip
    look = "cat /both/note 2>/dev/null && echo || echo absent; cat /both/token"
    assert sh(runner, look) == "absent\nt0ken", "an optional source that does not exist yet: no file"
    runner.update(later)
    assert sh(runner, look) == "one\nt0ken"
    runner.update({**later, "data": {}})
    assert sh(runner, look) == "absent\nt0ken", "a key taken out of the object: its file goes"
    runner.update(later)
    runner.remove("ConfigMap", "team", "later")
    assert sh(runner, look) == "absent\nt0ken", "the object deleted: its files go, the other sources' stay"


def test_root_is_read_only_and_the_host_untouched(runner):
    proc = runner.exec("team", "probe", "main", ["sh", "-c", "touch /new"])
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stderr
    sh(runner, "touch /tmp/ok")  # an emptyDir there
    assert not pathlib.Path("/etc/flower").exists()
    assert not pathlib.Path("/usr/local/probe").exists()
    assert sh(runner, "hostname") == "probe"


def test_services_reach_pods_and_loopback_stays_private(runner):
    fetch = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).status)"
    ok = runner.exec("team", "probe", "main", ["python", "-c", fetch, "http://web.team.svc.cluster.local/"])
    assert (ok.returncode, ok.stdout.strip()) == (0, "200"), ok.stderr
    private = runner.exec("team", "probe", "main", ["python", "-c", fetch, "http://web:81/"])
    assert private.returncode != 0  # bound to 127.0.0.1 in its own pod
    headless = sh(runner, "getent hosts web-headless.team.svc web-0.web-headless.team.svc.cluster.local")
    web0 = runner.pod("team", "web-0")
    assert f"{web0.ip}  " in headless
    own = sh(runner, "getent hosts web-0", pod="web-0", container="private")  # its FQDN, as the kubelet writes it
    assert own.split() == [web0.ip, "web-0.web-headless.team.svc.cluster.local", "web-0"]


def test_port_forward_reaches_what_only_the_pods_loopback_serves(runner):
    # web-0's "private" container binds 127.0.0.1:8081: no Service reaches it (above), a port-forward does.
    local = runner.port_forward("team", "web-0", 8081)
    with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10) as response:
        assert response.status == 200
    closed = runner.port_forward("team", "web-0", 8082)  # nothing listens there: the client sees the refusal
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{closed}/", timeout=10)


def test_claims_are_directories_per_pod(runner):
    sh(runner, "echo zero > /data/file", pod="web-0", container="public")
    assert sh(runner, "ls /data", pod="web-1", container="public") == ""
    assert (runner.workdir / "claims" / "team" / "data-web-0" / "file").read_text() == "zero\n"


def test_a_rolled_pod_runs_the_new_template_on_the_claims_the_old_one_left(runner):
    sh(runner, "echo kept > /data/rolled; echo old > /tmp/scratch", pod="web-1", container="public")
    before = runner.pod("team", "web-1").uid
    template = web()[0]["spec"]["template"]
    template["metadata"]["labels"]["revision"] = "2"
    template["spec"]["containers"][0]["env"] = [{"name": "REVISION", "value": "2"}]
    runner.roll("team", "web-1", template)
    rolled = runner.pod("team", "web-1")
    assert (rolled.uid != before, rolled.labels["revision"]) == (True, "2")
    # Its claim as the old pod left it, the new container's env, a /tmp of its own (the old one's is gone).
    assert sh(runner, "cat /data/rolled; echo $REVISION; ls /tmp", pod="web-1", container="public") == "kept\n2"
    assert [p.name for p in runner.pods].count("web-1") == 1
    # The Service sends connections to it again: its listing of /data, among the replicas' in turn.
    listing = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"
    seen = [runner.exec("team", "probe", "main", ["python", "-c", listing, "http://web.team.svc/"]) for _ in range(4)]
    assert any("rolled" in proc.stdout for proc in seen), [(p.returncode, p.stdout, p.stderr) for p in seen]


def test_an_image_kept_under_tmp_runs_and_every_container_has_its_own_empty_tmp(runner, held):
    # A clone under /tmp keeps its venvs there; the image still holds them,
    # and each container's /tmp is its own, empty, hiding the host's.
    look = ["look", str(held)]
    first = runner.exec("team", "held", "one", look)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"prefix": "/opt/venv", "data": "from the image", "tmp": [], "host": False}
    again = runner.exec("team", "held", "one", look)
    assert json.loads(again.stdout)["tmp"] == ["mine"], again.stderr  # the container's own /tmp keeps its file
    other = runner.exec("team", "held", "two", look)
    assert json.loads(other.stdout)["tmp"] == [], other.stderr  # the pod's other container does not see it


def test_a_second_runner_takes_a_lane_of_its_own_and_leaves_the_first_alone(runner, tmp_path):
    """Two runners at once (two xdist workers, two checkouts): names and addresses never meet."""
    fetch = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).status)"
    url = "http://web.team.svc.cluster.local/"
    with PodRunner(tmp_path / "second", runner.images, [SECRET, CONFIGMAP]) as second:
        second.start([probe_pod(), *web()])
        assert second.lane != runner.lane
        mine, theirs = second.pod("team", "web-0"), runner.pod("team", "web-0")
        assert (mine.netns, mine.veth, mine.ip) != (theirs.netns, theirs.veth, theirs.ip)
        for each in (runner, second):  # each probe reaches its own runner's Service
            ok = each.exec("team", "probe", "main", ["python", "-c", fetch, url])
            assert (ok.returncode, ok.stdout.strip()) == (0, "200"), ok.stderr
    # The second one's stop removed its lane only: the first runner's pods and Services still answer.
    assert theirs.running()
    ok = runner.exec("team", "probe", "main", ["python", "-c", fetch, url])
    assert (ok.returncode, ok.stdout.strip()) == (0, "200"), ok.stderr
