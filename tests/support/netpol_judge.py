"""What a set of manifests lets connect, as np-guard's analyzer (tools/netpolicy) judges it.

The analyzer reads pods, workloads, Namespaces and NetworkPolicies from a directory, as
they would be in a cluster. The tests describe the two ends of a connection; this module
writes them beside the policies and asks.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import pathlib
import subprocess
import tempfile
from typing import Any

import yaml


@dataclasses.dataclass(frozen=True)
class Endpoint:
    namespace: str | None = None  # None: outside the cluster, at ip
    labels: tuple[tuple[str, str], ...] = ()
    ip: str = ""


def pod(namespace: str, labels: dict[str, str]) -> Endpoint:
    return Endpoint(namespace, tuple(sorted(labels.items())))


def external(ip: str) -> Endpoint:
    return Endpoint(None, (), ip)


def namespace(name: str) -> dict[str, Any]:
    # The API server labels every Namespace with its name; namespaceSelectors rely on it.
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}  # fmt: skip


def probe(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A bare pod standing for one end of a connection."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "probe", "image": "probe"}]}}  # fmt: skip


def write(directory: pathlib.Path, manifests: list[dict[str, Any]]) -> None:
    """The manifests, and a Namespace for each namespace they name, as the analyzer's input."""
    namespaces = sorted({m["metadata"]["namespace"] for m in manifests if m["metadata"].get("namespace")})
    present = {m["metadata"]["name"] for m in manifests if m["kind"] == "Namespace"}
    docs = [namespace(n) for n in namespaces if n not in present] + manifests
    (directory / "manifests.yaml").write_text(yaml.safe_dump_all(docs))


def _end(flag: str, end: Endpoint, name: str) -> list[str]:
    if end.namespace is None:
        return [f"--{flag}-ip", end.ip]
    namespace_flag = "--source-namespace" if flag == "source" else "--destination-namespace"
    return [f"--{flag}-pod", name, namespace_flag, end.namespace]


def allowed(
    netpolicy: str,
    policies: list[dict[str, Any]],
    source: Endpoint,
    destination: Endpoint,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether the policies let source open a connection to destination's port."""
    if source.namespace is None and destination.namespace is not None:
        return _from_outside(netpolicy, policies, source.ip, destination, port, protocol)
    pods = [probe(name, end.namespace, dict(end.labels))
            for name, end in (("source", source), ("destination", destination)) if end.namespace]  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        write(pathlib.Path(directory), [*policies, *pods])
        ends = [*_end("source", source, "source"), *_end("destination", destination, "destination")]
        args = [netpolicy, "eval", "--dirpath", directory, *ends, "-p", str(port), "--protocol", protocol.lower()]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
    verdict = proc.stdout.strip().rpartition(": ")[2]
    assert proc.returncode == 0 and verdict in {"true", "false"}, (args, proc.stdout, proc.stderr)
    return verdict == "true"


def connections(netpolicy: str, manifests: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Every connection the manifests allow: {"src", "dst", "conn"}, workloads as ns/name[Kind]."""
    with tempfile.TemporaryDirectory() as directory:
        write(pathlib.Path(directory), manifests)
        args = [netpolicy, "list", "--dirpath", directory, "-o", "json", "--quiet"]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def _from_outside(
    netpolicy: str, policies: list[dict[str, Any]], ip: str, destination: Endpoint, port: int, protocol: str
) -> bool:
    # The analyzer's eval refuses an external source with a pod destination (v1.4.4 checks
    # "source is an IP and destination is not" where it means both): read its full list.
    assert destination.namespace is not None
    target = probe("destination", destination.namespace, dict(destination.labels))
    address = ipaddress.ip_address(ip)
    for c in connections(netpolicy, [*policies, target]):
        if c["dst"] != f"{destination.namespace}/destination[Pod]" or "[" in c["src"]:
            continue
        first, _, last = c["src"].partition("-")
        if ipaddress.ip_address(first) <= address <= ipaddress.ip_address(last or first):
            return port in ports(c["conn"]).get(protocol, set())
    return False


def ports(conn: str) -> dict[str, set[int]]:
    """The analyzer's "TCP 53,5432,9092-9093,UDP 53" as {protocol: ports}; all of them for "All Connections"."""
    every = set(range(1, 65536))
    if conn == "All Connections":
        return {"TCP": every, "UDP": every, "SCTP": every}
    out: dict[str, set[int]] = {}
    protocol = ""
    for token in conn.split(","):
        numbers = token
        if " " in token:  # a protocol starts its list of ports
            protocol, _, numbers = token.partition(" ")
            out.setdefault(protocol, set())
        low, _, high = numbers.partition("-")
        out[protocol] |= set(range(int(low), int(high or low) + 1))
    return out
