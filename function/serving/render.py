"""`function render`: run RunFunction in-process on a file, print what it composes.

The output is shaped like `crossplane render`: the XR with its status, then
each composed resource, annotated with its composition resource name so the
stream can be fed back as observed state.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composition import outcome
from function.serving import documents, fn, wire

GROUP_VERSION = "flower.crossplane.io/v1alpha1"
OPERATOR_GROUP_VERSION = "flwr.exalsius.ai/v1"
COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"


# What a refusal by the platform's policy adds when render was given none.
TRY_A_POLICY = (
    "function render judged it by the default policy: to render it under a platform's, add --policy <file> "
    "(the platform's EnvironmentConfig flower-platform-policy, or a flower.fn.crossplane.io Policy; "
    "examples/policy/gpu-platform.yaml is one)"
)


class RenderError(Exception):
    """An input that cannot be rendered, or a fatal result from the function."""


def _load(path: str) -> list[dict[str, Any]]:
    """The documents of a YAML file, of every YAML file of a directory, or of standard input (-).

    Any bytes are read as far as they are YAML of Kubernetes' shape, and refused with a
    RenderError saying where they stop being so (function/serving/documents.py).
    """
    docs: list[dict[str, Any]] = []
    try:
        for source, text in _sources(path):
            for index, doc in enumerate(documents.load(source, text), 1):
                if doc is not None and not isinstance(doc, dict):
                    msg = f"{source}: document {index} is a {type(doc).__name__}, not a mapping (a Kubernetes object)"
                    raise RenderError(msg)
                docs += [doc] if doc else []
    except documents.InputError as err:
        raise RenderError(str(err)) from None
    return docs


def _sources(path: str) -> Iterator[tuple[str, str]]:
    """(name, text) of each input path stands for: standard input, a file, or a directory's YAML files."""
    if path == "-":
        yield "standard input", documents.read("standard input", sys.stdin.buffer)
        return
    p = pathlib.Path(path)
    files = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) if p.is_dir() else [p]
    for f in files:
        try:
            with f.open("rb") as stream:
                text = documents.read(str(f), stream)
        except OSError as err:
            msg = f"{f}: cannot read: {err.strerror or err}"
            raise documents.InputError(msg) from None
        yield str(f), text


def namespaced_xrd(path: str) -> bool:
    """Whether the XRD at path defines namespaced composites (Crossplane v2)."""
    docs = _load(path)
    xrd = next((d for d in docs if d.get("kind") == "CompositeResourceDefinition"), None)
    if xrd is None:
        msg = f"{path}: no CompositeResourceDefinition"
        raise RenderError(msg)
    default = "Namespaced" if str(xrd.get("apiVersion", "")).endswith("/v2") else "LegacyCluster"
    return ((xrd.get("spec") or {}).get("scope") or default) == "Namespaced"


def composite(manifest: dict[str, Any], *, namespaced: bool = False) -> dict[str, Any]:
    """The XR Crossplane would pass for an XR, a claim or an operator Federation.

    With namespaced (an XRD of scope Namespaced), a Federation is the XR itself.
    """
    metadata = manifest.get("metadata") or {}
    if not isinstance(metadata, dict) or not metadata.get("name"):
        msg = "metadata.name is required"
        raise RenderError(msg)
    for key in ("name", "namespace"):
        if not isinstance(metadata.get(key, ""), str):
            msg = f"metadata.{key} must be a string"
            raise RenderError(msg)
    spec = manifest.get("spec")
    if manifest.get("kind") == "XFederation":
        return {"apiVersion": GROUP_VERSION, "kind": "XFederation", "metadata": metadata, "spec": spec}
    if namespaced:
        meta = {"name": metadata["name"], "namespace": metadata.get("namespace") or "default"}
        if "generation" in metadata:
            meta["generation"] = metadata["generation"]
        return {"apiVersion": GROUP_VERSION, "kind": "Federation", "metadata": meta, "spec": spec}
    # A claim, or a flower-operator Federation: Crossplane's XR for it carries
    # the claim's name and namespace as labels.
    name, namespace = metadata["name"], metadata.get("namespace") or "default"
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "XFederation",
        "metadata": {
            "name": name,
            "labels": {outcome.CLAIM_NAME_LABEL: name, outcome.CLAIM_NAMESPACE_LABEL: namespace},
            **({"generation": metadata["generation"]} if "generation" in metadata else {}),
        },
        "spec": spec,
    }


def request(
    xr: dict[str, Any],
    observed: list[dict[str, Any]],
    required: list[dict[str, Any]] | None = None,
    policy: dict[str, Any] | None = None,
) -> fnv1.RunFunctionRequest:
    """A RunFunctionRequest as Crossplane sends it, observed resources keyed by their annotation.

    policy: the function's input, as the Composition's step gives it.
    """
    req = fnv1.RunFunctionRequest()
    if policy is not None:
        req.input.update(policy)
    req.observed.composite.resource.update(xr)
    for obj in observed:
        name = ((obj.get("metadata") or {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME)
        if name:
            req.observed.resources[name].resource.update(obj)
    for obj in required or []:
        req.required_resources[outcome.TLS_REQUIREMENT].items.add().resource.update(obj)
    return req


def satisfied(
    xr: dict[str, Any],
    observed: list[dict[str, Any]],
    required: list[dict[str, Any]],
    policy: dict[str, Any] | None = None,
) -> tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse]:
    """Run as Crossplane does, requirements included: its last request and the function's answer.

    The function's resource requirements are answered from the given
    resources (by kind, name and namespace), then it runs again.
    """
    req = request(xr, observed, policy=policy)
    rsp = fn.run(req)
    asked: fnv1.Requirements | None = None
    for _ in range(5):
        wanted = rsp.requirements.resources
        # As Crossplane: done once the function asks for nothing new.
        if not wanted or rsp.requirements == asked:
            return req, rsp
        asked = fnv1.Requirements()
        asked.CopyFrom(rsp.requirements)
        matches = {key: [r for r in required if _selects(selector, r)] for key, selector in wanted.items()}
        req = request(xr, observed, policy=policy)
        for key, items in matches.items():
            req.required_resources[key].SetInParent()
            for item in items:
                req.required_resources[key].items.add().resource.update(item)
        rsp = fn.run(req)
    return req, rsp


def _selects(selector: fnv1.ResourceSelector, obj: dict[str, Any]) -> bool:
    """Whether Crossplane would answer selector with obj: kind, then name or labels, then namespace."""
    metadata = obj.get("metadata") or {}
    if obj.get("apiVersion") != selector.api_version or obj.get("kind") != selector.kind:
        return False
    if selector.namespace and metadata.get("namespace") != selector.namespace:
        return False
    match = selector.WhichOneof("match")
    if match == "match_labels":
        labels = metadata.get("labels") or {}
        return all(labels.get(k) == v for k, v in selector.match_labels.labels.items())
    if match is None:
        # Neither a name nor labels (an empty matchLabels leaves the oneof unset on the wire):
        # Crossplane 2 lists every object of the kind, in the namespace when one is given.
        return True
    return metadata.get("name") == selector.match_name


def render(
    manifest: dict[str, Any],
    observed: list[dict[str, Any]],
    *,
    namespaced: bool = False,
    required: list[dict[str, Any]] | None = None,
    policy: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rendered documents and any warnings; RenderError for a fatal result."""
    xr = composite(manifest, namespaced=namespaced)
    _, rsp = satisfied(xr, observed, required or [], policy)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        msg = "; ".join(fatal)
        if policy is None and outcome.POLICY_ALLOWED_BY in msg:
            msg += f". {TRY_A_POLICY}"
        raise RenderError(msg)
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    xr_name = xr["metadata"]["name"]
    status = wire.to_dict(rsp.desired.composite.resource).get("status", {})
    status["conditions"] = conditions(rsp)
    out_meta = {"name": xr_name, **({"namespace": xr["metadata"]["namespace"]} if namespaced else {})}
    out_xr = {"apiVersion": xr["apiVersion"], "kind": xr["kind"], "metadata": out_meta, "status": status}
    docs = [out_xr]
    for name in sorted(rsp.desired.resources):
        obj = wire.to_dict(rsp.desired.resources[name].resource)
        # As Crossplane names composed resources: a name the function set is kept, else one is generated.
        given = obj.get("metadata") or {}
        meta: dict[str, Any] = {
            "annotations": {**(given.get("annotations") or {}), COMPOSITION_RESOURCE_NAME: name},
            "labels": {**(given.get("labels") or {}), "crossplane.io/composite": xr_name},
        }
        for key in ("name", "namespace"):
            if given.get(key):
                meta[key] = given[key]
        if "name" not in meta:
            meta["generateName"] = f"{xr_name}-"
        obj["metadata"] = dict(sorted(meta.items()))
        docs.append(obj)
    return docs, warnings


# crossplane render stamps every condition with this time, so outputs compare.
CONDITION_TIME = "2024-01-01T00:00:00Z"
_STATUS = {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}


def _names(names: list[str], first: int = 3) -> str:
    """Crossplane's list of names: sorted, the first three, then a count."""
    names = sorted(names)
    if len(names) > first:
        return f"{', '.join(names[:first])}, and {len(names) - first} more"
    if len(names) == first:
        return f"{', '.join(names[:-1])}, and {names[-1]}"
    return ", ".join(names)


def conditions(rsp: fnv1.RunFunctionResponse) -> list[dict[str, str]]:
    """The XR's conditions as Crossplane sets them.

    Ready comes from the composed resources' readiness, then come the
    function's own conditions.
    """
    unready = [name for name, r in rsp.desired.resources.items() if r.ready != fnv1.READY_TRUE]
    ready = {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": CONDITION_TIME}
    if rsp.desired.composite.ready == fnv1.READY_FALSE:
        ready.update(status="False", reason="Creating")
    elif unready:
        ready.update(status="False", reason="Creating", message=f"Unready resources: {_names(unready)}")
    out = [ready]
    for c in rsp.conditions:
        out.append(
            {
                "type": c.type,
                "status": _STATUS.get(c.status, "Unknown"),
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": CONDITION_TIME,
            }
        )
    return out


# What `function render` renders, by apiVersion: this API's claim/XR kinds, and the
# flower-operator's Federation, whose spec this API takes as it is.
RENDERED_KINDS = {GROUP_VERSION: ("Federation", "XFederation"), OPERATOR_GROUP_VERSION: ("Federation",)}


def _refusal(index: int, doc: dict[str, Any]) -> str | None:
    """Why document index (1-based) of the input is not rendered, or None if it is."""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind in RENDERED_KINDS.get(str(api_version), ()):
        return None
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    return f"document {index} ({api_version} {kind}{f' {name}' if name else ''}) is no Federation"


def named(index: int, doc: dict[str, Any]) -> str:
    """Document index (1-based) of a stream, as errors name it: its place, kind and namespace/name.

    A claim's or Federation's namespace is the one it renders in (default when it names
    none); an XFederation has none.
    """
    metadata = doc.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name, namespace, kind = metadata.get("name"), metadata.get("namespace") or "default", doc.get("kind")
    if not isinstance(name, str) or not name:
        return f"document {index} ({kind} without a name)"
    if kind == "XFederation" or not isinstance(namespace, str):
        return f"document {index} ({kind} {name})"
    return f"document {index} ({kind} {namespace}/{name})"


def _policy(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """--policy's file as Crossplane would give it: the step's input, and the EnvironmentConfig it brings."""
    policies = _load(path)
    if len(policies) != 1:
        msg = f"{path}: {len(policies)} documents: a Composition's step gives one policy"
        raise RenderError(msg)
    given, brought = outcome.policy_given(policies[0])
    if any((doc.get("metadata") or {}).get("name") != given["environmentConfig"] for doc in brought):
        msg = f"{path}: the packages' Compositions read the EnvironmentConfig {given['environmentConfig']}"
        raise RenderError(msg)
    return given, brought


def render_file(
    path: str,
    observed_path: str | None = None,
    xrd_path: str | None = None,
    required_path: str | None = None,
    policy_path: str | None = None,
) -> tuple[str, list[str]]:
    """Render every Federation of path (- for standard input) to one YAML stream; also return the warnings.

    As `crossplane render` renders the composite it is given: a document of any
    other kind or version is refused, named, and nothing is rendered. An error
    names the Federation it is about (named); so does a warning in a stream of
    several documents.
    """
    source = "standard input" if path == "-" else path
    docs = _load(path)
    if not docs:
        msg = f"{source}: no document"
        raise RenderError(msg)
    refused = [r for r in (_refusal(i, d) for i, d in enumerate(docs, 1)) if r is not None]
    if refused:
        kinds = ", ".join(f"{v} {' or '.join(k)}" for v, k in RENDERED_KINDS.items())
        msg = f"{source}: {'; '.join(refused)}: function render renders {kinds}"
        raise RenderError(msg)
    observed = _load(observed_path) if observed_path else []
    required = _load(required_path) if required_path else []
    namespaced = namespaced_xrd(xrd_path) if xrd_path else False
    policy, brought = _policy(policy_path) if policy_path else (None, [])
    required += brought
    text, warnings = "", []
    for index, doc in enumerate(docs, 1):
        try:
            rendered, said = render(doc, observed, namespaced=namespaced, required=required, policy=policy)
        except RenderError as err:
            msg = f"{source}: {named(index, doc)}: {err}"
            raise RenderError(msg) from None
        text += "".join("---\n" + yaml.safe_dump(d, sort_keys=True) for d in rendered)
        warnings += [f"{named(index, doc)}: {w}" for w in said] if len(docs) > 1 else said
    return text, warnings
