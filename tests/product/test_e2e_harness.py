"""The e2e harness's own resilience (tests/e2e/controlplane.py), without a control plane."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import pathlib
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import yaml

from support.peers import ROOT

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import controlplane  # after its folder is on the path

# The aggregated discovery a 1.30+ API server answers, cut to what the reads below name: the
# resources a group serves in each version, its preferred version first.
DISCOVERY = {
    "/api": [("", "v1", [("pods", "Pod", "Namespaced", ["po"]), ("nodes", "Node", "Cluster", ["no"])])],
    "/apis": [
        ("apps", "v1", [("statefulsets", "StatefulSet", "Namespaced", ["sts"])]),
        ("apiextensions.crossplane.io", "v2", [("compositeresourcedefinitions", "CompositeResourceDefinition",
                                                "Cluster", ["xrd"])]),
        ("apiextensions.crossplane.io", "v1", [("compositions", "Composition", "Cluster", ["comp"])]),
        ("kubernetes.crossplane.io", "v1alpha2", [("objects", "Object", "Cluster", [])]),
        ("kubernetes.m.crossplane.io", "v1alpha1", [("objects", "Object", "Namespaced", [])]),
    ],
}  # fmt: skip


def discovery(root: str) -> dict[str, object]:
    groups: dict[str, list[dict[str, object]]] = {}
    for group, version, resources in DISCOVERY[root]:
        groups.setdefault(group, []).append({"version": version, "resources": [
            {"resource": r, "responseKind": {"kind": k}, "scope": scope, "singularResource": k.lower(),
             "shortNames": short}
            for r, k, scope, short in resources
        ]})  # fmt: skip
    return {"items": [{"metadata": {"name": g}, "versions": v} for g, v in groups.items()]}


class FakeApiServer:
    """An HTTPS API server on 127.0.0.1 serving DISCOVERY and the objects put in `objects` by path.

    `hang` requests get no answer (the handler holds them until the client gives up) before it answers again.
    """

    def __init__(self, tmp_path: pathlib.Path) -> None:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
        self.objects: dict[str, object] = {}
        self.paths: list[str] = []
        self.hang = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                if server.hang:
                    # Held until the client gives up and closes: it sees a timeout however busy the
                    # machine (a handler that closed first would be a dropped connection instead).
                    server.hang -= 1
                    self.connection.settimeout(30)
                    with contextlib.suppress(OSError):
                        self.connection.recv(1)
                    return
                url = urllib.parse.urlsplit(self.path)
                path = url.path
                answer = discovery(path) if path in DISCOVERY else server.objects.get(path)
                query = urllib.parse.parse_qs(url.query)
                if isinstance(answer, dict) and "items" in answer and "limit" in query:
                    # A page, as an API server gives one: the next page's token while items are left.
                    at, limit = int(query.get("continue", ["0"])[0]), int(query["limit"][0])
                    more = at + limit < len(answer["items"])
                    answer = {**answer, "items": answer["items"][at : at + limit],
                              "metadata": {"continue": str(at + limit) if more else ""}}  # fmt: skip
                body = json.dumps(answer or {"kind": "Status", "reason": "NotFound"}).encode()
                self.send_response(200 if answer else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        pem = base64.b64encode((tmp_path / "tls.crt").read_bytes()).decode()
        key = base64.b64encode((tmp_path / "tls.key").read_bytes()).decode()
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"https://127.0.0.1:{self.httpd.server_port}",
                                                      "certificate-authority-data": pem}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "users": [{"name": "fake", "user": {"client-certificate-data": pem, "client-key-data": key}}],
        }))  # fmt: skip

    def requested(self) -> list[str]:
        """The paths requested, without their queries."""
        return [urllib.parse.urlsplit(p).path for p in self.paths]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api(tmp_path, monkeypatch):
    monkeypatch.setattr(controlplane.ApiReader, "TIMEOUT", 1.0)  # a TLS handshake on a busy machine fits
    server = FakeApiServer(tmp_path)
    yield server
    server.close()


def test_reads_name_resources_as_kubectl_does(api):
    """Plural, singular, short name, a kind as a manifest spells it, `.group`; kubectl's kind on each item."""
    sts = {"metadata": {"name": "s", "namespace": "default", "managedFields": [{"manager": "kubectl"}]}}
    api.objects["/apis/apps/v1/statefulsets"] = {"apiVersion": "apps/v1", "kind": "StatefulSetList", "items": [sts]}
    api.objects["/apis/apps/v1/namespaces/default/statefulsets/s"] = {"apiVersion": "apps/v1", **sts}
    compositions = {"apiVersion": "apiextensions.crossplane.io/v1", "items": [{"metadata": {"name": "c"}}]}
    api.objects["/apis/apiextensions.crossplane.io/v1/compositions"] = compositions
    api.objects["/apis/kubernetes.m.crossplane.io/v1alpha1/namespaces/team/objects"] = {"items": []}
    cluster = controlplane.Cluster("hub", api.kubeconfig, "kubectl")
    listed = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s", "namespace": "default"}}]
    for name in ("statefulsets", "statefulset", "sts", "StatefulSet", "statefulsets.apps"):
        assert cluster.get(name) == listed, name
    # A namespaced object with no namespace named is read in the kubeconfig's (default).
    assert cluster.get("sts", "s") == listed[0]
    assert cluster.get("sts", "gone", "default") is None
    # A group's resources in a version other than its preferred one, and two kinds at once.
    assert [i["kind"] for i in cluster.get("compositions,statefulsets")] == ["Composition", "StatefulSet"]
    assert cluster.get("objects.kubernetes.m.crossplane.io", namespace="team") == []
    assert "/apis/kubernetes.m.crossplane.io/v1alpha1/namespaces/team/objects" in api.requested()
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cluster.get("widgets.example.com")
    assert 'does not have a resource type "widgets.example.com"' in refused.value.stderr
    # Discovery once for every read above, and once more for the unknown name (a CRD created since?).
    assert api.paths.count("/apis") == 2


def test_a_long_list_is_read_a_page_at_a_time(api):
    """As kubectl reads it: a hub's 20,000 Objects in one answer came back cut short."""
    items = [{"metadata": {"name": f"node-{i}"}} for i in range(2 * controlplane.LIST_CHUNK + 1)]
    api.objects["/api/v1/nodes"] = {"apiVersion": "v1", "items": items}
    cluster = controlplane.Cluster("hub", api.kubeconfig, "kubectl")
    assert [n["metadata"]["name"] for n in cluster.get("nodes")] == [i["metadata"]["name"] for i in items]
    assert api.requested().count("/api/v1/nodes") == 3


def test_a_read_that_hangs_is_asked_again(api):
    api.objects["/api/v1/nodes"] = {"apiVersion": "v1", "items": [{"metadata": {"name": "node-1"}}]}
    cluster = controlplane.Cluster("hub", api.kubeconfig, "kubectl")
    cluster.get("nodes")  # discovery done
    api.hang = controlplane.GET_ATTEMPTS - 1
    assert cluster.get("nodes") == [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}]
    assert api.requested().count("/api/v1/nodes") == 1 + controlplane.GET_ATTEMPTS


def test_a_read_that_keeps_hanging_fails(api):
    cluster = controlplane.Cluster("hub", api.kubeconfig, "kubectl")
    api.hang = controlplane.GET_ATTEMPTS
    with pytest.raises(subprocess.TimeoutExpired):
        cluster.get("nodes")


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


def test_a_component_that_exits_while_waiting_for_its_api_server_is_found_dead(monkeypatch, tmp_path):
    """A controller manager gives up on an unhealthy API server seconds after it starts, alive until then: the look
    for dead components waits until they have been up that long. An exited, unreaped process (a zombie) and a pid
    file naming no process are dead too; a running one is not."""
    monkeypatch.setattr(controlplane, "COMPONENT_GIVES_UP_SECONDS", 2)
    pids = tmp_path / "kwok" / "clusters" / "spoke" / "pids"
    pids.mkdir(parents=True)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    giving_up = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])  # reaped when it exits
    zombie = subprocess.Popen([sys.executable, "-c", ""])  # never waited for until the end: a zombie
    try:
        for name, proc in [("running", running), ("giving-up", giving_up), ("zombie", zombie)]:
            (pids / f"{name}.pid").write_text(str(proc.pid))
        (pids / "gone.pid").write_text("999999999")
        threading.Thread(target=giving_up.wait, daemon=True).start()
        started = time.time()
        dead = plane_in(tmp_path)._dead_components("spoke", started)
        assert time.time() - started >= 2, "looked before the components had been up long enough"
        assert dead == ["giving-up", "gone", "zombie"]
    finally:
        running.kill()
        for proc in (running, giving_up, zombie):
            proc.wait()


def _collected(minor: str) -> set[str]:
    """The e2e scenarios pytest would run on one minor's control plane (E2E_MINOR), collected for real."""
    env = {**os.environ, "E2E_MINOR": minor}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/e2e"]
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    return {line.split("::")[1].split("[")[0] for line in out.splitlines() if "::" in line}


def test_scenarios_of_crossplane_alone_run_on_the_newest_minor_only_and_faults_on_the_oldest():
    minors = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools").glob("kube-1.*")),
                    key=lambda m: int(m.split(".")[1]))  # fmt: skip
    newest, oldest = _collected(minors[-1]), _collected(minors[0])
    source = (ROOT / "tests" / "e2e" / "test_e2e.py").read_text()
    marked = {name for name in newest if f"@NEWEST_MINOR\ndef {name}(" in source}
    assert marked, "no scenario is marked newest_minor: this tests nothing"
    # Every scenario of a module marked oldest_minor by its pytestmark (the faults, the scale benchmark's run).
    modules = [p.read_text() for p in (ROOT / "tests" / "e2e").glob("test_*.py")]
    oldest_only = [m for m in modules if "\npytestmark = pytest.mark.oldest_minor\n" in m]
    assert len(oldest_only) >= 2, "test_faults.py and test_scale.py run on the oldest minor alone"
    faults = {name for name in oldest if any(f"def {name}(" in m for m in oldest_only)}
    assert faults, "no fault scenario is collected on the oldest minor: this tests nothing"
    assert oldest - faults == newest - marked, sorted((oldest - faults) ^ (newest - marked))
    assert not faults & newest, "a fault scenario runs on the newest minor too"


def test_each_plane_runs_its_provider_release_and_never_another(tmp_path):
    """The newest minor's plane runs the newest provider-kubernetes release, the others the oldest; a
    missing program is an error, never the other release's (Tools.__getattr__ would find the oldest)."""
    planes = controlplane.pins.kube_planes()
    releases = [p.release for p in controlplane.pins.providers()]
    tools = {m: controlplane.Tools(tmp_path, m, "crank") for m in planes}
    assert tools[planes[-1]].provider.release == releases[-1]
    assert {tools[m].provider.release for m in planes[:-1]} == {releases[0]}
    newest = tools[planes[-1]]
    (tmp_path / "provider-kubernetes").touch()  # the oldest release's program alone
    with pytest.raises(FileNotFoundError, match=newest.provider.binary):
        _ = newest.provider_kubernetes
    (tmp_path / newest.provider.binary).touch()
    assert newest.provider_kubernetes == str(tmp_path / newest.provider.binary)
    assert newest.provider_crds == tmp_path / newest.provider.crds


def test_the_mirror_also_offers_the_first_release_the_range_leaves_out():
    assert controlplane.excluded_release(">=v1.0.0 <v1.3.0") == "v1.3.0"
    with pytest.raises(AssertionError, match="upper bound"):
        controlplane.excluded_release(">=v1.0.0")


@pytest.mark.parametrize(
    ("pods", "cpu", "memory", "reason"),
    [
        (250, "64", "512Gi", "the e2e's nodes keep the capacity they always had"),
        (251, "128", "1024Gi", "a pod past 250 brings another share"),
        (3340, "896", "7168Gi", "a third of 10,000 SuperNodes (and their 115m of CPU each) fit on three nodes"),
    ],
)
def test_a_fake_node_has_cpu_and_memory_for_the_pods_it_holds(pods, cpu, memory, reason):
    capacity = controlplane.node_capacity(pods)
    assert (capacity["pods"], capacity["cpu"], capacity["memory"]) == (str(pods), cpu, memory), reason
    # A spoke's three nodes hold this many SuperNodes, each asking 115m of CPU (its containers').
    assert 3 * int(capacity["cpu"]) * 1000 >= pods * 115, reason
