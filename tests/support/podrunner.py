"""A small kubelet for tests: rendered workloads as real processes on this machine.

Give it the resources a render produced (provider-kubernetes `Object`s are
unwrapped to their manifest), the Secrets and ConfigMaps the cluster would
hold, and a map from image repository (or a full reference, which wins) to an `Image`: the config an image
would have, with its files taken from this machine instead of a registry
(`flower_images()` maps flwr/superlink, flwr/supernode and flwr/superexec,
and any custom SuperExec repositories, to one Flower release's venv: its
`flower-*` entrypoint, user 49999, HOME and workdir /app, as flwr/base has
them). `PodRunner.start()` then does what kubelet, kube-proxy and cluster DNS
would do, as far as these tests need:

* Pods: a StatefulSet makes `replicas` pods `<name>-<ordinal>`, a Deployment
  `replicas` pods `<name>-<i>` (Kubernetes adds random suffixes), a DaemonSet
  one pod `<name>-<node>` per fake node (two), a Pod itself.
* Network: each pod gets a network namespace with a veth to the host and a
  /30 of its lane's 10.<214+lane>.0.0/16, so a process that binds 127.0.0.1 is out of other
  pods' reach, as in a cluster. Pods reach each other through Services only
  (the host does not route between pods).
* Services: each gets an address in 10.<214+lane>.255.0/24 on the host's loopback,
  where a TCP forwarder (asyncio, in this process) passes each connection on
  to a ready pod the selector picks (one whose containers all run: a pod
  with a dead sidecar drops out, as a NotReady one would), at its
  targetPort (a named one from that pod's container ports); when no pod
  takes it, the client gets a reset. Their names (`svc`, `svc.ns`, `svc.ns.svc`,
  `svc.ns.svc.cluster.local`; a headless one's resolve to its pods) are in
  each pod's /etc/hosts, in place of cluster DNS; other names fail at once.
* Containers: init containers run to completion, in order; native sidecars
  (init containers with restartPolicy Always) start and keep running. Each
  container's process joins the pod's network and UTS namespaces (hostname =
  pod name) and has a mount namespace of its own whose root is a tmpfs: the
  host's system directories (/usr, /etc, ...) and the image's paths (its
  interpreter's installation) bound read-only, a venv image's venv at /opt/venv
  (wherever the host keeps it: under /tmp, in a path with spaces), an empty
  /tmp and the image's workdir, the
  volumes at their mountPath (subPath, readOnly), the pod's /etc/hosts.
  A mount point inside a host directory (/etc/flower) goes on an overlay of
  it. readOnlyRootFilesystem makes the root read-only. So the paths a
  manifest names work unchanged, and nothing is written outside the work
  directory. The process runs as runAsUser/runAsGroup (else the image's
  user) with fsGroup and supplementalGroups, no_new_privs as
  allowPrivilegeEscalation: false asks, in its workingDir, its command and
  args after Kubernetes' $(VAR) expansion, never through a shell, with the
  image's environment overlaid by envFrom and env (fieldRef, secretKeyRef,
  configMapKeyRef).
* Volumes: emptyDir (medium Memory: a tmpfs the pod's containers share),
  secret and configMap (items, defaultMode, mode, optional), projected
  secret and configMap sources, persistentVolumeClaim and
  volumeClaimTemplates (a directory per claim), owned as fsGroup says.
* `exec()` runs a command in a running container, as `kubectl exec` does
  (`attach()` keeps its stdin and stdout open, as `kubectl exec -i`);
  `port_forward()` leads a port of this machine's 127.0.0.1 to a port of a
  pod's own loopback, as `kubectl port-forward` does.
  Logs go to `<workdir>/logs/<namespace>_<pod>_<container>.log`.
* `stop()` sends SIGTERM to every container's process group, SIGKILL to
  what is left after 10 s, and removes the namespaces, veths and Service
  addresses; `start()` first removes what a crashed run left in its lane.
  Runners on one machine (xdist workers, two checkouts) each take one of
  `LANES` lanes, by a lock file per lane: a lane's names and addresses are
  its runner's alone; a fifth runner waits for a lane to come free.

Pods start all at once, as kubelets start them: one's init container may wait
for another pod. `update()` rewrites a changed ConfigMap or Secret in the volumes of running pods, as
the kubelet syncs them. `restart()` stops a container (SIGTERM, or SIGKILL) and starts
it again; `delete()` stops a pod and takes it out of its Services, as a
scale-down does, and `create()` brings it back; `roll()` replaces a pod by one of a
new template under its name, its claims kept, as a rolling update does;
`restart_exited()` restarts what exited, when a test asks, as a
kubelet would (after a CrashLoopBackOff's delay, if the test gives one).

What it does not do: pull images (an image is a local entrypoint and
config), probes (a running container counts as ready), restarts on its own, resource limits,
requests or GPUs, scheduling (pods get the fake nodes in turn),
NetworkPolicies, the Kubernetes API in pods (a projected ServiceAccount token is
a placeholder nothing accepts; no KUBERNETES_SERVICE_HOST or other service link
variables), hostPath or downwardAPI volumes, hostNetwork,
cert-manager. It needs root.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import ctypes
import fcntl
import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

Manifest = dict[str, Any]
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]

# Lane l (flower pod runner): netns fpr<l>-<n>, veths fpr<l>x<n>h/fpr<l>x<n>p, pods in
# 10.<214+l>.0.0/16, Service addresses (/32s on the host's loopback) in 10.<214+l>.255.0/24.
PREFIX = "fpr"
LANES = 4
LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset
FAKE_NODES = ("node-1", "node-2")
LOCKS = pathlib.Path(tempfile.gettempdir())  # flower-podrunner-<lane>.lock
# Host directories every container sees read-only, as an image's base would provide them.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WORKLOADS = ("StatefulSet", "Deployment", "DaemonSet", "Pod")
# Where a venv image holds its venv. Not the host path: a clone under /tmp would
# put it inside the /tmp every container gets empty, and a path with spaces
# cannot be a script's #! line.
VENV = "/opt/venv"
NGINX = "/opt/nginx"
# The helper processes run this module as it was imported, not as the file may read by then.
_SOURCE = pathlib.Path(__file__).read_text()


# What a projected ServiceAccount token holds here, and the ConfigMap of the cluster's CA every namespace has.
NO_API_TOKEN = "no-api-server-in-the-pod-runner"  # noqa: S105 - a placeholder, accepted nowhere
ROOT_CA = "kube-root-ca.crt"


@dataclass(frozen=True)
class Image:
    """An image as the runner knows it: its config, with the files from this machine."""

    entrypoint: tuple[str, ...]
    env: dict[str, str]
    working_dir: str = "/"
    user: tuple[int, int] = (0, 0)
    paths: tuple[str, ...] = ()  # host directories the image holds, bound read-only at the same place
    venv: str = ""  # a host venv the image holds at VENV, whatever the host path (under /tmp, with spaces)
    binds: tuple[tuple[str, str], ...] = ()  # (host directory, where the image holds it), read-only


def venv_image(bin_dir: pathlib.Path, entrypoint: tuple[str, ...] = (), **config: Any) -> Image:
    """An image holding a Python venv at VENV (on PATH first) and the installation its interpreter comes from.

    entrypoint names the venv's scripts by their name in bin_dir ("flower-superlink").
    """
    venv = bin_dir.absolute().parent
    cfg = dict(line.split("=", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if "=" in line)
    home = pathlib.Path({k.strip(): v.strip() for k, v in cfg.items()}["home"]).resolve().parent  # its bin's parent
    if _under(str(home), ["/tmp"]):  # the venv's python links there, and /tmp is the pod's own
        msg = f"{venv}: its interpreter lives under {home}, which every container sees as its own empty /tmp"
        raise ValueError(msg)
    env = {"PATH": f"{VENV}/bin:{SYSTEM_PATH}", **config.pop("env", {})}
    entry = tuple(f"{VENV}/bin/{e}" if "/" not in e else e for e in entrypoint)
    return Image(entry, env, paths=(str(home),), venv=str(venv), **config)


def nginx_image(root: pathlib.Path) -> Image:
    """nginx as its images hold it (`nginx` on PATH, user 101), from Debian's package unpacked at root.

    Bound at /opt/nginx whatever the host path, as a venv image's venv is.
    """
    return Image((), {"PATH": f"{NGINX}/usr/sbin:{SYSTEM_PATH}"}, user=(101, 101), binds=((str(root), NGINX),))


def flower_images(bin_dir: pathlib.Path, superexec_repositories: tuple[str, ...] = ()) -> dict[str, Image]:
    """Flower's images backed by one release's venv (bin_dir), configured as flwr/base is:
    user app (49999), HOME and workdir /app, unbuffered Python; the entrypoint per image."""
    env = {"HOME": "/app", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "UTF-8",
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}  # fmt: skip
    entry = {"flwr/superlink": "flower-superlink", "flwr/supernode": "flower-supernode"}
    entry |= dict.fromkeys(("flwr/superexec", *superexec_repositories), "flower-superexec")
    return {
        repo: venv_image(bin_dir, (exe,), env=env, working_dir="/app", user=(49999, 49999))
        for repo, exe in entry.items()
    }


def repository(image: str) -> str:
    """The image reference without its tag or digest."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is $, anything else stays."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        end = text.find(")", i + 2) if nxt == "(" else -1
        if nxt == "$":
            out.append("$")
        elif end != -1:
            name = text[i + 2 : end]
            out.append(env.get(name, f"$({name})"))
            i = end + 1
            continue
        else:  # "$(" without a ")" or "$x": kept as written
            out.append("$" + nxt)
        i += 2
    return "".join(out)


def unwrap(resource: Manifest) -> Manifest:
    """The Kubernetes manifest in a resource: a provider-kubernetes Object's forProvider.manifest, or itself."""
    if resource.get("kind") == "Object" and str(resource.get("apiVersion", "")).startswith("kubernetes."):
        return resource["spec"]["forProvider"]["manifest"]
    return resource


def _ns(manifest: Manifest) -> str:
    return manifest.get("metadata", {}).get("namespace") or "default"


@dataclass
class CrashLoopBackOff:
    """The kubelet's delay before it starts an exited container again: first, doubling at each exit, up to cap.

    The kubelet's is 10 s to 5 minutes (reset once a container ran 10 minutes); a
    test may cap it lower to wait less. Without it, a container that exits at once
    (a SuperNode whose key is not registered yet) restarts at every look, and its
    starts take the CPU the processes it waits for need.
    """

    first: float = 10.0
    cap: float = 300.0
    delays: dict[tuple[str, str, str], float] = field(default_factory=dict)
    waiting: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def due(self, container: tuple[str, str, str]) -> bool:
        """Whether an exited container (namespace, pod, name) starts again now; the first look starts its delay."""
        now = time.monotonic()
        if container not in self.waiting:
            self.waiting[container] = now + self.delays.get(container, self.first)
        if now < self.waiting[container]:
            return False
        del self.waiting[container]
        self.delays[container] = min(2 * self.delays.get(container, self.first), self.cap)
        return True


@dataclass
class Container:
    name: str
    popen: subprocess.Popen[bytes]
    log: pathlib.Path
    spec: dict[str, Any]  # what the helper got: rootfs, user, env, working directory

    def running(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Pod:
    name: str
    namespace: str
    metadata: Manifest  # the template's: labels, annotations
    spec: Manifest
    node: str
    index: int
    dir: pathlib.Path
    lane: int
    claims: dict[str, str] = field(default_factory=dict)  # volume name -> claim name (volumeClaimTemplates)
    volumes: dict[str, pathlib.Path] = field(default_factory=dict)  # volume name -> its directory
    subdomain: str = ""
    sandbox: subprocess.Popen[bytes] | None = None
    containers: dict[str, Container] = field(default_factory=dict)
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.lane}-{self.index}"

    @property
    def veth(self) -> str:
        """The veth pair's name, but for its end: h (the host's) or p (the pod's)."""
        return f"{PREFIX}{self.lane}x{self.index}"

    @property
    def host_ip(self) -> str:
        return f"{_lane_net(self.lane)}.{self.index // 64}.{self.index % 64 * 4 + 1}"

    @property
    def ip(self) -> str:
        return f"{_lane_net(self.lane)}.{self.index // 64}.{self.index % 64 * 4 + 2}"

    def running(self) -> bool:
        """Whether every container (init containers aside) runs."""
        names = [c["name"] for c in self.spec["containers"]]
        return all(n in self.containers and self.containers[n].running() for n in names)


class PodRunner:
    """Runs workloads as pods; see the module docstring. A context manager: stop() on exit."""

    def __init__(self, workdir: pathlib.Path, images: dict[str, Image], objects: Iterable[Manifest] = ()) -> None:
        self.workdir = workdir
        self.images = images
        self.objects: dict[tuple[str, str, str], Manifest] = {}
        for obj in objects:
            self._store(obj)
        self.pods: list[Pod] = []
        self.deleted: list[Pod] = []  # stopped by delete(); stop() still reaps what they left
        self.attached: list[subprocess.Popen[bytes]] = []  # attach()'s processes, stopped with the pods
        self.services: list[tuple[Manifest, str | None]] = []  # (Service, its address; None when headless)
        self._lock: TextIO | None = None
        self.lane = -1  # taken by start(): see LANES
        self._proxy: _Proxy | None = None
        self._forwards: dict[tuple[str, int], int] = {}  # (pod's netns, port) -> this machine's port
        self._venv_bins: dict[str, str] = {}  # host venv: its bin/ as the image holds it (scripts' #! at VENV)

    def __enter__(self) -> PodRunner:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _store(self, obj: Manifest) -> None:
        self.objects[obj["kind"], _ns(obj), obj["metadata"]["name"]] = obj

    # -- lifecycle ----------------------------------------------------------------

    def start(self, resources: list[Manifest]) -> None:
        """Plan every pod and Service first (addresses, names), then start them all."""
        self._take_lane()
        _cleanup_network(self.lane)
        for venv in sorted({image.venv for image in self.images.values() if image.venv} - set(self._venv_bins)):
            self._venv_bins[venv] = self._image_bin(venv, self.workdir / "images" / str(len(self._venv_bins)))
        manifests = [unwrap(r) for r in resources]
        for m in manifests:
            if m["kind"] in ("Secret", "ConfigMap"):
                self._store(m)
        for m in manifests:
            if m["kind"] in WORKLOADS:
                self._plan(m)
        services = [m for m in manifests if m["kind"] == "Service"]
        for i, svc in enumerate(services):
            self.services.append(
                (svc, None if svc["spec"].get("clusterIP") == "None" else f"{_service_net(self.lane)}.{i + 1}")
            )
        self._network()
        # All at once, as kubelets do: a pod's init container may wait for another pod.
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(self.pods))) as pool:
            for future in [pool.submit(self._start_pod, pod) for pod in self.pods]:
                future.result()

    def stop(self) -> None:
        """Kill everything, then remove the network; safe to call more than once."""
        if self._lock is None:
            return
        pods = [*self.pods, *self.deleted]
        procs = [p for pod in pods for p in [pod.sandbox, *(c.popen for c in pod.containers.values())] if p]
        procs += self.attached
        for proc in procs:  # each container's process group: what it spawned goes with it
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            any(p.poll() is None for p in procs) or any(_netns_pids(pod.netns) for pod in pods)
        ):
            time.sleep(0.1)
        if self._proxy:
            self._proxy.stop()
            self._forwards.clear()
        _cleanup_network(self.lane)  # SIGKILL for whatever is left in the pods' namespaces
        for proc in procs:
            proc.wait()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()
        self._lock = None

    def _take_lane(self, timeout: float = 900) -> None:
        """The first free lane; whoever holds a lane's lock owns its names, so leftovers there are dead."""
        deadline = time.monotonic() + timeout
        while True:
            for lane in range(LANES):
                lock = (LOCKS / f"flower-podrunner-{lane}.lock").open("a")
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    lock.close()
                else:
                    self._lock, self.lane = lock, lane
                    return
            if time.monotonic() > deadline:
                msg = f"no pod runner lane came free in {timeout:.0f} s: {LANES} runners hold them"
                raise TimeoutError(msg)
            time.sleep(0.5)

    # -- planning -----------------------------------------------------------------

    def _plan(self, workload: Manifest) -> None:
        kind, meta, spec = workload["kind"], workload["metadata"], workload.get("spec") or {}
        if kind == "Pod":
            self._add_pod(meta["name"], _ns(workload), meta, spec)
            return
        template = spec["template"]
        name = meta["name"]
        if kind == "DaemonSet":
            for node in FAKE_NODES:
                self._add_pod(f"{name}-{node}", _ns(workload), template.get("metadata") or {}, template["spec"], node)
            return
        for i in range(spec.get("replicas", 1)):
            pod = self._add_pod(f"{name}-{i}", _ns(workload), template.get("metadata") or {}, template["spec"])
            if kind == "StatefulSet":
                pod.subdomain = spec.get("serviceName", "")
                for claim in spec.get("volumeClaimTemplates") or []:
                    pod.claims[claim["metadata"]["name"]] = f"{claim['metadata']['name']}-{name}-{i}"

    def _add_pod(self, name: str, namespace: str, metadata: Manifest, spec: Manifest, node: str = "") -> Pod:
        if spec.get("hostNetwork"):
            msg = f"pod {name}: hostNetwork is not supported"
            raise NotImplementedError(msg)
        index = len(self.pods)
        node = spec.get("nodeName") or node or FAKE_NODES[index % len(FAKE_NODES)]
        pod = Pod(
            name, namespace, metadata, spec, node, index, self.workdir / "pods" / f"{namespace}_{name}", self.lane
        )
        self.pods.append(pod)
        return pod

    def _network(self) -> None:
        """Each pod's namespace and veth, the Services' addresses and forwarders."""
        host = []
        for pod in self.pods:
            host += [
                f"netns add {pod.netns}",
                f"link add {pod.veth}h type veth peer name {pod.veth}p netns {pod.netns}",
                f"addr add {pod.host_ip}/30 dev {pod.veth}h",
                f"link set {pod.veth}h up",
            ]
        host += [f"addr add {ip}/32 dev lo" for _, ip in self.services if ip]
        _ip_batch(host)
        for pod in self.pods:
            _ip_batch(
                [f"link set {pod.veth}p name eth0", f"addr add {pod.ip}/30 dev eth0", "link set eth0 up",
                 "link set lo up", f"route add default via {pod.host_ip}"],
                netns=pod.netns,
            )  # fmt: skip
        self._proxy = _Proxy()
        for svc, ip in self.services:
            for port in svc["spec"].get("ports") or [] if ip else []:
                if port.get("protocol", "TCP") == "TCP":
                    self._proxy.listen(ip, port["port"], self._endpoints(svc, port))

    def _selected(self, svc: Manifest) -> list[Pod]:
        selector = svc["spec"].get("selector") or {}
        return [
            p
            for p in self.pods
            if selector and p.namespace == _ns(svc) and all(p.labels.get(k) == v for k, v in selector.items())
        ]

    def _endpoints(self, svc: Manifest, port: Manifest) -> Callable[[], list[tuple[str, int]]]:
        target = port.get("targetPort", port["port"])

        def endpoints() -> list[tuple[str, int]]:
            out = []
            for pod in self._selected(svc):
                ports = {p.get("name"): p["containerPort"] for c in pod.spec["containers"] for p in c.get("ports", [])}
                number = target if isinstance(target, int) else ports.get(target)
                if pod.running() and number:
                    out.append((pod.ip, int(number)))
            return out

        return endpoints

    def _hosts(self, pod: Pod) -> str:
        """The pod's /etc/hosts: itself as the kubelet writes it, and every Service in place of cluster DNS."""
        own = [pod.name]
        if pod.subdomain:
            own.insert(0, f"{pod.name}.{pod.subdomain}.{pod.namespace}.svc.cluster.local")
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", f"{pod.ip}\t{' '.join(own)}"]
        for svc, ip in self.services:
            name, ns = svc["metadata"]["name"], _ns(svc)
            names = [f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}.svc", f"{name}.{ns}"]
            names += [name] if ns == pod.namespace else []
            addresses = [ip] if ip else [p.ip for p in self._selected(svc)]
            lines += [f"{address}\t{' '.join(names)}" for address in addresses]
            if not ip:  # headless: a StatefulSet's pods under their governing Service
                lines += [
                    f"{p.ip}\t{p.name}.{name}.{ns}.svc.cluster.local {p.name}.{name}.{ns}.svc {p.name}.{name}.{ns}"
                    for p in self._selected(svc)
                    if p.subdomain == name
                ]
        return "\n".join(lines) + "\n"

    # -- pods -----------------------------------------------------------------------

    def _start_pod(self, pod: Pod) -> None:
        pod.dir.mkdir(parents=True, exist_ok=True)
        (pod.dir / "hosts").write_text(self._hosts(pod))
        # No resolver: names outside the cluster fail at once, as nothing answers on the pod's own port 53.
        # (Otherwise every lookup, e.g. of Flower's telemetry host, waits out the host resolver's timeouts.)
        (pod.dir / "resolv.conf").write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:1\n")
        memory = self._volumes(pod)
        spec = {"netns": pod.netns, "hostname": pod.name, "memory": memory}
        with (pod.dir / "sandbox.log").open("ab") as log:
            pod.sandbox = _helper("sandbox", spec, pod.dir / "sandbox.json", stdout=log, stderr=log)
        if pod.sandbox.poll() is not None:
            msg = f"pod {pod.name}: its sandbox failed:\n{_tail(pod.dir / 'sandbox.log')}"
            raise RuntimeError(msg)
        for c in pod.spec.get("initContainers") or []:
            container = self._start_container(pod, c)
            if c.get("restartPolicy") == "Always":
                continue  # a native sidecar: it keeps running beside the containers
            if container.popen.wait(timeout=300) != 0:
                msg = f"init container {pod.name}/{c['name']} failed:\n{_tail(container.log)}"
                raise RuntimeError(msg)
        for c in pod.spec["containers"]:
            self._start_container(pod, c)

    def _volumes(self, pod: Pod) -> list[list[Any]]:
        """Fill each volume's directory; returns the emptyDirs in memory, for the sandbox to mount."""
        fs_group = (pod.spec.get("securityContext") or {}).get("fsGroup")
        memory: list[list[Any]] = []
        volumes = list(pod.spec.get("volumes") or [])
        volumes += [{"name": v, "persistentVolumeClaim": {"claimName": c}} for v, c in pod.claims.items()]
        for v in volumes:
            path = pod.dir / "volumes" / v["name"]
            if "persistentVolumeClaim" in v:  # the claim's directory outlives the pod, as a volume would
                path = self.workdir / "claims" / pod.namespace / v["persistentVolumeClaim"]["claimName"]
            pod.volumes[v["name"]] = path
            path.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in v:
                path.chmod(0o777)
                if (v["emptyDir"] or {}).get("medium") == "Memory":
                    memory.append([str(path), 0o2777 if fs_group is not None else 0o777, fs_group or 0])
                else:
                    self._own(path, fs_group, read_only=False)
            elif "persistentVolumeClaim" in v:
                self._own(path, fs_group, read_only=False)
            else:
                sources = v["projected"]["sources"] if "projected" in v else [v]
                default = (v.get("projected") or v.get("secret") or v.get("configMap") or {}).get("defaultMode", 0o644)
                for source in sources:
                    self._project(pod, source, path, default)
                self._own(path, fs_group, read_only=True)
        return memory

    def _project(self, pod: Pod, source: Manifest, path: pathlib.Path, default_mode: int) -> set[pathlib.Path]:
        """A secret or configMap source's keys as files (items pick and rename them): the files written.

        A ServiceAccount token: the runner has no API server, so the file holds
        a token nothing accepts, and pods get no KUBERNETES_SERVICE_HOST to use it.
        """
        if "serviceAccountToken" in source:
            file = path / source["serviceAccountToken"]["path"]
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(NO_API_TOKEN)
            file.chmod(default_mode)
            return {file}
        kind = next((k for k in ("secret", "configMap") if k in source), None)
        if kind is None:
            msg = f"pod {pod.name}: volume source {sorted(source)} is not supported"
            raise NotImplementedError(msg)
        ref = source[kind]
        name = ref.get("secretName") or ref.get("name", "")
        data = self._data(kind, pod.namespace, name, optional=bool(ref.get("optional")))
        written = set()
        for item in ref.get("items") or [{"key": k, "path": k} for k in data]:
            if item["key"] not in data:
                if ref.get("optional"):
                    continue
                msg = f"pod {pod.name}: {kind} {name} has no key {item['key']}"
                raise KeyError(msg)
            file = path / item["path"]
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(data[item["key"]])
            file.chmod(item.get("mode", default_mode))
            written.add(file)
        return written

    def _data(self, kind: str, namespace: str, name: str, *, optional: bool = False) -> dict[str, bytes]:
        """A Secret's or ConfigMap's data, decoded; kind as a volume or reference names it."""
        secret = kind.lower().startswith("secret")
        obj = self.objects.get(("Secret" if secret else "ConfigMap", namespace, name))
        if obj is None and not secret and name == ROOT_CA:
            # Every namespace has one (the cluster's CA); the runner has no cluster, so no CA in it.
            return {"ca.crt": b""}
        if obj is None:
            if optional:
                return {}
            msg = f"{'Secret' if secret else 'ConfigMap'} {namespace}/{name} does not exist"
            raise KeyError(msg)
        if secret:
            out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            return out | {k: v.encode() for k, v in (obj.get("stringData") or {}).items()}
        out = {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        return out | {k: v.encode() for k, v in (obj.get("data") or {}).items()}

    @staticmethod
    def _own(path: pathlib.Path, fs_group: int | None, *, read_only: bool) -> None:
        """What the kubelet does with fsGroup: the group owns it, and may read (and write)."""
        if fs_group is None:
            return
        for p in [path, *path.rglob("*")]:
            os.chown(p, -1, fs_group)
            mask = 0o440 if read_only else 0o660
            if p.is_dir():
                mask |= stat.S_ISGID | 0o110
            p.chmod(stat.S_IMODE(p.stat().st_mode) | mask)

    # -- containers ---------------------------------------------------------------------

    def _start_container(self, pod: Pod, c: Manifest) -> Container:
        image = self._image(c["image"])
        env = self._env(pod, c)
        command = [expand(x, env) for x in c.get("command") or []]
        args = [expand(x, env) for x in c.get("args") or []]
        argv = [*command, *args] if command else [*image.entrypoint, *args]
        pod_sc, sc = pod.spec.get("securityContext") or {}, c.get("securityContext") or {}
        uid = sc.get("runAsUser", pod_sc.get("runAsUser", image.user[0]))
        gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", image.user[1]))
        if uid == 0 and sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            msg = f"pod {pod.name}/{c['name']}: runAsNonRoot, and it would run as root"
            raise RuntimeError(msg)
        groups = [g for g in [pod_sc.get("fsGroup"), *pod_sc.get("supplementalGroups", [])] if g is not None]
        rootfs, layers = pod.dir / "rootfs" / c["name"], pod.dir / "rootfs" / f"{c['name']}.layers"
        rootfs.mkdir(parents=True, exist_ok=True)
        layers.mkdir(exist_ok=True)
        spec = {
            "sandbox": pod.sandbox.pid if pod.sandbox else 0,
            "rootfs": str(rootfs),
            "hosts": str(pod.dir / "hosts"),
            "resolv.conf": str(pod.dir / "resolv.conf"),
            "layers": str(layers),
            "paths": list(image.paths),
            # The venv where the image holds it, its bin/ (scripts' #! lines) over it.
            "binds": [
                *([[image.venv, VENV], [self._venv_bins[image.venv], f"{VENV}/bin"]] if image.venv else []),
                *(list(b) for b in image.binds),
            ],
            "mounts": self._mounts(pod, c),
            "read_only_root": bool(sc.get("readOnlyRootFilesystem")),
            "working_dir": c.get("workingDir") or image.working_dir,
            "image_dir": image.working_dir,
            "image_user": list(image.user),
            "user": [uid, gid, groups],
            "no_new_privs": sc.get("allowPrivilegeEscalation") is False,
            "argv": argv,
            "env": {**image.env, "HOSTNAME": pod.name, **env},
        }
        log = self.workdir / "logs" / f"{pod.namespace}_{pod.name}_{c['name']}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            popen = _helper("container", spec, pod.dir / f"{c['name']}.json", stdout=out, stderr=out)
        container = Container(c["name"], popen, log, spec)
        pod.containers[c["name"]] = container
        return container

    @staticmethod
    def _image_bin(venv: str, into: pathlib.Path) -> str:
        """A copy of the venv's bin/ whose scripts name the venv where the image holds it.

        pip writes the venv's own path into each script's #! line (or, when
        it has spaces, into a shell line that execs it), as links may be.
        """
        host, held = venv.encode(), VENV.encode()
        into.mkdir(parents=True)
        for entry in sorted(pathlib.Path(venv, "bin").iterdir()):
            target = into / entry.name
            if entry.is_symlink():
                link = os.readlink(entry)
                target.symlink_to(VENV + link[len(venv) :] if _under(link, [venv]) else link)
            elif entry.is_file():
                data = entry.read_bytes()
                target.write_bytes(data.replace(host, held) if data.startswith(b"#!") else data)
                target.chmod(stat.S_IMODE(entry.stat().st_mode))
        return str(into)

    def _image(self, image: str) -> Image:
        # A full reference (flwr/supernode:1.25.0) first: pods of several releases side by side.
        try:
            return self.images.get(image) or self.images[repository(image)]
        except KeyError:
            msg = f"no entrypoint for image {image}; known repositories: {sorted(self.images)}"
            raise KeyError(msg) from None

    def _mounts(self, pod: Pod, c: Manifest) -> list[dict[str, Any]]:
        out = []
        for m in c.get("volumeMounts") or []:
            if "subPathExpr" in m:
                msg = f"pod {pod.name}: subPathExpr is not supported"
                raise NotImplementedError(msg)
            volume = pod.volumes[m["name"]]
            source = volume / m["subPath"] if m.get("subPath") else volume
            if not source.exists():  # as the kubelet does: a subPath directory like its volume
                source.mkdir(parents=True)
                source.chmod(stat.S_IMODE(volume.stat().st_mode))
                os.chown(source, -1, volume.stat().st_gid)
            out.append({"source": str(source), "target": m["mountPath"], "read_only": bool(m.get("readOnly"))})
        return sorted(out, key=lambda m: m["target"].rstrip("/").count("/"))

    def _env(self, pod: Pod, c: Manifest) -> dict[str, str]:
        """The container's env (envFrom, then env, each value expanded against the ones before it)."""
        env: dict[str, str] = {}
        for source in c.get("envFrom") or []:
            kind = "secret" if "secretRef" in source else "configMap"
            ref = source.get("secretRef") or source.get("configMapRef") or {}
            data = self._data(kind, pod.namespace, ref["name"], optional=bool(ref.get("optional")))
            env |= {source.get("prefix", "") + k: v.decode() for k, v in data.items()}
        for var in c.get("env") or []:
            value = self._value_from(pod, var["valueFrom"]) if "valueFrom" in var else expand(var.get("value", ""), env)
            if value is not None:
                env[var["name"]] = value
        return env

    def _value_from(self, pod: Pod, source: Manifest) -> str | None:
        for kind in ("secretKeyRef", "configMapKeyRef"):
            if kind in source:
                ref = source[kind]
                data = self._data(kind, pod.namespace, ref["name"], optional=bool(ref.get("optional")))
                if ref["key"] not in data and not ref.get("optional"):
                    msg = f"pod {pod.name}: {kind} {ref['name']} has no key {ref['key']}"
                    raise KeyError(msg)
                return data[ref["key"]].decode() if ref["key"] in data else None
        if "fieldRef" not in source:
            msg = f"pod {pod.name}: valueFrom {sorted(source)} is not supported"
            raise NotImplementedError(msg)
        return self._field(pod, source["fieldRef"]["fieldPath"])

    @staticmethod
    def _field(pod: Pod, path: str) -> str:
        keyed = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if keyed:
            return (pod.metadata.get(keyed.group(1)) or {}).get(keyed.group(2), "")
        fields = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "metadata.uid": pod.uid,
            "spec.nodeName": pod.node,
            "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
            "status.podIP": pod.ip,
            "status.podIPs": pod.ip,
            "status.hostIP": pod.host_ip,
            "status.hostIPs": pod.host_ip,
        }
        if path not in fields:
            msg = f"fieldRef {path} is not supported"
            raise NotImplementedError(msg)
        return fields[path]

    def update(self, obj: Manifest) -> None:
        """Store a changed ConfigMap or Secret and rewrite it where running pods mount it, as the kubelet syncs."""
        self._store(obj)
        self._sync(obj["kind"], _ns(obj), obj["metadata"]["name"])

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Delete a ConfigMap or Secret: the kubelet takes its files out of the (optional) volumes that mount it."""
        self.objects.pop((kind, namespace, name), None)
        self._sync(kind, namespace, name)

    def _sync(self, kind: str, namespace: str, name: str) -> None:
        """Project again every volume of a running pod that mounts that object: its files as they now are, no others."""
        for pod in self.pods:
            if pod.namespace != namespace:
                continue
            for v in pod.spec.get("volumes") or []:
                sources = v["projected"]["sources"] if "projected" in v else [v]
                refs = [source.get("configMap") if kind == "ConfigMap" else source.get("secret") for source in sources]
                if not any(ref is not None and (ref.get("name") or ref.get("secretName")) == name for ref in refs):
                    continue
                default = (v.get("projected") or v.get("secret") or v.get("configMap") or {}).get("defaultMode", 0o644)
                path = pod.volumes[v["name"]]
                before = {p for p in path.iterdir() if p.is_file()}
                written: set[pathlib.Path] = set()
                for source in sources:
                    written |= self._project(pod, source, path, default)
                for stale in before - written:
                    stale.unlink()

    def restart(self, namespace: str, pod: str, container: str, *, kill: bool = False) -> None:
        """Stop a container's process (SIGTERM, or SIGKILL with kill) and start it again, as a kubelet restart."""
        target = self.pod(namespace, pod)
        self._halt([target.containers[container].popen], kill=kill)
        spec = next(
            c for c in [*target.spec.get("initContainers", []), *target.spec["containers"]] if c["name"] == container
        )
        self._start_container(target, spec)

    def restart_exited(self, backoff: CrashLoopBackOff | None = None) -> list[str]:
        """Start again every container that exited, as a kubelet does for workload pods (restartPolicy Always).

        With backoff, a container that keeps exiting waits longer each time before it starts again.
        """
        restarted = []
        for pod in list(self.pods):
            for c in pod.spec["containers"]:
                container = pod.containers.get(c["name"])
                if container is None or container.running():
                    continue
                if backoff is None or backoff.due((pod.namespace, pod.name, c["name"])):
                    restarted.append(f"{pod.namespace}/{pod.name}/{c['name']}: exit {container.popen.returncode}")
                    self._start_container(pod, c)
        return restarted

    def delete(self, namespace: str, pod: str) -> None:
        """Stop a pod's containers and drop it: Services no longer send it anything (a scaled-down replica)."""
        target = self.pod(namespace, pod)
        self._halt([c.popen for c in target.containers.values()], kill=False)
        self.pods.remove(target)
        self.deleted.append(target)

    def create(self, namespace: str, pod: str) -> None:
        """Start a deleted pod again under its name, as a StatefulSet's controller brings a replica back on
        scale-up: a new pod (uid, sandbox, empty emptyDirs), its claims as the old one left them."""
        target = next(p for p in self.deleted if (p.namespace, p.name) == (namespace, pod))
        if target.sandbox is not None:
            self._halt([target.sandbox], kill=True)
        shutil.rmtree(target.dir / "volumes", ignore_errors=True)
        self.deleted.remove(target)
        target.containers.clear()
        target.uid = str(uuid.uuid4())
        self.pods.append(target)
        self._start_pod(target)

    def roll(self, namespace: str, pod: str, template: Manifest) -> None:
        """Replace a pod by one of a new pod template (its metadata and spec) under the same name, as a
        workload's rolling update does: the old one stopped (SIGTERM) and dropped, then a new pod (uid,
        sandbox, empty emptyDirs) of the template started, with the old one's claims as it left them (a
        StatefulSet's volumeClaimTemplates are the workload's, not the template's: they stay)."""
        self.delete(namespace, pod)
        target = next(p for p in reversed(self.deleted) if (p.namespace, p.name) == (namespace, pod))
        target.metadata, target.spec = template.get("metadata") or {}, template["spec"]
        self.create(namespace, pod)

    @staticmethod
    def _halt(procs: list[subprocess.Popen[bytes]], *, kill: bool) -> None:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    # -- what tests ask -------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> Pod:
        return next(p for p in self.pods if (p.namespace, p.name) == (namespace, name))

    def port_forward(self, namespace: str, pod: str, port: int) -> int:
        """As `kubectl port-forward`: a port on this machine's 127.0.0.1 leading to port on the pod's loopback.

        What the kubelet reaches for it is the pod's own network namespace, so a
        process bound to 127.0.0.1 there answers, as no other pod's could.
        """
        if self._proxy is None:
            msg = "port_forward() before start()"
            raise RuntimeError(msg)
        # One forward per pod port, asked for again by every probe: it opens the pod's namespace by
        # its path at each connection, so it holds across a pod's restarts and re-creations.
        target = (f"/var/run/netns/{self.pod(namespace, pod).netns}", port)
        if target not in self._forwards:
            self._forwards[target] = self._proxy.forward(*target)
        return self._forwards[target]

    def _exec_spec(self, namespace: str, pod: str, container: str, argv: list[str]) -> tuple[Container, Manifest]:
        """A running container and the exec helper's spec for argv in it (its namespaces, root, user and env)."""
        target = self.pod(namespace, pod).containers[container]
        if not target.running():
            msg = f"{namespace}/{pod}/{container} is not running:\n{_tail(target.log)}"
            raise RuntimeError(msg)
        return target, {**target.spec, "target": target.popen.pid, "argv": argv}

    def exec(
        self, namespace: str, pod: str, container: str, argv: list[str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in a running container (its namespaces, root, user and env), as `kubectl exec` does."""
        target, spec = self._exec_spec(namespace, pod, container, argv)
        path = target.log.with_suffix(".exec.json")
        proc = _helper("exec", spec, path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(
            argv, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )

    def attach(self, namespace: str, pod: str, container: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start argv in a running container with its stdin and stdout piped to the caller, as
        `kubectl exec -i` does; it ends with the container (its stderr goes to the container's log)."""
        target, spec = self._exec_spec(namespace, pod, container, argv)
        path = target.log.with_suffix(".attach.json")
        with target.log.open("ab") as log:
            proc = _helper("exec", spec, path, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.PIPE)
        self.attached.append(proc)
        return proc

    def exited(self) -> list[str]:
        """Containers (init containers that ran to completion aside) that are no longer running."""
        return [
            f"{p.namespace}/{p.name}/{n}: exit {c.popen.returncode}"
            for p in self.pods
            for n, c in p.containers.items()
            if not c.running() and any(n == x["name"] for x in p.spec["containers"])
        ]

    def logs(self, lines: int = 25) -> str:
        return "\n".join(
            f"== {p.namespace}/{p.name}/{n}\n{_tail(c.log, lines)}" for p in self.pods for n, c in p.containers.items()
        )


def _tail(path: pathlib.Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- the host's network ---------------------------------------------------------------


def _ip_batch(commands: list[str], netns: str = "") -> None:
    args = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    proc = subprocess.run(args, input="\n".join(commands) + "\n", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"ip {netns}: {proc.stderr.strip()}"
        raise RuntimeError(msg)


def _netns_pids(netns: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
    return [int(p) for p in proc.stdout.split()]


def _lane_net(lane: int) -> str:
    """The lane's /16: 10.<214+lane>."""
    return f"10.{214 + lane}"


def _service_net(lane: int) -> str:
    return f"{_lane_net(lane)}.255"


def _cleanup_network(lane: int) -> None:
    """Every network namespace (its processes killed first), veth and Service address of the lane."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for name in [line.split()[0] for line in listed.splitlines() if line.startswith(f"{PREFIX}{lane}-")]:
        for pid in _netns_pids(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for match in re.finditer(rf"^\d+: ({PREFIX}{lane}x[0-9]+h)@", links, re.MULTILINE):
        subprocess.run(["ip", "link", "del", match.group(1)], capture_output=True, check=False)
    addresses = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=False)
    for address in re.findall(rf"inet ({re.escape(_service_net(lane))}\.\d+/32)", addresses.stdout):
        subprocess.run(["ip", "addr", "del", address, "dev", "lo"], capture_output=True, check=False)


class _Proxy:
    """Service address:port -> a pod's address:targetPort, one asyncio loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.servers: list[asyncio.Server] = []
        self.turn = itertools.count()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def listen(self, ip: str, port: int, endpoints: Callable[[], list[tuple[str, int]]]) -> None:
        """Service ip:port: each connection to a ready pod the endpoints name, in turn."""
        self._serve(ip, port, lambda: self._connect(endpoints()))

    def forward(self, netns: str, port: int) -> int:
        """A port of this machine's 127.0.0.1 (returned) leading to port on the loopback of netns."""
        return self._serve("127.0.0.1", 0, lambda: self._connect_in(netns, port))

    def _serve(self, ip: str, port: int, connect: Callable[[], Awaitable[Connection | None]]) -> int:
        """Accept on ip:port (0: any free one), piping each connection to what connect() opens; the port."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Cancelled at stop(): end quietly, or asyncio reports the handler's task as failed.
            with contextlib.suppress(asyncio.CancelledError):
                upstream = await connect()
                if not upstream:
                    # No pod took it: a reset, as a client of kube-proxy would see a refusal. A plain close
                    # would look like a server that hung up mid-handshake (Flower 1.41 gives up on that).
                    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
                    writer.transport.abort()
                    return
                await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
                upstream[1].close()
            writer.close()

        future = asyncio.run_coroutine_threadsafe(asyncio.start_server(handle, ip, port), self.loop)
        server = future.result(timeout=10)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _connect(self, candidates: list[tuple[str, int]]) -> Connection | None:
        """A connection to one of the pods, in turn; one that refuses is skipped."""
        start = next(self.turn)
        for i in range(len(candidates)):
            host, port = candidates[(start + i) % len(candidates)]
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                return await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        return None

    async def _connect_in(self, netns: str, port: int) -> Connection | None:
        """A connection to port on the loopback of netns, or None when nothing answers there."""
        sock = _socket_in(netns)
        sock.settimeout(0)  # non-blocking, as the loop needs it
        try:
            await asyncio.wait_for(self.loop.sock_connect(sock, ("127.0.0.1", port)), 5)
        except OSError:  # refused, or TimeoutError (an OSError) from wait_for
            sock.close()
            return None
        return await asyncio.open_connection(sock=sock)

    async def _shutdown(self) -> None:
        for server in self.servers:
            server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def _socket_in(netns: str) -> socket.socket:
    """A TCP socket of another network namespace: made there by this thread, which then comes back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _sys(_libc.setns(target, CLONE_NEWNET), "setns net")
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # it stays in the namespace it was made in
        finally:
            _sys(_libc.setns(own, CLONE_NEWNET), "setns net back")
    finally:
        os.close(own)
        os.close(target)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # pass a half-close on


# -- the helper: this file, run as root, becomes a pod's sandbox or container ---------------


def _helper(
    mode: str, spec: dict[str, Any], path: pathlib.Path, stdout: Any, stderr: Any, stdin: Any = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """This module as a process of its own (a new session, so its process group can be killed).

    Returns once the helper is ready (or died): a sandbox when its namespaces
    are set up, a container or exec once it has become its command. The write
    end of a pipe closes then (at exec, it is close-on-exec), so a container is
    "started" as in Kubernetes and `exec()` finds its root in place.
    """
    path.write_text(json.dumps(spec))
    helper = path.parent / "podrunner-helper.py"
    if not helper.exists():
        helper.write_text(_SOURCE)
    started, child_end = os.pipe()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", str(helper), mode, str(path), str(child_end)],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=(child_end,),
        )
    finally:
        os.close(child_end)
    os.read(started, 1)
    os.close(started)
    return popen


CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWNET = 0x00020000, 0x04000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)


def _sys(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    b = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _sys(_libc.mount(b[0], b[1], b[2], ctypes.c_ulong(flags), b[3]), f"mount {target}")


def _join(pid: int, kinds: tuple[str, ...]) -> None:
    fds = [os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY) for kind in kinds]  # all opened before any is joined
    for kind, fd in zip(kinds, fds, strict=True):
        _sys(_libc.setns(fd, 0), f"setns {kind}")
        os.close(fd)


def _sandbox(spec: dict[str, Any], started: int) -> None:
    """The pod's namespaces (like its pause container): network, hostname, shared memory volumes."""
    fd = os.open(f"/var/run/netns/{spec['netns']}", os.O_RDONLY)
    _sys(_libc.setns(fd, CLONE_NEWNET), "setns net")
    _sys(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    name = spec["hostname"].encode()
    _sys(_libc.sethostname(name, len(name)), "sethostname")
    for path, mode, gid in spec["memory"]:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o},gid={gid}")
    os.close(started)  # ready
    while True:
        signal.pause()


def _under(path: str, roots: list[str]) -> str | None:
    """The first of roots that is path or one of its parents."""
    return next((r for r in roots if path == r or path.startswith(r.rstrip("/") + "/")), None)


def _bind(source: str, target: str, *, read_only: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


class _Root:
    """A container's root filesystem, built in its own mount namespace: a tmpfs with host directories bound in."""

    def __init__(self, path: str, layers: str) -> None:
        self.path, self.layers = path, layers
        self.host: list[str] = []  # host directories bound read-only
        self.overlaid: list[str] = []
        for tmpfs in (path, layers):
            _mount("tmpfs", tmpfs, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")

    def bind_host(self, d: str, *, read_only: bool = True) -> None:
        if os.path.islink(d):  # /bin -> usr/bin
            os.symlink(os.readlink(d), self.path + d)
            return
        _bind(d, self.point(d, is_dir=True), read_only=read_only)
        self.host.append(d)

    def point(self, target: str, *, is_dir: bool) -> str:
        """The path of target in the root, created if missing.

        A mount point inside a host directory (/etc/flower) is made on an
        overlay of it whose upper layer is a tmpfs: the host stays untouched.
        """
        path = self.path + target
        if os.path.lexists(path):
            return path
        base = _under(target, self.host)
        if base in ("/dev", "/proc", "/sys"):
            msg = f"cannot create {target} in the host's {base}"
            raise RuntimeError(msg)
        if base and base not in self.overlaid:
            upper, work = f"{self.layers}{base}/upper", f"{self.layers}{base}/work"
            os.makedirs(upper)
            os.makedirs(work)
            _mount("overlay", self.path + base, "overlay", 0, f"lowerdir={base},upperdir={upper},workdir={work}")
            self.overlaid.append(base)
        os.makedirs(path if is_dir else os.path.dirname(path), exist_ok=True)
        if not is_dir:
            pathlib.Path(path).touch()
        return path

    def seal(self, *, read_only_root: bool) -> None:
        """Host directories read-only again; the root itself as readOnlyRootFilesystem says."""
        for d in self.overlaid:
            _mount(None, self.path + d, None, MS_REMOUNT | MS_RDONLY)
        if read_only_root:
            _mount(None, self.path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _rootfs(spec: dict[str, Any]) -> None:
    """The container's root: the host's system directories, the image's paths and dirs, the volumes."""
    root = _Root(spec["rootfs"], spec["layers"])
    for d in [f"/{d}" for d in SYSTEM_DIRS if os.path.lexists(f"/{d}")]:
        root.bind_host(d)
    for d in spec["paths"]:
        if not _under(d, root.host):
            root.bind_host(d)
    for source, target in spec["binds"]:
        _bind(source, root.point(target, is_dir=True), read_only=True)
    for d, read_only in (("/dev", False), ("/proc", False), ("/sys", True)):
        root.bind_host(d, read_only=read_only)
    _mount("tmpfs", root.path + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    # What the image holds: /tmp, and its working directory, owned by its user (flwr/base: /app, by app).
    os.chmod(root.point("/tmp", is_dir=True), 0o1777)  # noqa: S103 - /tmp as every image has it
    if not os.path.lexists(root.path + spec["image_dir"]):
        os.chown(root.point(spec["image_dir"], is_dir=True), *spec["image_user"])
    for m in spec["mounts"]:
        target = root.point(m["target"], is_dir=os.path.isdir(m["source"]))
        _bind(m["source"], target, read_only=m["read_only"])
    for name in ("hosts", "resolv.conf"):  # the kubelet's files, mounted last as it does
        _bind(spec[name], root.point(f"/etc/{name}", is_dir=False), read_only=False)
    root.point(spec["working_dir"], is_dir=True)  # as runc: a missing workingDir is made
    root.seal(read_only_root=spec["read_only_root"])


def _become(spec: dict[str, Any]) -> None:
    """Enter the root, the working directory and the user, then be the command."""
    os.chroot(spec["rootfs"])
    os.chdir(spec["working_dir"])
    if spec["no_new_privs"]:
        _sys(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    uid, gid, groups = spec["user"]
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])  # noqa: S606 - the container's own command, no shell


def _main(mode: str, path: str, started: int) -> None:
    spec = json.loads(pathlib.Path(path).read_text())
    fcntl.fcntl(started, fcntl.F_SETFD, fcntl.FD_CLOEXEC)  # closed by the exec of the command
    if mode == "sandbox":
        _sandbox(spec, started)
    elif mode == "container":
        _join(spec["sandbox"], ("net", "uts", "mnt"))
        _sys(_libc.unshare(CLONE_NEWNS), "unshare")
        _rootfs(spec)
        _become(spec)
    elif mode == "exec":
        _join(spec["target"], ("net", "uts", "mnt"))
        _become(spec)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
