"""The program that gathers a pool namespace's key publications into one ConfigMap, for Crossplane to carry.

Mode `gather` (one pod per Federation, cluster and pool namespace): it lists
and then watches the namespace's key publications (key_publications), keeps
those that count (the Federation's and its pools' own, owned by a pod or claim,
named after their owner and key; of each holder its newest key, each key once)
and writes them, one line `<key> <namespace>/<owner kind>/<owner name>` each,
sorted, into one ConfigMap of the namespace (--configmap). Crossplane observes
that one ConfigMap where it observed one Object per key before.

What it may do is what its own ServiceAccount may: list and watch ConfigMaps
of its namespace and patch that one ConfigMap. A pool's pod can neither
write the gathered list (its account may only create, and only its own
`flwr-key-` publication) nor make it before the function does (the admission
policy refuses any other name), so a line there is one the gatherer wrote
from a publication Kubernetes let a pool's pod make.

It serves nothing: no port, nothing a stranger reaches. What others can make
it hold is bounded: at most MOST_PUBLICATIONS publications in memory, and a
list of at most MOST_BYTES (a ConfigMap holds 1 MiB); past either it says so
in its log and keeps the rest. Standard library only, Python 3.10 and later,
run with the pool's SuperNode image's Python like the pools' other programs.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

from function.programs import key_publications
from function.programs.flwr_control import HTTP_OK, KubeApi, patch_configmap

# The gathered list's field in its ConfigMap.
GATHERED_FIELD = "keys"
# How many lines the list holds, beside it: the list's Object on the hub is Ready once this reaches the
# keys its place expects (composition/readiness.py), and provider-kubernetes polls an Object that is not
# Ready every 30 s, one that is at its --poll; CEL, as the provider runs it, cannot count lines.
COUNT_FIELD = "count"
# A publication's ConfigMap is under 1 KiB; a pool namespace holds a few per SuperNode.
MOST_PUBLICATIONS = 50_000
# Room under a ConfigMap's 1 MiB for its metadata: some 4,000 lines of ~230 bytes.
MOST_BYTES = 900 * 1024
# How long the server keeps a watch open before the program watches again from where it was.
WATCH_SECONDS = 300
# Seconds between attempts while the API server does not answer, or refuses.
RETRY_SECONDS = 5.0
# Seconds the program waits after a change for the next before it writes: ten pods starting
# together are one write to the list (and one status write of its Object on the hub), not ten.
SETTLE_SECONDS = 2.0


def gathered_lines(counted: Iterable[tuple[str, str]]) -> tuple[str, int]:
    """The list's text, one `<key> <holder>` line each in the order given; and how many did not fit in MOST_BYTES."""
    out: list[str] = []
    size = 0
    left = 0
    for key, holder in counted:
        line = f"{key} {holder}\n"
        if size + len(line) > MOST_BYTES:
            left += 1
            continue
        out.append(line)
        size += len(line)
    return "".join(out), left


class Publications:
    """The namespace's publications that count, by ConfigMap name, as the watch last told them."""

    def __init__(self, expected: key_publications.Expected) -> None:
        """expected: what a publication of this place carries (key_publications.checked)."""
        self.expected = expected
        self.by_name: dict[str, key_publications.Publication] = {}
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.refused = 0  # publications past MOST_PUBLICATIONS, since the last list

    def replace(self, items: list[Any]) -> None:
        """A list's answer: everything that counts now."""
        fresh: dict[str, key_publications.Publication] = {}
        refused = 0
        for item in items:
            # A list's items carry no apiVersion or kind (the list says them once); a watch's objects do.
            item = {"apiVersion": "v1", "kind": "ConfigMap", **item} if isinstance(item, dict) else item  # noqa: PLW2901
            publication = key_publications.checked(self.expected, item)
            if publication is not None:
                if len(fresh) >= MOST_PUBLICATIONS:
                    refused += 1
                    continue
                fresh[str(item["metadata"]["name"])] = publication
        with self.lock:
            self.by_name, self.refused = fresh, refused
        self.changed.set()

    def apply(self, kind: str, item: Any) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        name = str(((item or {}).get("metadata") or {}).get("name", "")) if isinstance(item, dict) else ""
        publication = key_publications.checked(self.expected, item) if kind != "DELETED" else None
        with self.lock:
            had = self.by_name.pop(name, None)
            if publication is not None:
                if len(self.by_name) >= MOST_PUBLICATIONS:
                    self.refused += 1
                else:
                    self.by_name[name] = publication
            if had != self.by_name.get(name):
                self.changed.set()

    def text(self) -> tuple[str, str]:
        """The gathered list, and what it left out (empty when nothing)."""
        with self.lock:
            counted, refused = key_publications.counted(self.by_name.values()), self.refused
        text, left = gathered_lines(counted)
        notes = [f"{refused} publications past the first {MOST_PUBLICATIONS}"] if refused else []
        notes += [f"{left} keys past {MOST_BYTES} bytes"] if left else []
        return text, "; ".join(notes)


def list_data(text: str) -> dict[str, str]:
    """The ConfigMap's fields the gatherer writes for a list's text."""
    return {GATHERED_FIELD: text, COUNT_FIELD: str(text.count("\n"))}


def listed(expected: key_publications.Expected, items: list[Any]) -> str:
    """The list a gatherer writes having seen items (a list's answer): what the tests and the benchmark play."""
    publications = Publications(expected)
    publications.replace(items)
    return publications.text()[0]


def selector(expected: key_publications.Expected) -> str:
    """The label selector of the namespace's publications of this Federation's pools there."""
    terms = [f"{k}={v}" for k, v in sorted(expected.labels.items())]
    if expected.pools:
        terms.append(f"{expected.pool_label} in ({','.join(sorted(expected.pools))})")
    return ",".join(terms)


def watch_forever(api: KubeApi, publications: Publications) -> None:
    """List, then watch from the list's version, again and again; a failure is said once and retried."""
    namespace = publications.expected.namespace
    path = (
        f"/api/v1/namespaces/{namespace}/configmaps?labelSelector={urllib.parse.quote(selector(publications.expected))}"
    )
    said = ""
    while True:
        status, answer = api.call("GET", path)
        if status != HTTP_OK:
            why = f"cannot list the key publications: {status} {answer.get('message', '')}".strip()
            if why != said:
                print(why, flush=True)
                said = why
            time.sleep(RETRY_SECONDS)
            continue
        said = ""
        publications.replace(answer.get("items") or [])
        version = str((answer.get("metadata") or {}).get("resourceVersion", ""))
        try:
            watch_from(api, f"{path}&resourceVersion={version}", publications)
        except (OSError, ValueError) as err:
            print(f"the watch of the key publications ended: {err}; listing again", flush=True)
            time.sleep(RETRY_SECONDS)


def watch_from(api: KubeApi, path: str, publications: Publications) -> None:
    """Apply a watch's events until the server ends it or says the version is gone (then the caller lists again)."""
    for event in api.watch(path, WATCH_SECONDS):
        kind = event.get("type")
        if kind == "ERROR":
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            publications.apply(str(kind), event.get("object"))


def write_forever(api: KubeApi, publications: Publications, configmap: str, watcher: threading.Thread) -> int:
    """Write the list whenever it changed (and settled); return 1 if the watcher died, for the kubelet to restart."""
    written, noted = None, ""
    while watcher.is_alive():
        if not publications.changed.wait(timeout=RETRY_SECONDS):
            continue
        time.sleep(SETTLE_SECONDS)
        publications.changed.clear()
        text, note = publications.text()
        if note != noted:
            print(f"left out: {note}" if note else "nothing left out", flush=True)
            noted = note
        if text == written:
            continue
        done, why = patch_configmap(api, publications.expected.namespace, configmap, list_data(text))
        if done:
            written = text
            print(f"gathered {text.count(chr(10))} keys into ConfigMap {configmap}", flush=True)
        else:
            print(f"cannot write the gathered keys: {why}", flush=True)
            time.sleep(RETRY_SECONDS)
            publications.changed.set()
    print("the watcher stopped", flush=True)
    return 1


def arguments(argv: list[str]) -> argparse.Namespace:
    """The mode's arguments, as the function's builder writes them (function/builders/key_gatherer.py)."""
    parser = argparse.ArgumentParser(prog="supernode-keys-gatherer")
    parser.add_argument("mode", choices=["gather"])
    parser.add_argument("--kube-credentials", required=True, help="the projected ServiceAccount token and cluster CA")
    parser.add_argument("--namespace", required=True, help="the pool namespace, the gatherer's own")
    parser.add_argument("--configmap", required=True, help="the ConfigMap the gathered list goes into")
    parser.add_argument("--label", action="append", default=[], help="key=value every publication carries")
    parser.add_argument("--pool-label", required=True, help="the label naming a publication's pool")
    parser.add_argument("--pool", action="append", default=[], help="a pool whose publications count (all: none)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Mode gather (see the module's docstring)."""
    args = arguments(argv)
    api = KubeApi.from_environment(pathlib.Path(args.kube_credentials))
    if api is None:
        # Outside Kubernetes (a test's pod runner): nothing to gather from, and nothing a restart would change.
        print("no Kubernetes API in reach (KUBERNETES_SERVICE_HOST or no token): nothing to gather", flush=True)
        threading.Event().wait()
        return 0
    labels = dict(label.split("=", 1) for label in args.label)
    expected = key_publications.Expected(args.namespace, labels, args.pool_label, tuple(args.pool))
    publications = Publications(expected)
    watcher = threading.Thread(target=watch_forever, args=(api, publications), daemon=True)
    watcher.start()
    return write_forever(api, publications, args.configmap, watcher)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
