"""The program that gives each SuperNode its own identity and keeps it registered.

It runs inside the Flower images (their Python, their `cryptography`, their
`flwr` CLI), started as `python -c <this file> <mode> ...` with fixed
arguments: no shell, no user text. Standard library and `cryptography` only,
Python 3.10 and later, as every supported Flower image has them.

Modes:

* `identity` (a SuperNode pod's init container): make the SuperNode's key pair
  in its identity volume unless one is there (P-384, OpenSSH format, the
  private key readable by its owner alone), then register the public key with
  the SuperLink's Control API until the SuperLink has it. The SuperNode starts
  only after that, so it is never refused for a key the SuperLink does not know.
* `keep` (a SuperNode pod's sidecar): register the key again every interval.
  A key the SuperLink knows is refused as already in use, which is the answer
  wanted; a SuperLink that lost its registrations (no --database) gets it back.
* `reap` (the SuperLink pod's sidecar): unregister every SuperNode that has been
  offline, or registered and never online, for longer than the grace period:
  the keys of replicas and pools that are gone. A SuperNode back within the
  grace period keeps its node ID; one back later joins under a new key (below).

Flower never takes back an unregistered key: registering it again is refused
as already in use, and a SuperNode holding it is refused for good. So each
registration's node ID is kept beside the key, and when the key is in use
`identity` and `keep` ask (the init container at once, the sidecar every few intervals)
whether that node was unregistered, by the reaper or by hand: then the key is
replaced by a new pair, which registers as a new node, and the SuperNode,
refused under its old key and restarted by the kubelet, joins with it.

Each pod also publishes its public key through the Kubernetes API of its own
cluster, proving by Kubernetes' authorization that the key belongs to one of
the pool's pods: an immutable ConfigMap `flwr-key-<owner uid>` in the pod's
namespace, owned by the pod (or, on a StatefulSet, by the claim that holds
the key), so Kubernetes deletes it when the key's holder is gone for good. It
authenticates with a projected ServiceAccount token that only the identity
containers mount; the pool's Role lets that account create ConfigMaps in its
own namespace and nothing else. Crossplane carries the published keys to the
SuperLink's side (docs/tls-and-authentication.md).

* `publish` (also done by `identity` and `keep` once the key is registered, with
  its node ID): make the key pair if absent and publish it once; exit 0 when
  Kubernetes holds it. The reaper never unregisters a node whose key is
  published: it is away (a partition, a drained node, a pool scaled down
  with its claims kept), not gone, and would be locked out for good.

Each talks to the SuperLink through the release's own `flwr` CLI, configured
the way that release reads it (a Flower app's pyproject.toml up to 1.25,
$FLWR_HOME/config.toml from 1.26), so the Control API is used as Flower intends
in every release.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

KEY = "supernode.key"
PUBLIC_KEY = "supernode.pub"
NODE_ID = "supernode.node-id"  # the node the key registered as
GONE = ("unregistered", "deleted")
CHECK_EVERY = 4  # the sidecar's intervals between two asks whether its node was unregistered
CONNECTION = "federation"
IN_USE = "already in use"
# Touched after each registration the SuperLink confirmed (identity.READINESS_PROBE reads its age).
REGISTERED = "registered"
# Touched once Kubernetes holds the published public key.
PUBLISHED = "published"
PUBLIC_KEY_FIELD = "public-key"
NODE_ID_FIELD = "node-id"
CONFIGMAP_PREFIX = "flwr-key-"


def ensure_key(directory: pathlib.Path, *, new: bool = False) -> pathlib.Path:
    """The identity's public key file, the key pair made first if the volume holds none (or new asks)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - in the Flower image only
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    key, public = directory / KEY, directory / PUBLIC_KEY
    if new or not key.exists():
        private = ec.generate_private_key(ec.SECP384R1())
        data = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        # Written aside and renamed: a pod stopped halfway never leaves half a key.
        partial = directory / f".{KEY}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(partial, key)
        print(f"made a new key pair in {directory}", flush=True)
    private_key = serialization.load_ssh_private_key(key.read_bytes(), password=None)
    text = private_key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    if not public.exists() or public.read_bytes() != text:
        public.write_bytes(text)
    return public


class Cli:
    """The release's `flwr` CLI, pointed at one SuperLink's Control API."""

    def __init__(self, work: pathlib.Path, style: str, address: str, root_certificates: str | None) -> None:
        """Write the connection where the release's CLI reads it (style: pyproject or config-toml)."""
        security = f'root-certificates = "{root_certificates}"' if root_certificates else "insecure = true"
        self.home = work / "home"
        self.app = work / "app"
        self.home.mkdir(parents=True, exist_ok=True)
        self.app.mkdir(parents=True, exist_ok=True)
        if style == "pyproject":
            # Up to 1.25 the CLI reads connections from a Flower app's pyproject.toml,
            # which must be a valid app: these sections are the least it accepts.
            (self.app / "pyproject.toml").write_text(
                '[project]\nname = "registration"\nversion = "1.0.0"\n\n'
                '[tool.flwr.app]\npublisher = "function-flower"\n\n'
                '[tool.flwr.app.components]\nserverapp = "app:server"\nclientapp = "app:client"\n\n'
                "[tool.flwr.app.config]\n\n"
                f'[tool.flwr.federations]\ndefault = "{CONNECTION}"\n\n'
                f'[tool.flwr.federations.{CONNECTION}]\naddress = "{address}"\n{security}\n'
            )
            self.target = [".", CONNECTION]
        else:
            # Without a config file the CLI would start a local simulation SuperLink instead.
            (self.home / "config.toml").write_text(
                f'[superlink]\ndefault = "{CONNECTION}"\n\n'
                f'[superlink.{CONNECTION}]\naddress = "{address}"\n{security}\n'
            )
            self.target = [CONNECTION]

    def call(self, *argv: str) -> dict[str, Any]:
        """One command with --format json: its JSON answer, or {"success": False, "error-message": ...}."""
        env = {**os.environ, "FLWR_HOME": str(self.home), "HOME": str(self.home), "NO_COLOR": "1"}
        try:
            proc = subprocess.run(
                ["flwr", "supernode", *argv, *self.target, "--format", "json"],
                cwd=self.app,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"success": False, "error-message": "flwr did not answer within 60 s"}
        return parse(proc.stdout, f"{proc.stderr.strip()} (exit {proc.returncode})")

    def register(self, public_key: pathlib.Path) -> tuple[bool, str, str | None]:
        """Whether the SuperLink now knows the key, what it said, and the new node's ID if it just registered."""
        answer = self.call("register", str(public_key))
        if answer.get("success"):
            node = answer.get("node-id")
            return True, f"registered as node {node}", None if node is None else str(node)
        message = str(answer.get("error-message", ""))
        if IN_USE in message.lower():
            return True, "already registered", None
        return False, message.strip().replace("\n", " "), None

    def unregistered(self, node_id: str) -> bool:
        """Whether the SuperLink lists node_id as unregistered; False when it cannot tell."""
        answer = self.call("ls")
        return answer.get("success") is True and gone(answer.get("nodes") or [], node_id)


def gone(nodes: list[dict[str, Any]], node_id: str) -> bool:
    """Whether the listing shows node_id unregistered: its key is refused for good."""
    return any(str(n.get("node-id")) == node_id and n.get("status") in GONE for n in nodes)


def parse(stdout: str, fallback: str) -> dict[str, Any]:
    """The JSON object the CLI printed (some releases pretty-print it over several lines)."""
    start, end = stdout.find("{"), stdout.rfind("}")
    if start != -1 and end > start:
        try:
            value = json.loads(stdout[start : end + 1])
        except ValueError:
            pass
        else:
            if isinstance(value, dict):
                return value
    return {"success": False, "error-message": f"no JSON answer: {stdout.strip()} {fallback}"}


def stale(nodes: list[dict[str, Any]], now: dt.datetime, grace: float) -> list[str]:
    """Node IDs offline (or registered and never online) for longer than grace seconds."""
    out = []
    for node in nodes:
        if node.get("status") not in ("offline", "registered"):
            continue
        since = node.get("offline-at") if node.get("status") == "offline" else node.get("created-at")
        when = timestamp(since)
        if when is not None and (now - when).total_seconds() > grace:
            out.append(str(node["node-id"]))
    return out


def timestamp(text: object) -> dt.datetime | None:
    """A time as the CLI prints it ("2026-11-22 10:00:00Z"), or None ("N/A")."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)  # noqa: UP017 - Flower images may run Python 3.10


class KubeApi:
    """The pod's own cluster's API server, as the pod's projected ServiceAccount token reaches it."""

    def __init__(self, host: str, port: str, credentials: pathlib.Path) -> None:
        """credentials: the projected volume holding `token` and the cluster's CA as `ca.crt`."""
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.credentials = credentials
        self.context = ssl.create_default_context(cafile=str(credentials / "ca.crt"))

    @classmethod
    def from_environment(cls, credentials: pathlib.Path) -> KubeApi | None:
        """The API server the kubelet names in every pod's environment; None outside Kubernetes."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port or not (credentials / "token").exists():
            return None
        return cls(host, port, credentials)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """The status code and JSON answer of one request; (0, {"message": ...}) when there was no answer."""
        # Read at every call: the kubelet rotates a projected token before it expires.
        token = (self.credentials / "token").read_text().strip()
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)  # noqa: S310 - https only
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:  # noqa: S310
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as err:
            try:
                said = json.loads(err.read() or b"{}")
            except ValueError:
                said = {}
            return err.code, said if isinstance(said, dict) else {}
        except (OSError, ValueError) as err:
            return 0, {"message": f"no answer from the Kubernetes API: {err}"}


@dataclasses.dataclass(frozen=True)
class Owner:
    """What holds the key: the pod, or the StatefulSet claim the key lives on."""

    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        """The published ConfigMap's ownerReference: Kubernetes deletes it with its owner."""
        return {"apiVersion": "v1", "kind": self.kind, "name": self.name, "uid": self.uid}


def key_configmap(
    owner: Owner, namespace: str, labels: dict[str, str], public_key: str, node_id: str | None = None
) -> dict[str, Any]:
    """The ConfigMap that publishes public_key for owner: immutable, named after the owner's uid and the key.

    node_id: the node the key registered as, when known: the SuperLink's
    reaper leaves a published node registered however long it is offline.
    """
    data = {PUBLIC_KEY_FIELD: public_key}
    if node_id is not None:
        data[NODE_ID_FIELD] = node_id
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(owner.uid, public_key),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner.reference()],
        },
        "immutable": True,
        "data": data,
    }


def configmap_name(owner_uid: str, public_key: str) -> str:
    """flwr-key-<owner uid>-<digest of the key>: a key made anew is published anew beside the old one."""
    return f"{CONFIGMAP_PREFIX}{owner_uid}-{hashlib.sha256(public_key.encode()).hexdigest()[:8]}"


def find_owner(api: KubeApi, namespace: str, claim: str | None) -> tuple[Owner | None, str]:
    """The key's owner from the downward API's pod name and uid, or the claim's uid from the API; or why not."""
    if claim is None:
        name, uid = os.environ.get("POD_NAME", ""), os.environ.get("POD_UID", "")
        if not name or not uid:
            return None, "POD_NAME and POD_UID are not set"
        return Owner("Pod", name, uid), ""
    status, answer = api.call("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
    claim_uid = (answer.get("metadata") or {}).get("uid")
    if status != 200 or not claim_uid:  # noqa: PLR2004 - HTTP OK
        return None, f"cannot read claim {claim}: {status} {answer.get('message', '')}".strip()
    return Owner("PersistentVolumeClaim", claim, str(claim_uid)), ""


def publish(
    api: KubeApi,
    namespace: str,
    claim: str | None,
    labels: dict[str, str],
    public: pathlib.Path,
    node_id: str | None = None,
) -> tuple[bool, str]:
    """Publish the public key through the Kubernetes API; whether Kubernetes now holds it, and what happened."""
    owner, why = find_owner(api, namespace, claim)
    if owner is None:
        return False, why
    body = key_configmap(owner, namespace, labels, public.read_text().strip(), node_id)
    name = body["metadata"]["name"]
    status, answer = api.call("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
    if status == 201:  # noqa: PLR2004 - HTTP Created
        return True, f"published the public key as ConfigMap {namespace}/{name}"
    if status == 409:  # noqa: PLR2004 - HTTP Conflict
        # Published before for this owner (a restarted pod of a claim); its publisher may not read it back.
        return True, f"the public key was published before as ConfigMap {namespace}/{name}"
    return False, f"cannot publish the public key: {status} {answer.get('message', '')}".strip()


def published(api: KubeApi | None, args: argparse.Namespace, public: pathlib.Path) -> tuple[bool, str]:
    """Publish the key unless done before (the marker, beside the key, remembers which): whether Kubernetes holds it."""
    key_dir = pathlib.Path(args.key_dir)
    node_file = key_dir / NODE_ID
    node_id = node_file.read_text().strip() if node_file.exists() else None
    marker, what = key_dir / PUBLISHED, f"{public.read_text().strip()} {node_id or ''}"
    if marker.exists() and marker.read_text() == what:
        return True, "the public key is published"
    if api is None:
        return False, "no Kubernetes API in this pod: the public key is not published"
    labels = dict(label.split("=", 1) for label in args.label)
    done, said = publish(api, os.environ.get("POD_NAMESPACE", ""), args.owner_claim, labels, public, node_id)
    if done:
        marker.write_text(what)
    return done, said


def main(argv: list[str]) -> int:
    """Run one mode (see the module's docstring); identity returns once the key is registered."""
    parser = argparse.ArgumentParser(prog="supernode-identity")
    parser.add_argument("mode", choices=["identity", "keep", "reap", "publish"])
    parser.add_argument("--address", help="host:port of the SuperLink's Control API (identity, keep, reap)")
    parser.add_argument("--cli-config", choices=["pyproject", "config-toml"], default="config-toml")
    parser.add_argument("--root-certificates", help="CA certificate of the SuperLink; plain connection without")
    parser.add_argument("--work", required=True, help="a writable directory of this container's own")
    parser.add_argument("--key-dir", help="the identity volume (identity, keep, publish)")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--grace", type=float, default=600.0, help="seconds offline before a node is unregistered")
    parser.add_argument("--kube-credentials", help="the projected token and cluster CA, to publish the key")
    parser.add_argument("--owner-claim", help="the claim holding the key, which then owns its publication")
    parser.add_argument("--label", action="append", default=[], help="key=value: a label of the publication")
    parser.add_argument("--authorized-keys", help="the published keys (reap): their nodes are never unregistered")
    args = parser.parse_args(argv)
    api = KubeApi.from_environment(pathlib.Path(args.kube_credentials)) if args.kube_credentials else None
    if args.mode == "publish":
        done, said = published(api, args, ensure_key(pathlib.Path(args.key_dir)))
        print(said, flush=True)
        return 0 if done else 1
    if not args.address:
        parser.error(f"{args.mode} needs --address")
    cli = Cli(pathlib.Path(args.work), args.cli_config, args.address, args.root_certificates)
    if args.mode == "reap":
        return reap(
            cli, args.interval, args.grace, pathlib.Path(args.authorized_keys) if args.authorized_keys else None
        )
    return register(cli, api, args)


def register(cli: Cli, api: KubeApi | None, args: argparse.Namespace) -> int:
    """Modes identity and keep: make and publish the key, register it; identity returns once registered."""
    key_dir = pathlib.Path(args.key_dir)
    public = ensure_key(key_dir)
    print(f"public key: {public.read_text().strip()}", flush=True)
    last, last_publication = "", ""
    marker = pathlib.Path(args.work) / REGISTERED
    turns = itertools.count()
    while True:
        turn = next(turns)
        done, said, node_id = cli.register(public)
        if node_id is not None:
            (key_dir / NODE_ID).write_text(node_id)
        elif done and (args.mode == "identity" or turn % CHECK_EVERY == 0) and _unregistered(cli, key_dir):
            public = ensure_key(key_dir, new=True)
            print(f"node {(key_dir / NODE_ID).read_text()} was unregistered: a new key pair, to join as a new node",
                  flush=True)  # fmt: skip
            (key_dir / NODE_ID).unlink()
            last = ""
            continue
        if said != last:
            print(f"{'ok' if done else 'waiting for the SuperLink'}: {said}", flush=True)
            last = said
        if done:
            # The sidecar's readiness probe reads its age: the pod is ready while its key is registered.
            marker.touch()
            # For now beside registration through the Control API, which it will replace: once
            # registered (its node ID known), the key is published, again at every turn until Kubernetes holds it.
            _, publication = published(api, args, public)
            if publication != last_publication:
                print(publication, flush=True)
                last_publication = publication
        if done and args.mode == "identity":
            return 0
        time.sleep(args.interval if done else min(args.interval, 5.0))


def _unregistered(cli: Cli, key_dir: pathlib.Path) -> bool:
    """Whether the node this key registered as has been unregistered (unknown node: no)."""
    node = key_dir / NODE_ID
    return node.exists() and cli.unregistered(node.read_text().strip())


def reap(cli: Cli, interval: float, grace: float, authorized: pathlib.Path | None) -> int:
    """Unregister, every interval, the SuperNodes offline for longer than grace seconds; never returns.

    Never a node whose key is published (listed in authorized, the keys
    Kubernetes holds for the pools' pods and claims): it is away, not gone, and
    Flower would never take its key back.
    """
    while True:
        answer = cli.call("ls")
        if answer.get("success"):
            now = dt.datetime.now(dt.timezone.utc)  # noqa: UP017 - Flower images may run Python 3.10
            kept = published_nodes(authorized.read_text() if authorized is not None and authorized.exists() else "")
            for node_id in stale(answer.get("nodes") or [], now, grace):
                if node_id in kept:
                    continue
                result = cli.call("unregister", node_id)
                outcome = "unregistered" if result.get("success") else f"not unregistered: {result}"
                print(f"node {node_id}, offline for over {grace:.0f} s: {outcome}", flush=True)
        time.sleep(interval)


def published_nodes(authorized_keys: str) -> dict[str, str]:
    """The node IDs of the published keys, to whom they belong: `<type> <key> <holder> <node ID or ->` per line."""
    out = {}
    for line in authorized_keys.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[3].isdigit():  # noqa: PLR2004 - the line's four fields
            out[fields[3]] = fields[2]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
