"""The program that gives each SuperNode its own identity, proven by Kubernetes, and registers it.

It runs inside the Flower images (their Python, their `cryptography`, their
`flwr` CLI), started as `python identity_program.pyz <mode> ...` with fixed
arguments: no shell, no user text. Standard library and `cryptography` only,
Python 3.10 and later, as every supported Flower image has them.

Modes:

* `publish` (a SuperNode pod's init container): make the SuperNode's key pair
  in its identity volume unless one is there (P-384, OpenSSH format, the
  private key readable by its owner alone) and publish the public key through
  the Kubernetes API of the pod's own cluster: an immutable ConfigMap
  `flwr-key-<owner uid>-<key digest>` in the pod's namespace, owned by the pod
  (or, on a StatefulSet, by the claim that holds the key), so Kubernetes
  deletes it when the key's holder is gone for good. It authenticates with a
  projected ServiceAccount token only this container mounts; the pool's Role
  lets that account create ConfigMaps in its own namespace and nothing else.
  So Kubernetes' authorization is the proof that the key belongs to one of the
  pool's pods. With --retry it tries again until Kubernetes holds the key.
  The private key never leaves the pod, and the pod never reaches the Control API.
* `registrar` (the SuperLink pod's sidecar, the only Control API client):
  Crossplane carries the published keys to a list beside the SuperLink
  (function/builders/published_keys.py) which the kubelet keeps in its
  volume. Every interval, and as soon as the list changes, it registers each
  listed key the SuperLink does not hold, over the pod's loopback, and keeps
  the key's node ID in its state (beside the SuperLink's own, so both survive
  a restart or neither does); a SuperLink that lost its registrations gets
  them back. Remote clusters' keys come in shard files beside the list, one per
  group of clusters, which the list names (SHARDS_FILE). A key is unregistered
  only once it has left the list for longer than the grace period: its holder
  (pod or claim) was deleted, or its pool or cluster removed. A key whose shard
  is named but not there (its ConfigMap not yet or no longer delivered) has not
  left: only a shard the list no longer names takes its keys away. A SuperNode that
  is merely offline (a partition, a drained node, a pool scaled down with its
  claims kept) keeps its registration however long it is away, so Flower,
  which never takes an unregistered key back, never locks it out. A listed
  key whose node was unregistered all the same (by hand, through the Control
  API) is retired: the registrar reports it, by its digest and holder, in a
  ConfigMap beside the SuperLink that only its own ServiceAccount may write
  (--registrations), and Crossplane carries the report to the holder's namespace.
* `rekey` (a SuperNode pod's native sidecar, beside the SuperNode): every
  interval, and as soon as it changes, it reads that report where the kubelet
  mounts it (--retired); when it names this pod's key, it makes a new key
  pair in place of the old one and publishes it as `publish` does. The SuperNode, refused under its retired key
  and restarted by the kubelet, starts under the new one, which the registrar
  registers once Crossplane has carried it: no one has to act.

The registrar talks to the SuperLink through the release's own `flwr` CLI,
as function/programs/flwr_control.py runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import sys
import time

from function.programs.flwr_control import Cli, KubeApi, answered, patch_configmap, sleep_until_changed, version
from function.programs.key_publications import Owner, key_configmap

KEY = "supernode.key"
PUBLIC_KEY = "supernode.pub"
IN_USE = "already in use"
# Statuses of a node whose key Flower will never take again.
GONE = ("unregistered", "deleted")
# Written once Kubernetes holds the published public key (its content: the key).
PUBLISHED = "published"
# The registrar's memory of what it registered, beside the SuperLink's state.
REGISTRATIONS = "registrations.json"
# How long the registrar remembers a retired key out of the list: longer than any outage of the carriage.
RETIRED_REMEMBERED = 30 * 24 * 3600.0
# Beside the list of keys, the names of the shard files that should be there too (one per group of
# remote clusters): a shard missing for a moment is not a shard whose clusters left.
SHARDS_FILE = "authorized-keys-shards"
# The field of the registrar's report (and of its copies in the pools' namespaces) listing retired keys.
RETIRED_FIELD = "retired"


DIGEST_LENGTH = 16


def key_digest(public_key: str) -> str:
    """How reports name a public key: short, and no key text travels back to the pods."""
    return hashlib.sha256(public_key.strip().encode()).hexdigest()[:DIGEST_LENGTH]


def ensure_key(directory: pathlib.Path) -> pathlib.Path:
    """The identity's public key file, the key pair made first if the volume holds none."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - in the Flower image only
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    key, public = directory / KEY, directory / PUBLIC_KEY
    if not key.exists():
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
) -> tuple[bool, str]:
    """Publish the public key through the Kubernetes API; whether Kubernetes now holds it, and what happened."""
    owner, why = find_owner(api, namespace, claim)
    if owner is None:
        return False, why
    body = key_configmap(owner, namespace, labels, public.read_text().strip())
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
    marker, key = pathlib.Path(args.key_dir) / PUBLISHED, public.read_text().strip()
    if marker.exists() and marker.read_text() == key:
        return True, "the public key is published"
    if api is None:
        return False, "no Kubernetes API in reach (KUBERNETES_SERVICE_HOST or the token missing): not published"
    labels = dict(label.split("=", 1) for label in args.label)
    done, said = publish(api, os.environ.get("POD_NAMESPACE", ""), args.owner_claim, labels, public)
    if done:
        marker.write_text(key)
    return done, said


def publish_until_held(api: KubeApi | None, args: argparse.Namespace) -> int:
    """Mode publish: make the key unless there is one, publish it (with --retry, until Kubernetes holds it)."""
    public = ensure_key(pathlib.Path(args.key_dir))
    print(f"public key: {public.read_text().strip()}", flush=True)
    last = ""
    while True:
        done, said = published(api, args, public)
        if said != last:
            print(said, flush=True)
            last = said
        if done:
            return 0
        if args.retry is None:
            return 1
        if api is None:
            # Nothing to retry against: the SuperNode starts and is refused until its key is published.
            return 0
        time.sleep(args.retry)


def retired(path: pathlib.Path) -> set[str]:
    """The digests of the retired keys the report lists (none while there is no report)."""
    if not path.exists():
        return set()
    return {line.split()[0] for line in path.read_text().splitlines() if line.strip()}


def rekey_if_retired(api: KubeApi | None, args: argparse.Namespace) -> bool:
    """Mode rekey's check: when the report names this pod's key, a new key pair, published. Whether it made one."""
    directory = pathlib.Path(args.key_dir)
    public = directory / PUBLIC_KEY
    if not public.exists() or key_digest(public.read_text()) not in retired(pathlib.Path(args.retired)):
        return False
    print(f"key {key_digest(public.read_text())} was retired by the SuperLink: making a new key pair", flush=True)
    # The old private key is useless (Flower never takes its key back); the new one replaces it in place.
    (directory / KEY).unlink(missing_ok=True)
    publish_until_held(api, args)
    return True


def rekey(api: KubeApi | None, args: argparse.Namespace) -> int:
    """Mode rekey: replace this pod's key once the report names it; with --once, check once.

    It looks every interval and whenever the report changes.
    """
    report = pathlib.Path(args.retired)
    while True:
        seen = version(report)
        rekey_if_retired(api, args)
        if args.once:
            return 0
        sleep_until_changed(report, seen, args.interval)


@dataclasses.dataclass
class Registered:
    """A key the registrar registered: its node, and since when the key has been out of the list."""

    node: str
    absent_since: float | None = None
    # Unregistered (by the registrar or by hand): Flower never takes the key back.
    retired: bool = False
    # The file it was last listed in: the list's own name, or a shard's.
    source: str | None = None


def authorized(text: str) -> dict[str, tuple[str, str | None]]:
    """The listed keys: `<type> <key> <holder> <node ID or ->` per line -> (holder, node ID it registered as)."""
    out: dict[str, tuple[str, str | None]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 4:  # noqa: PLR2004 - the line's four fields
            out[f"{fields[0]} {fields[1]}"] = (fields[2], fields[3] if fields[3].isdigit() else None)
    return out


@dataclasses.dataclass(frozen=True)
class Listing:
    """The listed keys (key -> holder, node ID hint), the file each is in, and the named shards not there."""

    keys: dict[str, tuple[str, str | None]]
    where: dict[str, str]
    missing: frozenset[str] = frozenset()


def listing(path: pathlib.Path) -> Listing | None:
    """The keys of the list at path and of the shards it names beside it; None while the list was never written."""
    if not path.exists():
        return None
    texts = {path.name: path.read_text()}
    names = path.parent / SHARDS_FILE
    missing = set()
    for name in names.read_text().split() if names.exists() else []:
        shard = path.parent / name
        if "/" in name or name.startswith("."):
            continue  # only a file beside the list, never the kubelet's own
        if shard.exists():
            texts[name] = shard.read_text()
        else:
            missing.add(name)
    keys: dict[str, tuple[str, str | None]] = {}
    where: dict[str, str] = {}
    for name, text in texts.items():
        for key, entry in authorized(text).items():
            keys.setdefault(key, entry)
            where.setdefault(key, name)
    return Listing(keys, where, frozenset(missing))


def register(cli: Cli, public_key: pathlib.Path) -> tuple[bool, str, str | None]:
    """Whether the SuperLink now knows the key, what it said, and the new node's ID if it just registered."""
    answer = cli.call("supernode", "register", str(public_key))
    if answer.get("success"):
        node = answer.get("node-id")
        return True, f"registered as node {node}", None if node is None else str(node)
    message = str(answer.get("error-message", ""))
    if IN_USE in message.lower():
        return True, "already registered", None
    return False, message.strip().replace("\n", " "), None


def load(path: pathlib.Path) -> dict[str, Registered]:
    """The registrar's memory; empty when there is none (a new SuperLink, or one without state)."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {
        key: Registered(e["node"], e.get("absent-since"), e.get("retired", False), e.get("source"))
        for key, e in raw.items()
    }


def save(path: pathlib.Path, memory: dict[str, Registered]) -> None:
    """Written aside and renamed: a container stopped halfway never leaves half a memory."""
    raw = {
        k: {"node": r.node, "absent-since": r.absent_since, "retired": r.retired, "source": r.source}
        for k, r in sorted(memory.items())
    }
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(raw, indent=1, sort_keys=True))
    os.replace(partial, path)


@dataclasses.dataclass(frozen=True)
class Step:
    """What one turn of the registrar does: keys to register, nodes to unregister, and the memory after."""

    register: list[str]
    unregister: list[tuple[str, str]]
    memory: dict[str, Registered]
    said: list[str]


def plan(
    listed: Listing | None,
    nodes: dict[str, str],
    memory: dict[str, Registered],
    now: float,
    grace: float,
) -> Step:
    """The registrar's decisions for one turn, from the list, the SuperLink's nodes (id -> status) and its memory.

    listed is None while the list has never been written (the pod started
    before the function listed the keys): then nothing counts as absent; nor
    does a key last listed in a shard the list names that is not there.
    """
    memory = {k: dataclasses.replace(r) for k, r in memory.items()}
    register, said = [], []
    for key, (holder, _hint) in sorted((listed.keys if listed else {}).items()):
        wanted, news = _listed(key, holder, nodes, memory)
        if key in memory:
            memory[key].source = listed.where.get(key) if listed else None
        if wanted:
            register.append(key)
        if news:
            said.append(news)
    unregister = [] if listed is None else _gone(listed, nodes, memory, now, grace)
    return Step(register, unregister, memory, said)


def _listed(key: str, holder: str, nodes: dict[str, str], memory: dict[str, Registered]) -> tuple[bool, str]:
    """Whether a listed key needs registering, and what to say of it; adopts or retires it in memory."""
    known = memory.get(key)
    if known is None:
        # The hint (a node ID in the line) is never adopted: Flower's list of nodes does not say which
        # key a node holds, so a publication naming another's node would make that node this key's,
        # to be unregistered when the publication goes. A key registered before the registrar kept a
        # memory is answered "already in use" and kept as one whose node it cannot name.
        return True, ""
    away, known.absent_since = known.absent_since is not None, None
    if known.retired:
        # Reported until it leaves the list: its holder makes a new key (mode rekey).
        back = f"the key of {holder} is back, but its node {known.node} was unregistered: it makes a new key"
        return False, back if away else ""
    if not known.node:
        return False, ""  # in use under a node it cannot name (registered by hand): nothing to do
    status = nodes.get(known.node)
    if status in GONE:
        known.retired = True
        return False, (
            f"node {known.node} of {holder} was unregistered and Flower never takes its key back: "
            f"{holder} makes a new one"
        )
    # Unknown to the SuperLink: it lost its registrations (no database), which come back.
    return status is None, ""


def _gone(
    listed: Listing,
    nodes: dict[str, str],
    memory: dict[str, Registered],
    now: float,
    grace: float,
) -> list[tuple[str, str]]:
    """The registrations whose keys have been out of the list for longer than grace: their holders are gone.

    A retired key is remembered for RETIRED_REMEMBERED after it left the list:
    should it come back (a carriage outage longer than grace), it is reported,
    not registered again, which Flower would refuse. A key whose shard is named
    but missing is not out of the list: its clock stops until the shard is back.
    """
    out = []
    for key, known in sorted(memory.items()):
        if key in listed.keys:
            continue
        if known.source in listed.missing:
            known.absent_since = None
            continue
        if known.absent_since is None:
            known.absent_since = now
            continue
        away = now - known.absent_since
        if known.retired:
            if away > RETIRED_REMEMBERED:
                del memory[key]
        elif away > grace:
            status = nodes.get(known.node)
            if status is None:
                del memory[key]  # the SuperLink no longer knows it (no database): nothing to unregister
            elif status in GONE:
                known.retired = True  # unregistered by hand while away
            else:
                out.append((key, known.node))
    return out


def retired_report(memory: dict[str, Registered], listed: Listing | None) -> str:
    """The retired keys still listed, `<key digest> <holder>` a line, sorted: what their holders must replace."""
    held = listed.keys if listed else {}
    lines = {f"{key_digest(key)} {held[key][0]}\n" for key, known in memory.items() if known.retired and key in held}
    return "".join(sorted(lines))


def report(api: KubeApi, namespace: str, name: str, text: str) -> tuple[bool, str]:
    """Write the report into its ConfigMap beside the SuperLink (which the function composed): whether it took."""
    done, why = patch_configmap(api, namespace, name, {RETIRED_FIELD: text})
    if done:
        return True, f"reported {text.count(chr(10))} retired key(s) in ConfigMap {namespace}/{name}"
    return False, f"cannot report the retired keys in ConfigMap {namespace}/{name}: {why}"


class Reporter:
    """The registrar's report: logged when it changes, and written where Crossplane reads it back (with an API)."""

    def __init__(self, api: KubeApi | None, configmap: str | None) -> None:
        """configmap: the report's ConfigMap in the pod's namespace; nothing is written without it or an API."""
        self.api, self.configmap = api, configmap
        self.logged, self.said = "", ""
        # What the ConfigMap holds, as far as the registrar knows: None until it first wrote it.
        self.written: str | None = None

    def turn(self, text: str) -> None:
        """Log and write the report text, where it changed."""
        if text != self.logged:
            print(f"retired keys to replace: {text.count(chr(10))}", flush=True)
            for line in text.splitlines():
                print(f"retired: {line}", flush=True)
            self.logged = text
        if self.api is None or not self.configmap or text == self.written:
            return
        done, said = report(self.api, os.environ.get("POD_NAMESPACE", ""), self.configmap, text)
        if done:
            self.written = text
        if said != self.said:
            print(said, flush=True)
            self.said = said


def registrar(cli: Cli, args: argparse.Namespace, api: KubeApi | None = None) -> int:
    """Mode registrar: register the listed keys and unregister those gone; never returns.

    It turns every interval and whenever the list changes.
    """
    path, state = pathlib.Path(args.authorized_keys), pathlib.Path(args.state) / REGISTRATIONS
    state.parent.mkdir(parents=True, exist_ok=True)
    key_file = pathlib.Path(args.work) / PUBLIC_KEY
    memory = load(state)
    reporter = Reporter(api, args.registrations)
    while True:
        seen = version(path)
        answer = answered(cli, args.interval, "supernode", "ls")
        nodes = {str(n.get("node-id")): str(n.get("status")) for n in answer.get("nodes") or []}
        listed = listing(path)
        step = plan(listed, nodes, memory, time.time(), args.grace)
        memory = step.memory
        for line in step.said:
            print(line, flush=True)
        for key in step.register:
            key_file.write_text(key + "\n")
            holder = listed.keys[key][0] if listed else ""
            done, said, node = register(cli, key_file)
            if node is not None or done:
                # done without a node: the key was in use already, under a node it cannot name.
                memory[key] = Registered(node or "", source=listed.where.get(key) if listed else None)
            print(f"{holder}: {said if done else 'not registered: ' + said}", flush=True)
        for key, node in step.unregister:
            result = cli.call("supernode", "unregister", node)
            if result.get("success"):
                memory[key] = Registered(node, time.time(), retired=True)
            outcome = "unregistered" if result.get("success") else f"not unregistered: {result}"
            print(f"node {node}, its key unpublished for over {args.grace:.0f} s: {outcome}", flush=True)
        save(state, memory)
        reporter.turn(retired_report(memory, listed))
        sleep_until_changed(path, seen, args.interval)


def main(argv: list[str]) -> int:
    """Run one mode (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="supernode-identity")
    parser.add_argument("mode", choices=["publish", "rekey", "registrar"])
    parser.add_argument("--key-dir", help="publish: the identity volume")
    parser.add_argument("--kube-credentials", help="the projected ServiceAccount token and cluster CA")
    parser.add_argument("--owner-claim", help="publish: the claim holding the key, which then owns its publication")
    parser.add_argument("--label", action="append", default=[], help="publish: key=value, a label of the publication")
    parser.add_argument("--retry", type=float, help="publish: seconds between attempts until Kubernetes holds the key")
    parser.add_argument("--address", help="registrar: host:port of the SuperLink's Control API")
    parser.add_argument("--cli-config", choices=["pyproject", "config-toml"], default="config-toml")
    parser.add_argument("--root-certificates", help="registrar: the SuperLink's CA certificate; plain without")
    parser.add_argument("--work", help="registrar: a writable directory of this container's own")
    parser.add_argument("--state", help="registrar: where it remembers the keys it registered")
    parser.add_argument("--authorized-keys", help="registrar: the published keys, as the function lists them")
    parser.add_argument("--registrations", help="registrar: the ConfigMap beside it where it reports retired keys")
    parser.add_argument("--retired", help="rekey: the report of retired keys, as the kubelet mounts it")
    parser.add_argument("--once", action="store_true", help="rekey: check once and exit")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--grace", type=float, default=600.0, help="seconds out of the list before unregistered")
    args = parser.parse_args(argv)
    api = KubeApi.from_environment(pathlib.Path(args.kube_credentials)) if args.kube_credentials else None
    if args.mode in ("publish", "rekey"):
        if not args.key_dir:
            parser.error(f"{args.mode} needs --key-dir")
        if args.mode == "rekey":
            if not args.retired:
                parser.error("rekey needs --retired")
            return rekey(api, args)
        return publish_until_held(api, args)
    needed = ("address", "work", "state", "authorized_keys")
    missing = [f"--{n.replace('_', '-')}" for n in needed if not getattr(args, n)]
    if missing:
        parser.error(f"registrar needs {', '.join(missing)}")
    return registrar(Cli(pathlib.Path(args.work), args.cli_config, args.address, args.root_certificates), args, api)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
