"""The invariants the function keeps for any input, shared by the property tests and the fuzz benchmark.

Each check takes one generated input, runs the function as Crossplane does
(fn.run on a RunFunctionRequest) and raises AssertionError naming what broke.
"""

from __future__ import annotations

import functools
import json
import random
import re
from typing import Any

import jsonschema
import kubernetes_validate.utils as kv
import referencing
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api import names, nodeconfig
from function.api.spec import K8S_TYPE, NODE_CONFIG
from function.serving import fn, wire
from support import strategies
from support.helpers import xr
from support.peers import ROOT

KUBERNETES_MINOR = "1.33"
XRD_STATUS = yaml.safe_load((ROOT / "apis" / "definition.yaml").read_text())["spec"]["versions"][0]["schema"][
    "openAPIV3Schema"
]["properties"]["status"]
STATUS_VALIDATOR = jsonschema.Draft7Validator(XRD_STATUS)
# A field path in a message: spec, then .name or [index] parts.
# Map keys that are not plain words are bracketed (k8s_schema.field_path).
FIELD_PATH = re.compile(r"\bspec(?:\.[A-Za-z0-9_-]+|\[[^\]\s*]+\])*")
FATAL_PREFIX = "invalid Federation: "


def request(spec: Any, observed: dict[str, Any] | None = None) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="property"))
    composite = xr({})
    composite["spec"] = spec
    req.observed.composite.resource.update(composite)
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    return req


def fatal_messages(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    return {name: wire.to_dict(r.resource) for name, r in rsp.desired.resources.items()}


def answer(spec: Any, observed: dict[str, Any] | None = None) -> fnv1.RunFunctionResponse:
    """The function's answer; a bug (the catch-all in fn.run) fails the property."""
    rsp = fn.run(request(spec, observed))
    bugs = [m for m in fatal_messages(rsp) if not m.startswith(FATAL_PREFIX)]
    assert not bugs, f"the function failed on its own: {bugs}"
    return rsp


def _parts(path: str) -> list[str | int]:
    return [
        k or (int(b) if b.isdigit() else b)
        for k, b in re.findall(r"\.([A-Za-z0-9_-]+)|\[([^\]]+)\]", path[len("spec") :])
    ]


def resolves(tree: Any, path: str, schema: dict[str, Any]) -> bool:
    """Whether the field path names something in tree (spec onwards), or a field of the model missing there.

    A missing field (a required one, or a default a rule needs changed) is
    named by its model path, whose present part must be the input's own.
    """
    node: Any = tree
    absent = object()  # past the input (None is a value the input may hold)
    parts = _parts(path)
    for depth, part in enumerate(parts, 1):
        schema = strategies.unwrap(schema)
        present = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        )
        if present:
            node = node[part]  # type: ignore[index]
        elif node is not absent and not isinstance(node, dict):
            return False  # past the end of a list, or into a scalar
        else:
            node = absent  # beyond the input: the rest must be the model's
        if isinstance(part, int):
            schema = schema.get("items", {})
        elif part in schema.get("properties", {}):
            schema = schema["properties"][part]
        elif node is not absent:
            schema = {}  # a field the model lacks, named where the input has it
        else:
            return False
        if schema.get(K8S_TYPE) or schema.get(NODE_CONFIG):
            # Open maps: what follows is their own keys, which may hold dots;
            # the map itself may be the missing field.
            return node is not absent or depth == len(parts)
    return True


def check_refused(spec: Any) -> str:
    """An invalid spec: one fatal result naming fields of the input, and nothing desired."""
    rsp = answer(spec)
    fatals = fatal_messages(rsp)
    assert len(fatals) == 1, f"expected one fatal result, got {fatals or [r.message for r in rsp.results]}"
    assert not rsp.desired.resources, "desired resources beside a fatal result"
    assert not rsp.desired.HasField("composite"), "a composite status beside a fatal result"
    paths = FIELD_PATH.findall(fatals[0])
    assert paths, f"the message names no field: {fatals[0]}"
    lost = [p for p in paths if not resolves(spec, p, strategies.SCHEMA)]
    assert not lost, f"the message names fields the input does not have: {lost} in {fatals[0]}"
    return fatals[0]


@functools.cache
def kubernetes_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """The official schema of one kind (as kubernetes_validate holds it), loaded once."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{KUBERNETES_MINOR}.0-local-strict"
    schema = kv.schema_contents(f"{folder}/{kind.lower()}-{group}.json", KUBERNETES_MINOR)
    definitions = kv.schema_contents(f"{folder}/_definitions.json", KUBERNETES_MINOR)
    registry = referencing.Resource.from_contents(definitions) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every map in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def manifests(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """What each Object applies; an observe-only Object (netpol.KUBE_API_ENDPOINTS: a name to read, not an
    object to write) applies nothing."""
    return [
        o["spec"]["forProvider"]["manifest"]
        for o in objects.values()
        if "forProvider" in o["spec"] and o["spec"].get("managementPolicies") != ["Observe"]
    ]


def workloads(rsp: fnv1.RunFunctionResponse, prefix: str) -> list[dict[str, Any]]:
    """The workloads an answer composes, each renamed with prefix so many answers' can be judged at once."""
    out = []
    for manifest in manifests(desired(rsp)):
        if manifest["kind"] in ("StatefulSet", "DaemonSet", "Deployment"):
            renamed = {**manifest, "metadata": {**manifest["metadata"], "name": prefix + manifest["metadata"]["name"]}}
            out.append(renamed)
    return out


def check_accepted(spec: dict[str, Any], rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """A spec the function takes: schema-valid manifests, order-blind bytes, a status the XRD takes.

    Returns the (--node-config text, literal values) pairs of its pods, for
    Flower's own parser to read back (one process for many examples).
    """
    rsp = answer(spec)
    objects = desired(rsp)
    for manifest in manifests(objects):
        if manifest["apiVersion"] == "cert-manager.io/v1":
            continue  # not a Kubernetes type
        errors = [
            e.message for e in kubernetes_validator(manifest["kind"], manifest["apiVersion"]).iter_errors(manifest)
        ]
        assert not errors, f"{manifest['kind']} {manifest['metadata']['name']}: {errors[:3]}"
    again = answer(shuffled(spec, rng))
    assert again.SerializeToString(deterministic=True) == rsp.SerializeToString(deterministic=True), (
        "the output depends on the order of the spec's maps"
    )
    first = {name: json.dumps(o) for name, o in objects.items()}
    assert first == {name: json.dumps(o) for name, o in desired(again).items()}, "key order differs"
    status = wire.to_dict(rsp.desired.composite.resource).get("status", {})
    errors = [e.message for e in STATUS_VALIDATOR.iter_errors(status)]
    assert not errors, f"the XRD refuses the status the function writes: {errors[:3]}"
    return node_configs(spec, objects)


def node_configs(spec: dict[str, Any], objects: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each pool's --node-config text, with the values Flower must read for its literal entries."""
    out = []
    pools = {p["name"]: p for p in spec["supernodes"]["pools"]}
    for manifest in manifests(objects):
        if manifest["kind"] not in ("StatefulSet", "DaemonSet"):
            continue
        pool = pools.get(manifest["metadata"]["labels"].get(names.POOL_LABEL, ""))
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            args = container.get("args", [])
            if "--node-config" in args and pool is not None:
                text = args[args.index("--node-config") + 1]
                literal = {
                    k: nodeconfig._typed(v) if isinstance(v, str) else _as_sent(v)
                    for k, v in pool.get("nodeConfig", {}).items()
                    if not (isinstance(v, str) and "{" in v)
                }
                out.append((text, literal))
    return out


def _as_sent(value: Any) -> Any:
    # A Struct carries every number as a double, and the function reads whole
    # ones as ints (function/serving/wire.py): a spec's 2.0 is 2, as it is once the
    # API server has stored it. Found by make fuzz (Flower read an int back).
    return int(value) if isinstance(value, float) and value.is_integer() else value


def garbled(objects: dict[str, dict[str, Any]], noise: list[Any], where: list[int]) -> dict[str, dict[str, Any]]:
    """Observed objects whose status holds noise, at one of several depths each."""
    out = {}
    for i, (name, composed) in enumerate(sorted(objects.items())):
        obj = json.loads(json.dumps(composed))
        value = noise[i % len(noise)]
        depth = where[i % len(where)] % 4
        if depth == 0:
            obj["status"] = value
        elif depth == 1:
            obj["status"] = {"atProvider": value}
        elif depth == 2:
            obj["status"] = {"atProvider": {"manifest": value}}
        elif "forProvider" in obj.get("spec", {}):
            manifest = json.loads(json.dumps(obj["spec"]["forProvider"]["manifest"]))
            manifest["status"] = value
            obj["status"] = {"atProvider": {"manifest": manifest}}
        else:  # composed directly (an ObservedObjectCollection): no manifest to hold it
            obj["status"] = {"atProvider": value}
        out[name] = obj
    return out


def check_garbled_observed(spec: dict[str, Any], noise: list[Any], where: list[int]) -> None:
    """Random JSON where observed state should be: the same desired resources, and no failure."""
    baseline = answer(spec)
    objects = desired(baseline)
    if fatal_messages(baseline):
        return
    unobserved = {name: {k: v for k, v in o.items() if k != "status"} for name, o in objects.items()}
    reference = answer(spec, unobserved)
    rsp = answer(spec, garbled(objects, noise, where))
    assert not fatal_messages(rsp), fatal_messages(rsp)
    assert desired(rsp) == desired(reference), "garbled observed state changed the desired resources"
