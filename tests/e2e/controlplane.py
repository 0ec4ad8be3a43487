"""A real Crossplane control plane on this machine, without a container runtime.

Each part is a real process built by hack/e2e/build-tools.sh: per cluster etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (which stands
in for kubelets), started by kwokctl; Crossplane core and provider-kubernetes;
a local OCI registry (crane); cert-manager's controllers in the hub, with a
CA ClusterIssuer `flower-ca` as the examples expect. The packages are installed as users install
them, the registry standing in for the ones they name (ImageConfigs rewrite them): the README's
`Function`, then the Configuration, whose dependencies Crossplane's package manager resolves,
installing provider-kubernetes' package (its CRDs; its controller is the host process above).
The package manager pulls the function, creates its Deployment, Service and TLS Secret. KWOK
runs no container, so the harness plays the kubelet for that one pod: it runs
the pod's container from the image in the registry (its root filesystem,
entrypoint and user, under chroot) with the pod's environment and the Secret's
certificates, in a network namespace the Service name resolves to for
Crossplane alone (provider-kubernetes holds port 9443 on the host).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import http.client
import itertools
import json
import math
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import yaml

from function.__version__ import __version__
from function.api import policy
from support import served
from support.peers import hack_module

pins = hack_module("pins")

CROSSPLANE_NS = "crossplane-system"
CERT_MANAGER_NS = "cert-manager"
# The ClusterIssuer the cert-manager examples name, and the Secret of its CA.
CA_ISSUER = "flower-ca"
FUNCTION = "function-flower"
# The tag both packages are pushed with: the function's release.
RELEASE = f"v{__version__}"
# Fake nodes: enough room for every example, GPUs of both vendors included.
NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": "8", "amd.com/gpu": "8"}
# ProviderConfigs of three spoke clusters for cluster selectors: site-a is the spoke.
SITES = ("site-a", "site-b", "site-c")
# Machine-wide, like the ports kwokctl picks from: every checkout's control planes take turns creating clusters.
CLUSTER_LOCK = pathlib.Path(tempfile.gettempdir()) / "flower-e2e-kwokctl.lock"
# A controller manager gives up some 10 s after it starts if its API server's /healthz is not ok by then
# (_restart_if_a_component_died). A look at once after /readyz found one still waiting, alive, which exited
# 14 s after its start (fresh-clone CI, 1.35: two spokes without controllers, four scenarios failed): its
# components are looked at once they have been up this long.
COMPONENT_GIVES_UP_SECONDS = 30


def _running(pid: str) -> bool:
    """Whether a process runs: it exists and is no zombie (its state, after the command's closing parenthesis)."""
    stat = pathlib.Path(f"/proc/{pid}/stat")
    return pid.isdigit() and stat.exists() and stat.read_text().rpartition(")")[2].split()[0] != "Z"


class WaitTimeoutError(AssertionError):
    pass


# The control plane's Go processes (API servers, etcd, Crossplane, the provider,
# cert-manager; kwokctl passes its environment on) collect garbage at a quarter of
# the default rate: the e2e is CPU-bound on two cores, and a profile of the hub's
# API server, its busiest process, showed 14% of its CPU in the collector. The
# heaps stay in the hundreds of megabytes; the machine has gigabytes to spare.
GO_ENV = {"GOGC": "400"}

# provider-kubernetes re-reads an Object that is not Ready every 30 s and a Ready one every --poll
# (it watches an Object's target only when the Object asks, spec.watch, which the function's
# Objects do not: an alpha field, and one informer per kind and cluster). At 15 s it wrote each of the
# ~250 Objects' status every 15 s (1,000 no-op updates a minute, which cost the hub's API
# server half a core: 64% of its CPU profile in GuaranteedUpdate). Its default is 10 minutes;
# one minute keeps two polls of every Object inside the idle test's two minutes.
PROVIDER_POLL = "1m"

# How often a wait asks again. Reads are cheap now (ApiReader), but each one still costs the
# API server a request; when each was a kubectl process, polling every second took more CPU
# than the clusters.
POLL_SECONDS = 2


# A wait's timeout says how long its step takes on a quiet machine; `make test` runs
# both control planes, the unit suites and real Flower processes on two cores, and
# there the same step has taken twice that (measured: every example Ready in 159 s
# alone, 351 s beside the rest). A wait that passes returns at once all the same.
SLACK = 2
LIST_CHUNK = 500  # items per page of a list (kubectl's --chunk-size)
GET_ATTEMPTS = 3  # Cluster.get: a read that hangs is asked again, up to this many times


def wait_for(what: str, check: Callable[[], Any], timeout: float = 180, interval: float = POLL_SECONDS) -> Any:
    """Poll until check() returns something truthy, for SLACK times timeout; fail naming what never happened."""
    timeout *= SLACK
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except subprocess.CalledProcessError as e:
            last = e.stderr or e
        except subprocess.TimeoutExpired as e:  # a kubectl that hung on a loaded API server: ask again
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    msg = f"timed out after {timeout:.0f}s waiting for {what}; last: {str(last)[:2000]}"
    raise WaitTimeoutError(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: pathlib.Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=20)

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class ApiReader:
    """Reads one cluster's objects as `kubectl get -o json` would, over kept-alive HTTPS connections.

    Resource names are kubectl's (plural, singular, short name or kind, with or without
    `.group`), resolved by the API server's aggregated discovery, fetched again when a name is
    unknown (a CRD created since). Failures raise what a failed kubectl raises, so waits treat
    them alike: CalledProcessError for an unknown resource or an error answer, TimeoutExpired
    for a read that hung GET_ATTEMPTS times (one connection per thread, reopened after a failure).
    """

    DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    TIMEOUT = 60

    def __init__(self, kubeconfig: pathlib.Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        server = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = server.hostname or "", server.port or 443
        self.namespace = context.get("namespace") or "default"
        self.tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        # ssl reads a client certificate from files only: kept beside the kubeconfig, as private as it.
        cert, key = kubeconfig.with_suffix(".client.crt"), kubeconfig.with_suffix(".client.key")
        for path, data in ((cert, user["client-certificate-data"]), (key, user["client-key-data"])):
            path.write_bytes(base64.b64decode(data))
            path.chmod(0o600)
        self.tls.load_cert_chain(cert, key)
        self.local = threading.local()
        self.resources: dict[str, list[tuple[str, str, str, bool]]] = {}  # name -> (group, path, kind, namespaced)

    def _connection(self) -> http.client.HTTPSConnection:
        if getattr(self.local, "connection", None) is None:
            self.local.connection = self.connect(self.TIMEOUT)
        return self.local.connection

    def connect(self, timeout: float) -> http.client.HTTPSConnection:
        """A new connection to the API server, as this kubeconfig's user."""
        return http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=timeout)

    def request(
        self, path: str, accept: str = "application/json", *, method: str = "GET", body: Any = None
    ) -> tuple[int, bytes]:
        """GET path, or send it body (POST: an object, PATCH: a JSON merge patch): the status and body.

        A request that hangs or drops is sent again on a new connection: a merge patch sent twice changes
        what it changed once, and an object posted twice is refused the second time (409).
        """
        headers = {"Accept": accept}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
            data = json.dumps(body).encode()
        for attempt in itertools.count(1):
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as e:
                connection.close()
                self.local.connection = None
                if attempt < GET_ATTEMPTS:
                    continue
                if isinstance(e, TimeoutError):
                    raise subprocess.TimeoutExpired([method, path], self.TIMEOUT) from e
                raise subprocess.CalledProcessError(1, [method, path], "", str(e)) from e
        return 0, b""  # not reached: itertools.count never ends

    def _discover(self) -> None:
        resources: dict[str, list[tuple[str, str, str, bool]]] = {}
        for root in ("/api", "/apis"):
            status, body = self.request(root, accept=self.DISCOVERY)
            if status != 200:
                raise subprocess.CalledProcessError(1, ["GET", root], "", body.decode(errors="replace"))
            for group in json.loads(body)["items"]:
                name = group["metadata"].get("name", "")
                for version in group["versions"]:  # the preferred first: kubectl takes its resources first
                    prefix = f"/apis/{name}/{version['version']}" if name else f"/api/{version['version']}"
                    for r in version.get("resources") or []:
                        kind = (r.get("responseKind") or {}).get("kind", "")
                        entry = (name, f"{prefix}/{r['resource']}", kind, r.get("scope") == "Namespaced")
                        aliases = {
                            r["resource"],
                            r.get("singularResource", ""),
                            kind.lower(),
                            *(r.get("shortNames") or []),
                        }
                        for alias in aliases - {""}:
                            resources.setdefault(alias, []).append(entry)
        self.resources = resources

    def _resolve(self, resource: str) -> tuple[str, str, bool]:
        """The collection path, kind and scope of a kubectl resource name."""
        for fresh in (False, True):
            if fresh or not self.resources:
                self._discover()
            name, _, group = resource.partition(".")
            name = name.lower()  # a kind as a manifest spells it names its resource too
            matches = [m for m in self.resources.get(name, []) if not group or m[0] == group]
            if not group:  # kubectl prefers the core group's, then the first it discovered (stable sort)
                matches.sort(key=lambda m: m[0] != "")
            if matches:
                return matches[0][1:]
        msg = f'error: the server does not have a resource type "{resource}"'
        raise subprocess.CalledProcessError(1, ["get", resource], "", msg)

    def get(self, resource: str, name: str = "", namespace: str = "", selector: str = "") -> Any:
        """As Cluster.get: one object, the list's items (every namespace when none is named), or None.

        Several resources, comma-separated as kubectl takes them, list one after another.
        """
        if "," in resource and not name:
            return [item for r in resource.split(",") for item in self.get(r, namespace=namespace, selector=selector)]
        collection, kind, namespaced = self._resolve(resource)
        if namespaced and (namespace or name):
            group_version, _, plural = collection.rpartition("/")
            collection = f"{group_version}/namespaces/{namespace or self.namespace}/{plural}"
        if name:
            answer = self._json(f"{collection}/{name}")
            if answer is None:
                return None
            items = [answer]
        else:
            answer, items = self.pages(collection, selector)
        for item in items:
            item.setdefault("apiVersion", answer.get("apiVersion"))  # a list's items leave these out;
            item.setdefault("kind", kind)  # kubectl fills them in
            item.get("metadata", {}).pop("managedFields", None)  # and leaves this out
        return answer if name else items

    def _json(self, path: str) -> Any:
        """What the API server answers at path, decoded; None when it is not found."""
        status, body = self.request(path)
        if status == 404:
            return None
        if status != 200:
            raise subprocess.CalledProcessError(1, ["GET", path], "", body.decode(errors="replace"))
        return json.loads(body)

    def pages(self, collection: str, selector: str = "") -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A collection's first page and every page's items, LIST_CHUNK at a time, as kubectl reads them.

        In one piece, the 20,000 Objects of a scale run's hub came back cut short.
        """
        query: dict[str, str] = {"limit": str(LIST_CHUNK), **({"labelSelector": selector} if selector else {})}
        first: dict[str, Any] | None = None
        items: list[dict[str, Any]] = []
        while True:
            page = self._json(f"{collection}?{urllib.parse.urlencode(query)}")
            if page is None:  # a collection is never missing; a 404 here is an error like any other
                raise subprocess.CalledProcessError(1, ["GET", collection], "", "NotFound")
            first = first or page
            items += page["items"]
            query["continue"] = (page.get("metadata") or {}).get("continue") or ""
            if not query["continue"]:
                return first, items


class ClaimBinder:
    """Binds a spoke's new volume claims as a cluster's provisioner and volume controller would: a volume made
    for each claim and bound to it from both sides, several claims at once, until stopped.

    For a scale benchmark's spokes, each of which stands in for hundreds of clusters, each with a volume
    controller of its own. One spoke's controller binds its claims one at a time, four writes waited for in
    turn: at a third of 10,000 SuperNodes it bound two claims a second, while its scheduler tried every pod
    still waiting for its claim again at each volume event. The controller still watches: what it finds
    bound, it leaves as it is.
    """

    WORKERS = 8  # claims bound at once
    WATCH_SECONDS = 60  # each watch request's length; the binder lists and watches again after it

    def __init__(self, reader: ApiReader, stopping: threading.Event, storage_class: str | None = None) -> None:
        self.reader = reader
        self.stopping = stopping
        self.storage_class = storage_class  # only claims of this class; None: every claim
        self.seen: set[str] = set()  # the claims handed to a worker, by uid
        self.bound = 0
        self.failures: list[str] = []  # the first few, for a run that stalls

    def run(self) -> None:
        """List and watch the claims, and bind each one without a volume, until stopping is set."""
        with futures.ThreadPoolExecutor(self.WORKERS, thread_name_prefix="claims") as pool:
            while not self.stopping.is_set():
                try:
                    version = self._list(pool)
                    self._watch(pool, version)
                except Exception as e:  # a watch cut short, an API server busy: look again
                    self._failed(f"watch: {e}")
                    self.stopping.wait(1)

    def _list(self, pool: futures.ThreadPoolExecutor) -> str:
        first, claims = self.reader.pages("/api/v1/persistentvolumeclaims")
        for claim in claims:
            self._offer(pool, claim)
        return first["metadata"]["resourceVersion"]  # a paged list's, the same on every page

    def _watch(self, pool: futures.ThreadPoolExecutor, version: str) -> None:
        query = {"watch": "1", "resourceVersion": version, "timeoutSeconds": str(self.WATCH_SECONDS)}
        connection = self.reader.connect(self.WATCH_SECONDS + 30)
        try:
            connection.request("GET", f"/api/v1/persistentvolumeclaims?{urllib.parse.urlencode(query)}")
            response = connection.getresponse()
            while not self.stopping.is_set() and (line := response.readline()):
                event = json.loads(line)
                if event["type"] == "ERROR":  # the version is gone: list again
                    return
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._offer(pool, event["object"])
        finally:
            connection.close()

    def _offer(self, pool: futures.ThreadPoolExecutor, claim: dict[str, Any]) -> None:
        uid = claim["metadata"]["uid"]
        if claim["spec"].get("volumeName") or uid in self.seen:
            return
        if self.storage_class is not None and claim["spec"].get("storageClassName") != self.storage_class:
            return
        self.seen.add(uid)
        pool.submit(self._bind, claim)

    def _bind(self, claim: dict[str, Any]) -> None:
        meta, spec = claim["metadata"], claim["spec"]
        name = f"pv-{meta['uid']}"
        claim_path = f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}"
        volume = {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec["accessModes"], "storageClassName": spec.get("storageClassName") or "",
                "persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": f"/var/lib/e2e/{name}"},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            },
        }  # fmt: skip
        steps = [
            ("POST", "/api/v1/persistentvolumes", volume),
            ("PATCH", f"/api/v1/persistentvolumes/{name}/status", {"status": {"phase": "Bound"}}),
            # What the volume controller writes once it bound a claim: it finds nothing left to do.
            ("PATCH", claim_path, {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                                   "spec": {"volumeName": name}}),
            ("PATCH", f"{claim_path}/status", {"status": {"phase": "Bound", "accessModes": spec["accessModes"],
                                                          "capacity": volume["spec"]["capacity"]}}),
        ]  # fmt: skip
        try:
            for method, path, body in steps:
                status, answer = self.reader.request(path, method=method, body=body)
                if status not in (200, 201, 409):  # 409: made by an earlier try
                    msg = f"{method} {path}: {status} {answer[:200]!r}"
                    raise RuntimeError(msg)
            self.bound += 1
        except Exception as e:
            self._failed(f"{meta['name']}: {e}")
            self.seen.discard(meta["uid"])  # offered again at its next event

    def _failed(self, what: str) -> None:
        if len(self.failures) < 10:
            self.failures.append(what)


class KubectlError(subprocess.CalledProcessError):
    """A kubectl that failed, with what it said: a failure's report names the cause, not only the command."""

    def __str__(self) -> str:
        """The command and its exit status, then kubectl's error output."""
        return f"{super().__str__()}\n{self.stderr}"


@dataclass
class Cluster:
    name: str
    kubeconfig: pathlib.Path
    kubectl_bin: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> str:
        proc = subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args],
            check=False,  # the caller decides; the error keeps kubectl's stderr
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc.stdout

    def shell(self, line: str, cwd: pathlib.Path, path: Iterable[pathlib.Path] = (), timeout: float = 600) -> str:
        """A line of a user's shell as it is written (bash, -e and pipefail), with this cluster's credentials
        and kubectl first on PATH, then path's folders; what it printed. KubectlError if it fails."""
        tools = self.kubeconfig.parent / f"{self.kubeconfig.stem}-bin"
        tools.mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (tools / "kubectl").symlink_to(self.kubectl_bin)
        search = os.pathsep.join([str(tools), *map(str, path), os.environ["PATH"]])
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": search}
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise KubectlError(proc.returncode, line, proc.stdout, proc.stderr)
        return proc.stdout

    def apply(self, *docs: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        text = yaml.safe_dump_all(list(docs))
        proc = subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", "apply", "-f", "-"],
            check=False,  # the caller decides; the error keeps kubectl's stderr
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    @functools.cached_property
    def reader(self) -> ApiReader:
        return ApiReader(self.kubeconfig)

    def get(self, resource: str, name: str = "", namespace: str = "", selector: str = "") -> Any:
        """One object (with a name) or the list of items, as `kubectl get -o json` prints them; None when not found.

        Read over the API directly (ApiReader), not by a kubectl process: the e2e's
        waits poll these, and a kubectl process per read was a sixth of a control plane's CPU.
        """
        return self.reader.get(resource, name, namespace, selector)

    def kubeconfig_text(self) -> str:
        return self.kubeconfig.read_text()

    def wait_established(self, crds: Iterable[str]) -> None:
        """Each named CRD Established, not only stored: until then its kind is unknown to `kubectl apply`."""
        for name in crds:
            wait_for(f"CRD {name} Established",
                     lambda n=name: condition(self.get("crd", n), "Established").get("status") == "True")  # fmt: skip


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


@dataclass(frozen=True)
class NetworkNamespace:
    """A network namespace with a veth to the host: the /30 number `block` of 10.213.`octet`.0/24,
    the host's end at its first address, the namespace's at its second (only this machine routes them)."""

    name: str
    veth: str  # the pair is <veth>-h (host) and <veth>-i (inside); at most 15 characters each
    octet: int
    block: int

    @property
    def host_ip(self) -> str:
        return f"10.213.{self.octet}.{4 * self.block + 1}"

    @property
    def inner_ip(self) -> str:
        return f"10.213.{self.octet}.{4 * self.block + 2}"

    def up(self) -> None:
        self.down()
        host, inner = f"{self.veth}-h", f"{self.veth}-i"
        inside = ["ip", "netns", "exec", self.name]
        for cmd in [
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", host, "type", "veth", "peer", "name", inner],
            ["ip", "link", "set", inner, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_ip}/30", "dev", host],
            ["ip", "link", "set", host, "up"],
            [*inside, "ip", "addr", "add", f"{self.inner_ip}/30", "dev", inner],
            [*inside, "ip", "link", "set", inner, "up"],
            [*inside, "ip", "link", "set", "lo", "up"],
        ]:
            subprocess.run(cmd, check=True, capture_output=True)

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", f"{self.veth}-h"], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)


@dataclass
class Tools:
    """The binaries hack/e2e/build-tools.sh leaves in one folder."""

    root: pathlib.Path
    minor: str
    crank: str  # the Crossplane CLI, built with the unit suite's tools

    def kube(self, component: str) -> str:
        return str(self.root / f"kube-{self.minor}" / component)

    @functools.cached_property
    def provider(self) -> Any:
        """The provider-kubernetes release this minor's plane runs (hack/pins.py): the newest the
        Configuration accepts on the newest minor, the oldest on every other."""
        return pins.provider_for(self.minor)

    @property
    def provider_kubernetes(self) -> str:
        """That release's program. (Not AttributeError when it is missing: Python would then ask
        __getattr__, which would answer with the oldest release's.)"""
        path = self.root / self.provider.binary
        if not path.exists():
            msg = f"{path} is missing: run hack/e2e/build-tools.sh"
            raise FileNotFoundError(msg)
        return str(path)

    @property
    def provider_crds(self) -> pathlib.Path:
        """That release's CRDs, from its module."""
        return self.root / self.provider.crds

    def __getattr__(self, name: str) -> str:
        path = self.root / name.replace("_", "-")
        if not path.exists():
            msg = f"{path} is missing: run hack/e2e/build-tools.sh"
            raise AttributeError(msg)
        return str(path)

    @functools.cached_property
    def kube_version(self) -> str:
        """The API server's release, asked once: kwokctl wants it at every call."""
        out = subprocess.run([self.kube("kube-apiserver"), "--version"], capture_output=True, text=True, check=True)
        return out.stdout.split()[-1]  # "Kubernetes v1.35.4"


EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PLATFORM_POLICY = EXAMPLES / "policy" / "gpu-platform.yaml"
# As a platform team installs it: the provider's ServiceAccount, its rights, the ProviderConfig `default`.
PROVIDER_INSTALL = EXAMPLES / "install" / "provider-kubernetes.yaml"
# The function's runtime, with a CPU limit: the Function names it as its manifest's comment says.
FUNCTION_RUNTIME = EXAMPLES / "install" / "deploymentruntimeconfig.yaml"
# The CPUs the e2e gives the function in that runtime, in place of the example's two: on the CI machine's two
# cores, beside a second control plane and real Flower, a function that answered twice as fast made every
# reconcile of the suite come sooner (a fresh-clone run took 10 more CPU minutes on the newest plane, and 15 in
# all, with both planes' functions at two workers).
FUNCTION_CPUS = "1"
# The Configuration's own metadata: the function and provider it depends on, which the package manager resolves.
CONFIGURATION_META = EXAMPLES.parent / "apis" / "crossplane.yaml"
# The ServiceAccount PROVIDER_INSTALL's runtime gives the provider, and the name its token's server goes by.
PROVIDER_SERVICE_ACCOUNT = "provider-kubernetes"
IN_CLUSTER_HOST = "kubernetes.default.svc"


README = EXAMPLES.parent / "README.md"


def readme_steps(name: str) -> list[str]:
    """The commands of the README's block marked `<!-- e2e: name -->`, one per line, as a user types them."""
    text = README.read_text()
    marker = f"<!-- e2e: {name} -->\n```sh\n"
    assert text.count(marker) == 1, f"README.md has {text.count(marker)} blocks marked {name!r}"
    block = text.split(marker, 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines and not any(line.endswith("\\") for line in lines), lines  # one command a line
    return lines


def run_as_written(cluster: Cluster, name: str, work: pathlib.Path, path: Iterable[pathlib.Path] = ()) -> list[str]:
    """Run the README's block `name` line by line, as written, in a folder where `examples/` is the repository's
    (what a command writes stays out of the checkout); each line's output."""
    folder = readme_folder(work)
    return [cluster.shell(line, folder, path) for line in readme_steps(name)]


def readme_folder(work: pathlib.Path) -> pathlib.Path:
    """work, made a folder where `examples/` is the repository's, as the README's commands expect."""
    work.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        (work / "examples").symlink_to(EXAMPLES)
    return work


def dependencies() -> list[dict[str, str]]:
    """The packages the Configuration depends on (dependsOn), as the package manager reads them."""
    return yaml.safe_load(CONFIGURATION_META.read_text())["spec"]["dependsOn"]


def excluded_release(constraint: str) -> str:
    """The release a range's upper bound names, which the range leaves out: ">=v1.0.0 <v1.3.0" -> "v1.3.0"."""
    match = re.fullmatch(r">=\s*v\S+\s+<\s*(v\d+\.\d+\.\d+)", constraint)
    assert match, f"{constraint!r}: not a range with an upper bound"
    return match.group(1)


def image_config(name: str, prefix: str, to: str) -> dict[str, Any]:
    """An ImageConfig pulling the images whose name begins with prefix from to instead."""
    return {
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "ImageConfig",
        "metadata": {"name": name},
        "spec": {"matchImages": [{"type": "Prefix", "prefix": prefix}], "rewriteImage": {"prefix": to}},
    }


def platform_policy(rules: dict[str, Any]) -> dict[str, Any]:
    """The EnvironmentConfig the packages' Compositions read the platform's policy from, holding rules."""
    data = {k: v for k, v in rules.items() if k not in ("apiVersion", "kind")}
    return {
        "apiVersion": policy.ENVIRONMENT_CONFIG_API,
        "kind": policy.ENVIRONMENT_CONFIG_KIND,
        "metadata": {"name": policy.PLATFORM_ENVIRONMENT_CONFIG},
        "data": data,
    }


# Every write, once answered, with who made it and to what (no bodies: they would hold Secrets' data).
HUB_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}


@dataclass
class ControlPlane:
    """A hub cluster with Crossplane, provider-kubernetes and the function, and a spoke."""

    tools: Tools
    workdir: pathlib.Path
    package: pathlib.Path  # the function's .xpkg
    configuration: pathlib.Path  # the API's Configuration .xpkg (claim flavor)
    function_manifest: pathlib.Path  # pkg.crossplane.io Function, as users apply it
    configuration_manifest: pathlib.Path  # pkg.crossplane.io Configuration, as users apply it
    hub: Cluster = field(init=False)
    spoke: Cluster = field(init=False)
    # Three spoke clusters a cluster selector may choose, by ProviderConfig
    # (site-a is the spoke above): none carries a label until a test gives one.
    sites: dict[str, Cluster] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    # How each process was started (spawn's arguments), so a test can start it again after killing it.
    _spawned: dict[str, tuple[list[str], dict[str, str], bool, pathlib.Path | None]] = field(
        init=False, default_factory=dict
    )
    registry: str = ""
    function_image: str = ""
    # provider-kubernetes' CRDs as the e2e installs them, and as its package in the local registry holds them.
    provider_crds: list[dict[str, Any]] = field(default_factory=list)
    # The repository the local registry serves for each package the Configuration depends on (_mirror).
    mirrored: dict[str, str] = field(default_factory=dict)
    # Pods each fake node holds: a scale benchmark puts thousands on each spoke.
    node_pods: int = int(NODE_CAPACITY["pods"])
    # Volumes of the default class on each spoke: a SuperNode with node authentication claims one.
    spoke_volumes: int = 24
    # A scale benchmark's spoke stands in for hundreds of clusters, so it gets the means of hundreds. Their
    # client rate limits: with its controller manager's default (20 requests a second) a spoke made about
    # one pod a second; kwokctl's --disable-qps-limits lifts those of its API server, controller manager and
    # scheduler (KWOK's own benchmarks run so). And their volume controllers: a ClaimBinder binds each new
    # claim, several at once. The hub keeps its defaults.
    spokes_stand_in_for_many: bool = False
    binders: list[ClaimBinder] = field(default_factory=list)
    # How often Crossplane composes each XR again, and re-lists everything, with no event to prompt
    # it: short here so the e2e sees drift mended within its waits (Crossplane's defaults: 1m, 1h).
    crossplane_intervals: tuple[str, str] = ("15s", "1m")
    provider_poll: str = PROVIDER_POLL
    # More flags for `crossplane core start`: a scale benchmark may set the circuit breaker's.
    crossplane_args: tuple[str, ...] = ()
    # And for provider-kubernetes: a scale benchmark may set its workers (--max-reconcile-rate).
    provider_args: tuple[str, ...] = ()
    # The Go processes' environment (GO_ENV): a scale run bounds their heaps as well.
    go_env: dict[str, str] = field(default_factory=lambda: dict(GO_ENV))
    # Whether the hub's API server logs every write it answers (HUB_AUDIT_POLICY), for a benchmark to say
    # who wrote what; it costs the hub's API server CPU, so not for a run whose CPU is the figure.
    hub_audit: bool = False
    function_rootfs: pathlib.Path = field(init=False)
    # The cgroup that holds the function to its container's CPU limit (None: no limit, or no cgroup this
    # machine lets us write, and then the function sees every CPU).
    function_group: pathlib.Path | None = field(init=False, default=None)
    hosts: pathlib.Path = field(init=False)

    # -- names --------------------------------------------------------------------
    # Each control plane has its own clusters and function network namespace
    # (a /30 only this machine routes), so two minors can run side by side.

    @property
    def tag(self) -> str:
        return self.tools.minor.replace(".", "")

    @property
    def function_net(self) -> NetworkNamespace:
        """Where the function's pod runs: Crossplane dials it at inner_ip:9443."""
        return NetworkNamespace(f"flwr-e2e-{self.tag}", f"fe2e-{self.tag}", int(self.tag) % 256, 0)

    @property
    def provider_net(self) -> NetworkNamespace:
        """provider-kubernetes listens on fixed ports (webhooks 9443, metrics 8080): each
        control plane's runs in a namespace of its own, and reaches the clusters' API
        servers (which listen on every address) through the host's end of its veth."""
        return NetworkNamespace(f"flwr-e2e-{self.tag}-pk", f"fe2e-{self.tag}-p", int(self.tag) % 256, 1)

    def provider_kubeconfig(self, cluster: Cluster) -> str:
        """The cluster's kubeconfig as provider-kubernetes reaches it: through the host's
        end of its veth, the server's certificate still checked for the name it holds."""
        config = yaml.safe_load(cluster.kubeconfig_text())
        for entry in config["clusters"]:
            server = entry["cluster"]["server"]
            assert server.startswith("https://127.0.0.1:"), server
            entry["cluster"]["server"] = server.replace("127.0.0.1", self.provider_net.host_ip)
            entry["cluster"]["tls-server-name"] = "localhost"
        return yaml.safe_dump(config)

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._cleanup_leftovers()
        self.hub = self._cluster(f"e2e-{self.tag}-hub", audit=self.hub_audit)
        self.spoke = self._cluster(f"e2e-{self.tag}-spoke", self.spoke_volumes, unlimited=self.spokes_stand_in_for_many)
        self.sites = {"site-a": self.spoke}
        for site in SITES[1:]:
            self.sites[site] = self._cluster(
                f"e2e-{self.tag}-{site}", self.spoke_volumes, unlimited=self.spokes_stand_in_for_many
            )
        self._stopping = threading.Event()
        threading.Thread(target=self._load_balancer_loop, daemon=True).start()
        if self.spokes_stand_in_for_many:
            self.binders = [ClaimBinder(spoke.reader, self._stopping) for spoke in self.sites.values()]
            for binder in self.binders:
                threading.Thread(target=binder.run, daemon=True).start()
        self._registry()
        self._cert_manager()
        self._crossplane()
        self._provider()
        self._install_function()
        self._install_api()

    def _load_balancer_loop(self) -> None:
        while not self._stopping.wait(5):  # a cloud takes seconds too; each look is two kubectl processes
            with contextlib.suppress(Exception):
                serve_load_balancers([self.hub, self.spoke])

    def stop(self) -> None:
        if hasattr(self, "_stopping"):
            self._stopping.set()
        for proc in reversed(list(self.processes.values())):
            proc.stop()
        self.processes.clear()
        if self.function_group is not None:
            served.remove_group(self.function_group, timeout=20)
            self.function_group = None
        self._namespaces_down()
        for name in self.cluster_names:
            self._kwokctl("delete", "cluster", "--name", name, check=False)

    @property
    def cluster_names(self) -> list[str]:
        return [f"e2e-{self.tag}-{c}" for c in ("hub", "spoke", *SITES[1:])]

    @property
    def clusters(self) -> list[Cluster]:
        """Every cluster: the hub, the spoke and the other sites."""
        return [self.hub, *self.sites.values()] if self.sites else [self.hub, self.spoke]

    def cluster_of(self, provider_config: str) -> Cluster:
        """The cluster a ProviderConfig of provider_configs() names."""
        if provider_config in self.sites:
            return self.sites[provider_config]
        return self.spoke if provider_config.startswith("spoke") else self.hub

    def kill_and_restart(self, name: str) -> Process:
        """SIGKILL a process of the control plane (crossplane, provider-kubernetes), as a node's failure would,
        and start it again as it was first started: its caches and work queues start empty."""
        self.processes[name].stop(sig=signal.SIGKILL)
        args, env, inherit, cgroup = self._spawned[name]
        return self.spawn(name, args, env, inherit=inherit, cgroup=cgroup)

    def stop_cluster(self, cluster: Cluster) -> None:
        """Stop a cluster's API server, etcd and controllers, as an outage would: nothing answers on its address."""
        self._kwokctl("stop", "cluster", "--name", cluster.name)

    def start_cluster(self, cluster: Cluster) -> None:
        """Start a stopped cluster again, on the same address with the same state; wait until it answers."""
        started = time.time()
        self._kwokctl("start", "cluster", "--name", cluster.name, "--wait", "3m")
        wait_for(f"{cluster.name} API", lambda: cluster.kubectl("get", "--raw", "/readyz") == "ok", timeout=120)
        self._restart_if_a_component_died(cluster, started)

    def _cleanup_leftovers(self) -> None:
        """A run that died may have left clusters, processes or the namespace behind."""
        for name in self.cluster_names:
            self._kwokctl("delete", "cluster", "--name", name, check=False)
        pids = self.workdir / "pids"
        if pids.is_dir():
            for pid_file in pids.iterdir():
                with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)
                pid_file.unlink()
        self._namespaces_down()

    def spawn(
        self,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        inherit: bool = True,
        cgroup: pathlib.Path | None = None,
    ) -> Process:
        """Start a process of the control plane in a session of its own (in cgroup, if given), its output logged."""
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if name not in self.processes and log.exists():
            log.unlink()  # a new control plane: the last run's log would mislead
        self._spawned[name] = (list(args), dict(env or {}), inherit, cgroup)
        popen = subprocess.Popen(
            args,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env={**({**os.environ, **self.go_env} if inherit else {}), **(env or {})},
            start_new_session=True,
            preexec_fn=served.join_group(cgroup),  # noqa: PLW1509 - it only writes its pid to a cgroup file
        )
        pids = self.workdir / "pids"
        pids.mkdir(exist_ok=True)
        (pids / name).write_text(str(popen.pid))
        proc = Process(name, popen, log)
        self.processes[name] = proc
        return proc

    # -- clusters -----------------------------------------------------------------

    def _dead_components(self, name: str, started: float) -> list[str]:
        """The components of a cluster (kwokctl's binary runtime: one pid file each) whose process is gone.

        Looked at once they have been up COMPONENT_GIVES_UP_SECONDS (from started, or their pid files if
        written later): before that a controller manager still waiting for its API server's /healthz is
        alive, and may exit the moment after. A zombie (exited, not yet reaped) is gone too.
        """
        files = sorted((self.workdir / "kwok" / "clusters" / name / "pids").glob("*.pid"))
        up_since = max([started, *(f.stat().st_mtime for f in files)])
        time.sleep(max(0.0, up_since + COMPONENT_GIVES_UP_SECONDS - time.time()))
        return [f.stem for f in files if not _running(f.read_text().strip())]

    def _restart_if_a_component_died(self, cluster: Cluster, started: float) -> None:
        """Start a cluster again whose component exited while its API server came up, until none has.

        A controller manager waits a few seconds for its API server's /healthz and exits if it
        is not healthy by then; kwokctl does not restart it. On two loaded cores a spoke's API
        server once took longer (its RBAC bootstrap roles): that spoke had no controller manager
        for the rest of the run, its namespaces never finished terminating, and four scenarios
        failed on it (fresh-clone CI, 1.35). Its API server answering /readyz, a component
        started now finds it healthy.
        """
        for _ in range(3):
            dead = self._dead_components(cluster.name, started)
            if not dead:
                return
            print(f"{cluster.name}: {', '.join(dead)} exited while starting; starting the cluster again")  # noqa: T201
            self._kwokctl("stop", "cluster", "--name", cluster.name, check=False)  # the dead one cannot be stopped
            started = time.time()
            self._kwokctl("start", "cluster", "--name", cluster.name, "--wait", "3m")
            wait_for(f"{cluster.name} API", lambda: cluster.kubectl("get", "--raw", "/readyz") == "ok", timeout=120)
        dead = self._dead_components(cluster.name, started)
        if dead:
            msg = f"{cluster.name}: {', '.join(dead)} would not stay up"
            raise RuntimeError(msg)

    def _kwokctl(self, *args: str, check: bool = True) -> str:
        env = {
            **os.environ,
            **self.go_env,
            "KWOK_WORKDIR": str(self.workdir / "kwok"),
            "KWOK_KUBE_VERSION": self.tools.kube_version,
            "PATH": f"{self.tools.root}:{os.environ.get('PATH', '')}",
        }
        proc = subprocess.run(
            [self.tools.kwokctl, *args], check=False, capture_output=True, text=True, env=env, timeout=300
        )
        if check and proc.returncode != 0:
            msg = f"kwokctl {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
            raise RuntimeError(msg)
        return proc.stdout

    @property
    def hub_audit_log(self) -> pathlib.Path:
        """Where the hub's API server logs its writes, with hub_audit (kwokctl's place for it)."""
        return self.workdir / "kwok" / "clusters" / self.hub.name / "logs" / "audit.log"

    def _cluster(self, name: str, volumes: int = 24, *, unlimited: bool = False, audit: bool = False) -> Cluster:
        audit_args = []
        if audit:
            policy_file = self.workdir / "hub-audit-policy.yaml"
            policy_file.write_text(yaml.safe_dump(HUB_AUDIT_POLICY))
            audit_args = ["--kube-audit-policy", str(policy_file)]
        with _creating_clusters():
            started = time.time()
            self._kwokctl(
                "create", "cluster", "--name", name, "--runtime", "binary",
                "--etcd-binary", self.tools.etcd,
                "--kube-apiserver-binary", self.tools.kube("kube-apiserver"),
                "--kube-controller-manager-binary", self.tools.kube("kube-controller-manager"),
                "--kube-scheduler-binary", self.tools.kube("kube-scheduler"),
                "--kwok-controller-binary", self.tools.kwok,
                # One of each, so nothing to elect. With election on, a scheduler whose API
                # server answered a lease renewal late (5 s, on two loaded cores) exited,
                # and kwokctl does not restart it: pods stayed Pending for the rest of the run.
                "--extra-args", "kube-scheduler=leader-elect=false",
                "--extra-args", "kube-controller-manager=leader-elect=false",
                *(["--disable-qps-limits"] if unlimited else []),
                *audit_args,
                "--wait", "3m",
            )  # fmt: skip
        kubeconfig = self.workdir / f"{name}.kubeconfig"
        kubeconfig.write_text(self._kwokctl("get", "kubeconfig", "--name", name))
        cluster = Cluster(name, kubeconfig, self.tools.kubectl)
        wait_for(f"{name} API", lambda: cluster.kubectl("get", "--raw", "/readyz") == "ok", timeout=120)
        self._restart_if_a_component_died(cluster, started)
        capacity = node_capacity(self.node_pods)
        nodes = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"node-{i}",
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": f"node-{i}", "kubernetes.io/os": "linux",
                               "kubernetes.io/arch": "amd64", "type": "kwok"},
                },
                "status": {"allocatable": capacity, "capacity": capacity},
            }
            for i in range(1, 4)
        ]  # fmt: skip
        # GPU pools with mountAll ask for the nvidia RuntimeClass; admission needs it to exist.
        runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                         "metadata": {"name": "nvidia"}, "handler": "nvidia"}  # fmt: skip
        cluster.apply(*nodes, runtime_class, *_volumes(volumes))
        wait_for(
            f"{name} nodes Ready",
            lambda: (
                all(condition(n, "Ready").get("status") == "True" for n in cluster.get("nodes"))
                and len(cluster.get("nodes")) == 3
            ),
        )
        return cluster

    # -- registry -----------------------------------------------------------------

    def _registry(self) -> None:
        port = free_port()
        self.spawn("registry", [self.tools.crane, "registry", "serve", "--address", f"127.0.0.1:{port}"])
        self.registry = f"127.0.0.1:{port}"
        wait_for("the registry", lambda: _connects("127.0.0.1", port), timeout=30)

    # -- cert-manager ------------------------------------------------------------

    def _cert_manager(self) -> None:
        """cert-manager in the hub and a CA issuer made the way its docs make
        one: a self-signed ClusterIssuer signs a CA Certificate, whose Secret
        backs the CA ClusterIssuer `flower-ca`."""
        hub = self.hub
        crds = sorted((self.tools.root / "cert-manager-crds").glob("*.yaml"))
        hub.kubectl("apply", "--server-side", *(a for crd in crds for a in ("-f", str(crd))))
        hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CERT_MANAGER_NS}})
        hub.wait_established(yaml.safe_load(crd.read_text())["metadata"]["name"] for crd in crds)
        self.spawn("cert-manager", [self.tools.cert_manager, "--kubeconfig", str(hub.kubeconfig),
                                    "--cluster-resource-namespace", CERT_MANAGER_NS])  # fmt: skip
        issuer = "cert-manager.io/v1"
        hub.apply(
            {"apiVersion": issuer, "kind": "ClusterIssuer", "metadata": {"name": "selfsigned"},
             "spec": {"selfSigned": {}}},
            {"apiVersion": issuer, "kind": "Certificate", "metadata": {"name": CA_ISSUER, "namespace": CERT_MANAGER_NS},
             "spec": {"isCA": True, "commonName": "flower-e2e-ca", "secretName": CA_ISSUER,
                      "privateKey": {"algorithm": "ECDSA", "size": 256},
                      "issuerRef": {"name": "selfsigned", "kind": "ClusterIssuer", "group": "cert-manager.io"}}},
            {"apiVersion": issuer, "kind": "ClusterIssuer", "metadata": {"name": CA_ISSUER},
             "spec": {"ca": {"secretName": CA_ISSUER}}},
        )  # fmt: skip
        wait_for(
            f"ClusterIssuer {CA_ISSUER} Ready",
            lambda: condition(hub.get("clusterissuers.cert-manager.io", CA_ISSUER), "Ready").get("status") == "True",
            timeout=120,
        )

    def ca_certificate(self) -> str:
        """The CA certificate (base64) of the `flower-ca` issuer."""
        return self.hub.get("secret", CA_ISSUER, CERT_MANAGER_NS)["data"]["ca.crt"]

    # -- Crossplane ---------------------------------------------------------------

    def _crossplane(self) -> None:
        hub = self.hub
        hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CROSSPLANE_NS}})
        hub.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "crossplane", "namespace": CROSSPLANE_NS}})  # fmt: skip
        env = {
            "KUBECONFIG": str(hub.kubeconfig),
            "POD_NAMESPACE": CROSSPLANE_NS,
            "TLS_CA_SECRET_NAME": "crossplane-root-ca",
            "TLS_CLIENT_SECRET_NAME": "crossplane-tls-client",
        }
        crds = str(self.tools.root / "crossplane-crds")
        for cache in ("xpkg-cache", "xfn-cache"):
            (self.workdir / cache).mkdir(exist_ok=True)
        for _attempt in range(3):  # the Lock CRD may not be established on the first try
            proc = subprocess.run(
                [self.tools.crossplane, "core", "init", "--enable-webhooks=false"],
                env={**os.environ, **env, "CRDS_PATH": crds},
                check=False, capture_output=True, text=True, timeout=180,
            )  # fmt: skip
            if proc.returncode == 0:
                break
            time.sleep(3)
        else:
            msg = f"crossplane core init: {proc.stdout}\n{proc.stderr}"
            raise RuntimeError(msg)
        client = self.workdir / "crossplane-tls-client"
        self._secret_to_dir(hub, "crossplane-tls-client", client)
        # Crossplane alone resolves the function's Service name to its namespace.
        self.hosts = self.workdir / "hosts"
        self.hosts.write_text(pathlib.Path("/etc/hosts").read_text())
        mount = 'mount --bind "$0" /etc/hosts && exec "$@"'
        self.spawn(
            "crossplane",
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(self.hosts),
             self.tools.crossplane, "core", "start", "--enable-webhooks=false",
             "--cache-dir", str(self.workdir / "xpkg-cache"), "--xfn-cache-dir", str(self.workdir / "xfn-cache"),
             "--metrics-port", str(free_port()), "--health-probe-port", str(free_port()),
             f"--poll-interval={self.crossplane_intervals[0]}", f"--sync-interval={self.crossplane_intervals[1]}",
             *self.crossplane_args],
            env={**env, "TLS_CLIENT_CERTS_DIR": str(client)},
        )  # fmt: skip
        wait_for("Crossplane's CRDs", lambda: hub.get("crd", "functions.pkg.crossplane.io"), timeout=120)

    def _secret_to_dir(self, cluster: Cluster, name: str, folder: pathlib.Path, owner: int | None = None) -> None:
        secret = wait_for(f"Secret {name}", lambda: _with_data(cluster.get("secret", name, CROSSPLANE_NS)))
        folder.mkdir(parents=True, exist_ok=True)
        for key, value in secret["data"].items():
            path = folder / key
            path.write_bytes(base64.b64decode(value))
            if owner is not None:
                os.chown(path, owner, owner)
                path.chmod(0o400)

    # -- provider-kubernetes -----------------------------------------------------

    def _provider(self) -> None:
        hub = self.hub
        crds = []
        for path in sorted(self.tools.provider_crds.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            # The Object CRDs convert through the provider's webhook, which
            # needs a Service; the e2e stores one version per kind.
            if crd["spec"].get("conversion", {}).get("strategy") == "Webhook":
                crd["spec"]["conversion"] = {"strategy": "None"}
            crds.append(crd)
        self.provider_crds = crds
        hub.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds))
        webhook = self.workdir / "provider-webhook"
        webhook.mkdir(exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=provider",
             "-keyout", str(webhook / "tls.key"), "-out", str(webhook / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
        shutil.copy(webhook / "tls.crt", webhook / "ca.crt")
        self.provider_net.up()
        kubeconfig = self.workdir / "provider.kubeconfig"
        kubeconfig.write_text(self.provider_kubeconfig(hub))
        identity, hosts, port = self._injected_identity()
        # InjectedIdentity, as in a pod: the ServiceAccount's token and the cluster's CA where client-go's
        # in-cluster configuration reads them, the API server under a name its certificate holds. Mounted in
        # the provider's own mount namespace (ip netns exec makes one): nothing changes on the host.
        mounts = (
            'mount --bind "$0" /etc/hosts && mount -t tmpfs tmpfs /run && '
            "mkdir -p /run/secrets/kubernetes.io/serviceaccount && "
            'mount --bind "$1" /run/secrets/kubernetes.io/serviceaccount && shift && exec "$@"'
        )
        self.spawn(
            "provider-kubernetes",
            [shutil.which("ip") or "ip", "netns", "exec", self.provider_net.name, "sh", "-c", mounts,
             str(hosts), str(identity),
             self.tools.provider_kubernetes, f"--poll={self.provider_poll}", "--enable-management-policies",
             "--enable-watches", *self.provider_args],
            env={"KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": CROSSPLANE_NS,
                 "TLS_SERVER_CERTS_DIR": str(webhook),
                 "KUBERNETES_SERVICE_HOST": IN_CLUSTER_HOST, "KUBERNETES_SERVICE_PORT": port},
        )  # fmt: skip
        # One kubeconfig Secret and ProviderConfig per cluster name the examples use.
        secrets = [
            _kubeconfig_secret("hub-kubeconfig", self.provider_kubeconfig(self.hub)),
            _kubeconfig_secret("spoke-kubeconfig", self.provider_kubeconfig(self.spoke)),
            *(_kubeconfig_secret(f"{site}-kubeconfig", self.provider_kubeconfig(c)) for site, c in self.sites.items()),
        ]
        hub.apply(*secrets)
        hub.wait_established(crd["metadata"]["name"] for crd in crds)  # before the ProviderConfigs

    def _injected_identity(self) -> tuple[pathlib.Path, pathlib.Path, str]:
        """What a pod of the provider's ServiceAccount has: a folder with its token and the hub's CA, a
        hosts file naming the hub's API server as seen from the provider's network, and the server's port.

        The ServiceAccount is made here, as the package manager makes it from PROVIDER_INSTALL's runtime.
        """
        hub = self.hub
        hub.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": PROVIDER_SERVICE_ACCOUNT, "namespace": CROSSPLANE_NS}})  # fmt: skip
        token = hub.kubectl("create", "token", PROVIDER_SERVICE_ACCOUNT, "-n", CROSSPLANE_NS, "--duration=24h")
        config = yaml.safe_load(self.provider_kubeconfig(hub))["clusters"][0]["cluster"]
        folder = self.workdir / "provider-identity"
        folder.mkdir(exist_ok=True)
        (folder / "token").write_text(token.strip())
        (folder / "ca.crt").write_bytes(base64.b64decode(config["certificate-authority-data"]))
        (folder / "namespace").write_text(CROSSPLANE_NS)
        host, _, port = config["server"].removeprefix("https://").rpartition(":")
        hosts = self.workdir / "provider-hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{host} {IN_CLUSTER_HOST}\n")
        return folder, hosts, port

    def provider_configs(self) -> list[dict[str, Any]]:
        """The examples' ProviderConfigs as they are, with their Secrets, and one per site: the hub's
        (`default`, `hub`) act with the provider's ServiceAccount and the rights PROVIDER_INSTALL grants it."""
        examples = [d for path in (PROVIDER_INSTALL, EXAMPLES / "multicluster" / "providerconfigs.yaml")
                    for d in yaml.safe_load_all(path.read_text()) if d]  # fmt: skip
        secrets = [
            _kubeconfig_secret(secret["name"], self.provider_kubeconfig(self.cluster_of(d["metadata"]["name"])))
            for d in examples
            if d["kind"] == "ProviderConfig" and (secret := d["spec"]["credentials"].get("secretRef"))
        ]
        configs = [*secrets, *examples, *self._mirrored_runtimes(examples)]
        for site in SITES:
            configs.append({
                "apiVersion": "kubernetes.crossplane.io/v1alpha1",
                "kind": "ProviderConfig",
                "metadata": {"name": site},
                "spec": {"credentials": {"source": "Secret", "secretRef": {
                    "namespace": CROSSPLANE_NS, "name": f"{site}-kubeconfig", "key": "kubeconfig"}}},
            })  # fmt: skip
        return configs

    def _mirrored_runtimes(self, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The examples' runtime ImageConfigs, for the repositories the mirror serves (_mirror)."""
        out = []
        for doc in examples:
            if doc["kind"] != "ImageConfig" or "runtime" not in doc["spec"]:
                continue
            matches = []
            for match in doc["spec"]["matchImages"]:
                package = next((p for p in self.mirrored if match["prefix"].startswith(p)), None)
                assert package is not None, f"{match['prefix']}: no package of the Configuration's"
                matches.append({**match, "prefix": self.mirrored[package] + match["prefix"].removeprefix(package)})
            name = f"{doc['metadata']['name']}-mirrored"
            out.append({**doc, "metadata": {"name": name}, "spec": {**doc["spec"], "matchImages": matches}})
        return out

    def v2_provider_configs(self, example: pathlib.Path) -> list[dict[str, Any]]:
        """examples/v2/providerconfigs.yaml as it is, and the Secret its ClusterProviderConfig names.

        Its namespaced ProviderConfig uses InjectedIdentity (the provider's own ServiceAccount, which
        this control plane gives it as a pod would have it); the ClusterProviderConfig reads a
        kubeconfig Secret, made here from the spoke's kubeconfig as a platform team would make it.
        """
        configs = [d for d in yaml.safe_load_all(example.read_text()) if d]
        refs = [c["spec"]["credentials"]["secretRef"] for c in configs if c["kind"] == "ClusterProviderConfig"]
        assert refs and all(r["namespace"] == CROSSPLANE_NS for r in refs), refs  # where the provider reads them
        return [*(_kubeconfig_secret(r["name"], self.provider_kubeconfig(self.spoke)) for r in refs), *configs]

    # -- the function -------------------------------------------------------------

    def push(self, xpkg: pathlib.Path, repository: str, tag: str) -> str:
        """Push a package to the local registry, as `crossplane xpkg push`; its reference."""
        ref = f"{self.registry}/{repository}:{tag}"
        subprocess.run([self.tools.crank, "xpkg", "push", "-f", str(xpkg), ref],
                       check=True, capture_output=True, text=True, timeout=180)  # fmt: skip
        return ref

    def _mirror(self) -> dict[str, str]:
        """Make the local registry stand in for the registries the Configuration's dependencies name, as a
        platform's mirror does: the function's and the provider's packages pushed there, and an ImageConfig
        per dependency rewriting its repository to the registry's. The rewritten repositories, by package.

        The provider's package holds its CRDs as the e2e installs them (no conversion webhook: see
        _provider) and no runtime image: the provider runs as a host process, as the function's pod
        runs from its Deployment. Crossplane matches a runtime ImageConfig against the package's
        rewritten repository, so the examples' (PROVIDER_INSTALL) is copied for it (provider_configs).
        It is tagged with the release this plane runs (Tools.provider), and with the first release the
        Configuration's range leaves out, as a registry holding newer releases would be: the package
        manager must resolve the range to this plane's release (test_api_installed_from_the_configuration_package).
        """
        mirrored = {}
        for dependency in dependencies():
            package = dependency["package"]
            repository = package.split("/", 1)[1]
            mirrored[package] = f"{self.registry}/{repository}"
            if dependency["kind"] == "Function":
                self.function_image = self.push(self.package, repository, dependency["version"])
            else:
                xpkg = self._provider_package()
                self.push(xpkg, repository, self.tools.provider.release)
                self.push(xpkg, repository, excluded_release(dependency["version"]))
        self.hub.apply(*(image_config(f"mirror-{n}", package, to) for n, (package, to) in enumerate(mirrored.items())))
        return mirrored

    def _provider_package(self) -> pathlib.Path:
        root = self.workdir / "provider-package"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        meta = {
            "apiVersion": "meta.pkg.crossplane.io/v1",
            "kind": "Provider",
            "metadata": {"name": "provider-kubernetes"},
        }
        (root / "crossplane.yaml").write_text(yaml.safe_dump(meta))
        for crd in self.provider_crds:
            (root / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd))
        xpkg = self.workdir / "provider-kubernetes.xpkg"
        subprocess.run([self.tools.crank, "xpkg", "build", f"--package-root={root}", "-o", str(xpkg)],
                       check=True, capture_output=True, text=True, timeout=180)  # fmt: skip
        return xpkg

    def _install_function(self) -> None:
        hub = self.hub
        self.mirrored = self._mirror()
        # The README's manifest as it is, at this release: the mirror serves its package.
        function = yaml.safe_load(self.function_manifest.read_text())
        assert function["metadata"]["name"] == FUNCTION
        repository = function["spec"]["package"].rsplit(":", 1)[0]
        assert repository in self.mirrored, "the README's function is not the one the Configuration depends on"
        function["spec"]["package"] = f"{repository}:{RELEASE}"
        # With the runtime config beside it, named as the manifest's comment tells.
        runtime = self.function_runtime
        told = f"#   runtimeConfigRef:\n#     name: {runtime['metadata']['name']}\n"
        assert told in self.function_manifest.read_text(), f"{self.function_manifest} does not say {told!r}"
        function["spec"]["runtimeConfigRef"] = {"name": runtime["metadata"]["name"]}
        hub.apply(runtime, function)
        revision = wait_for(
            "the FunctionRevision's endpoint",
            lambda: next((r for r in hub.get("functionrevisions") if (r.get("status") or {}).get("endpoint")), None),
            timeout=240,
        )
        self.endpoint = revision["status"]["endpoint"]  # dns:///<service>.<namespace>:9443
        host = self.endpoint.removeprefix("dns:///").rsplit(":", 1)[0]
        with self.hosts.open("a") as f:  # in place: Crossplane's bind mount sees it
            f.write(f"{self.function_net.inner_ip} {host}\n")
        self.function_net.up()
        self.function_rootfs = self._unpack_image()
        self.start_function()
        wait_for(
            "the Function to turn Healthy",
            lambda: condition(hub.get("functions.pkg.crossplane.io", FUNCTION), "Healthy").get("status") == "True",
            timeout=240,
        )

    @property
    def function_runtime(self) -> dict[str, Any]:
        """The runtime config example, with the e2e's CPUs (FUNCTION_CPUS) for its requests and limits."""
        runtime = yaml.safe_load(FUNCTION_RUNTIME.read_text())
        [container] = runtime["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
        for bound in ("requests", "limits"):
            container["resources"][bound]["cpu"] = FUNCTION_CPUS
        return runtime

    def _unpack_image(self) -> pathlib.Path:
        """The image's root filesystem and config, as the registry serves them."""
        rootfs = self.workdir / "function-rootfs"
        if rootfs.exists():
            shutil.rmtree(rootfs)
        rootfs.mkdir()
        flat = self.workdir / "function-rootfs.tar"
        subprocess.run([self.tools.crane, "export", self.function_image, str(flat)], check=True, timeout=300)
        with tarfile.open(flat) as tar:
            tar.extractall(rootfs, numeric_owner=True, filter="fully_trusted")  # noqa: S202 - our own image, owners kept
        flat.unlink()
        config = json.loads(
            subprocess.run(
                [self.tools.crane, "config", self.function_image], check=True, capture_output=True, text=True
            ).stdout
        )
        self.image_config = config["config"]
        return rootfs

    def function_pod(self) -> dict[str, Any]:
        """The pod spec Crossplane's package manager made for the function."""
        # The revision names its endpoint before the runtime reconciler has made the Deployment.
        deployment = wait_for(
            "the function's Deployment",
            lambda: next(
                (d for d in self.hub.get("deployments", namespace=CROSSPLANE_NS)
                 if d["metadata"]["name"].startswith(FUNCTION)),
                None,
            ),
            timeout=240,
        )  # fmt: skip
        return deployment["spec"]["template"]["spec"]

    def start_function(self) -> Process:
        """Run the function pod's container from the image, as a kubelet would."""
        pod = self.function_pod()
        container = pod["containers"][0]
        user = self._image_user(pod, container)
        # The TLS Secret, mounted where the pod mounts it.
        for volume in pod.get("volumes", []):
            secret = (volume.get("secret") or {}).get("secretName")
            mount = next((m for m in container.get("volumeMounts", []) if m["name"] == volume["name"]), None)
            if secret and mount:
                self._secret_to_dir(self.hub, secret, self.function_rootfs / mount["mountPath"].lstrip("/"), user[0])
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        for entry in self.image_config.get("Env") or []:
            key, _, value = entry.partition("=")
            env.setdefault(key, value)
        command = container.get("command") or self.image_config.get("Entrypoint") or []
        args = container.get("args") or ([] if container.get("command") else self.image_config.get("Cmd") or [])
        workdir = container.get("workingDir") or self.image_config.get("WorkingDir") or "/"
        if workdir != "/":
            msg = f"chroot starts in /, the image asks for {workdir}"
            raise NotImplementedError(msg)
        # The image has no shell and no env(1): the process gets the pod's
        # environment and nothing of the harness's. Its /dev/shm is a fresh tmpfs, as every
        # container runtime mounts one: the worker processes' locks are POSIX semaphores, files
        # there, which the image's own directory (root's, 0755) refuses to the function's user.
        # Mounted in the function's own mount namespace (ip netns exec makes one), the host's
        # shell before the chroot: it goes with the process.
        # /proc, /sys and the CPU's cgroup hierarchies too, as a container runtime mounts them: the function reads
        # its CPU limit from its cgroup there. (ip netns exec gives /sys a sysfs of the namespace's, which holds no
        # cgroup mount: each is mounted again, at the host's mount point, on a tmpfs.)
        for point in ("dev/shm", "proc", "sys"):
            (self.function_rootfs / point).mkdir(exist_ok=True)
        mkdir = shutil.which("mkdir") or "mkdir"
        steps = [
            '"$1" -t tmpfs -o mode=1777,size=64m,nosuid,nodev,noexec shm "$0/dev/shm"',
            '"$1" -t proc proc "$0/proc"',
            '"$1" --rbind /sys "$0/sys"',
            '"$1" -t tmpfs cgroups "$0/sys/fs/cgroup"',
        ]
        for fstype, options, point in _cpu_cgroup_mounts():
            steps += [f'{mkdir} -p "$0{point}"', f'"$1" -t {fstype} -o {options or "rw"} cgroup "$0{point}"']
        mounts = " && ".join([*steps, 'shift && exec "$@"'])
        # The container's CPU limit, as a kubelet sets it: a cgroup with that quota.
        limit = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
        group = f"flwr-e2e-{self.tag}-function"
        self.function_group = served.cpu_limit_group(group, cpu_quantity(limit)) if limit is not None else None
        proc = self.spawn(
            "function",
            [shutil.which("ip") or "ip", "netns", "exec", self.function_net.name, "/bin/sh", "-c", mounts,
             str(self.function_rootfs), shutil.which("mount") or "mount", shutil.which("chroot") or "chroot",
             f"--userspec={user[0]}:{user[1]}", str(self.function_rootfs), *command, *args],
            env=env,
            inherit=False,
            cgroup=self.function_group,
        )  # fmt: skip
        port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "grpc"), 9443)
        wait_for(
            "the function to listen",
            lambda: _connects(self.function_net.inner_ip, port) or not proc.alive(),
            timeout=60,
        )
        if not proc.alive():
            msg = f"the function exited:\n{proc.tail()}"
            raise RuntimeError(msg)
        return proc

    def _image_user(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, int]:
        """The pod's runAsUser/runAsGroup, else the image's USER resolved in its own /etc/passwd."""
        ctx = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
        name = (self.image_config.get("User") or "0").split(":")[0]
        uid = ctx.get("runAsUser")
        if uid is None:
            uid = int(name) if name.isdigit() else _passwd(self.function_rootfs, name)[0]
        gid = ctx.get("runAsGroup")
        if gid is None:
            gid = _passwd(self.function_rootfs, name)[1] if not name.isdigit() else uid
        return int(uid), int(gid)

    def _namespaces_down(self) -> None:
        self.function_net.down()
        self.provider_net.down()

    # -- the API ------------------------------------------------------------------

    def _install_api(self) -> None:
        """The README's platform block as written (provider-kubernetes' identity, the Configuration, the
        policy), once the mirror serves the Configuration's package under the name its manifest gives and
        the ProviderConfigs of the e2e's other clusters are there."""
        as_written = [d for d in yaml.safe_load_all(PROVIDER_INSTALL.read_text()) if d]
        self.hub.apply(*(d for d in self.provider_configs() if d not in as_written))
        manifest = yaml.safe_load(self.configuration_manifest.read_text())
        repository, tag = manifest["spec"]["package"].rsplit(":", 1)
        assert tag == RELEASE, f"{self.configuration_manifest}: {tag}, not this release's {RELEASE}"
        self.push(self.configuration, repository.split("/", 1)[1], RELEASE)
        self.mirrored[repository] = f"{self.registry}/{repository.split('/', 1)[1]}"
        self.hub.apply(image_config("mirror-configuration", repository, self.mirrored[repository]))
        run_as_written(self.hub, "platform", self.workdir / "readme-platform")
        self.wait_installed(manifest["metadata"]["name"], manifest["spec"]["package"])

    def rewritten(self, ref: str) -> str:
        """Where the mirror serves a package named ref (what the ImageConfigs rewrite it to)."""
        repository, tag = ref.rsplit(":", 1)
        return f"{self.mirrored.get(repository, repository)}:{tag}"

    def install_configuration(self, name: str, ref: str) -> dict[str, Any]:
        """Install the Configuration `name` from `ref` (or move it there) with the README's manifest
        (wait_installed). The active revision."""
        manifest = yaml.safe_load(self.configuration_manifest.read_text())
        manifest["metadata"]["name"] = name
        manifest["spec"]["package"] = ref
        self.hub.apply(manifest)
        return self.wait_installed(name, ref)

    def wait_installed(self, name: str, ref: str) -> dict[str, Any]:
        """Wait until the Configuration `name`'s revision of `ref` is the active, healthy one, every XRD is
        Established and the package manager has installed every dependency (from the mirror, _mirror).
        The active revision."""
        hub = self.hub
        images = {ref, self.rewritten(ref)}

        def active_revision() -> dict[str, Any] | None:
            for revision in hub.get("configurationrevisions.pkg.crossplane.io"):
                if (revision["spec"]["image"] in images and revision["spec"]["desiredState"] == "Active"
                        and condition(revision, "RevisionHealthy").get("status") == "True"):  # fmt: skip
                    return revision
            return None

        revision = wait_for(f"ConfigurationRevision of {ref} active and Healthy", active_revision, timeout=240)
        wait_for(f"Configuration {name} Installed and Healthy", lambda: all(
            condition(hub.get("configurations.pkg.crossplane.io", name), c).get("status") == "True"
            for c in ("Installed", "Healthy")), timeout=120)  # fmt: skip
        wait_for("every XRD Established", lambda: all(
            condition(x, "Established").get("status") == "True" for x in hub.get("compositeresourcedefinitions")
        ), timeout=180)  # fmt: skip
        for dependency in dependencies():
            wait_for(f"{dependency['package']} installed and Healthy", lambda d=dependency: self.installed(d),
                     timeout=240)  # fmt: skip
        return revision

    def installed(self, dependency: dict[str, str]) -> dict[str, Any] | None:
        """The package installed for one of the Configuration's dependencies, if Installed and Healthy."""
        plural = f"{dependency['kind'].lower()}s.pkg.crossplane.io"
        for package in self.hub.get(plural):
            if package["spec"]["package"].rsplit(":", 1)[0] == dependency["package"] and all(
                condition(package, c).get("status") == "True" for c in ("Installed", "Healthy")
            ):
                return package
        return None

    def logs(self) -> str:
        return "\n\n".join(f"== {p.name}\n{p.tail()}" for p in self.processes.values())


def node_capacity(pods: int) -> dict[str, str]:
    """A fake node's capacity for this many pods: NODE_CAPACITY's CPU and memory for each 250 pods or part of it.

    At 64 CPUs, a scale run's nodes were full (Insufficient cpu) at 1,827 SuperNodes a spoke, a third of
    those a thousand clusters bring.
    """
    room = max(1, math.ceil(pods / int(NODE_CAPACITY["pods"])))
    return {
        **NODE_CAPACITY,
        "pods": str(pods),
        "cpu": str(int(NODE_CAPACITY["cpu"]) * room),
        "memory": f"{int(NODE_CAPACITY['memory'].removesuffix('Gi')) * room}Gi",
    }


def _volumes(default_class: int) -> list[dict[str, Any]]:
    """Static volumes, as a storage admin provides them: claims of the default
    class and of class `standard` (the examples use both) bind to these."""
    volumes: list[dict[str, Any]] = [{
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
    }]  # fmt: skip
    for storage_class, count in [("standard", 24), ("", default_class)]:
        for i in range(count):
            volumes.append({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": f"pv-{storage_class or 'default'}-{i}"},
                "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Delete",
                         "hostPath": {"path": f"/var/lib/e2e/pv-{storage_class or 'default'}-{i}"}},
            })  # fmt: skip
    volumes.append({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-shared"},
        "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/var/lib/e2e/pv-shared"}},
    })  # fmt: skip
    return volumes


def serve_load_balancers(clusters: list[Cluster]) -> None:
    """Play a cloud's load-balancer controller: give each LoadBalancer Service an
    ingress address from TEST-NET-3 (nothing is ever sent to it)."""
    for cluster in clusters:
        for svc in cluster.get("services"):
            if svc["spec"].get("type") != "LoadBalancer" or (svc.get("status") or {}).get("loadBalancer", {}).get(
                "ingress"
            ):
                continue
            octet = 1 + sum(svc["metadata"]["uid"].encode()) % 250
            patch = {"status": {"loadBalancer": {"ingress": [{"ip": f"203.0.113.{octet}"}]}}}
            cluster.kubectl(
                "patch",
                "service",
                svc["metadata"]["name"],
                "-n",
                svc["metadata"]["namespace"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(patch),
                check=False,
            )


@contextlib.contextmanager
def _creating_clusters() -> Iterator[None]:
    """One `kwokctl create cluster` at a time on this machine, until its cluster is up.

    kwokctl picks each component's port by walking down from 32767 to the
    first one nothing listens on: two control planes creating clusters at once
    (make test runs one per minor side by side) pick the same ports before
    either binds them. Held until the cluster is ready, the ports are bound
    when the next one looks.
    """
    with CLUSTER_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cpu_cgroup_mounts() -> list[tuple[str, str, str]]:
    """(filesystem type, options, mount point) of this machine's cgroup hierarchies that may hold a CPU quota."""
    found = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        dash = fields.index("-")
        point, fstype, options = fields[4], fields[dash + 1], fields[dash + 3].split(",")
        if fstype == "cgroup2" or (fstype == "cgroup" and "cpu" in options):
            found.append((fstype, ",".join(o for o in options if o not in ("rw", "ro")), point))
    return found


def cpu_quantity(quantity: str) -> float:
    """A CPU quantity as Kubernetes writes one ("2", "1.5", "500m"), in CPUs."""
    return int(quantity.removesuffix("m")) / 1000 if quantity.endswith("m") else float(quantity)


def _connects(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def _with_data(secret: dict[str, Any] | None) -> dict[str, Any] | None:
    return secret if secret and secret.get("data") else None


def _passwd(rootfs: pathlib.Path, name: str) -> tuple[int, int]:
    for line in (rootfs / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(fields[3])
    msg = f"user {name} is not in the image's /etc/passwd"
    raise KeyError(msg)


def _kubeconfig_secret(name: str, kubeconfig: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": CROSSPLANE_NS},
        "stringData": {"kubeconfig": kubeconfig},
    }


@contextlib.contextmanager
def running(plane: ControlPlane) -> Iterator[ControlPlane]:
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
