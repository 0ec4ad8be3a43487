"""Extract the Kubernetes definitions the function validates against.

The function checks the open, Kubernetes-typed parts of a Federation
(resources, env, volumes, podTemplate...) against the official schema. Rather
than ship every Kubernetes version's schemas, this keeps the definitions the
spec names (function/api/spec.py) and what they reference, for one version,
without descriptions. Run with --check to fail when the file is stale.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import kubernetes_validate

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import generated  # noqa: E402 - needs the sys.path set-up above
from function.api.k8s_schema import QUANTITY  # noqa: E402 - needs the sys.path set-up above
from function.api.spec import K8S_TYPE, FederationSpec  # noqa: E402 - needs the sys.path set-up above

KUBERNETES_VERSION = "1.33.0"
OUT = ROOT / "function" / "api" / "k8s_definitions.json"


def named_types() -> list[str]:
    """The Kubernetes definitions the spec's fields name (K8S_TYPE markers)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if K8S_TYPE in node:
                names.add(node[K8S_TYPE])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(FederationSpec.model_json_schema())
    return sorted(names)


def strip(node: Any) -> Any:
    """The schema node with its descriptions left out: the function never shows them."""
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def extract() -> dict[str, Any]:
    """The named definitions and every one they refer to, from kubernetes-validate's schemas."""
    source = pathlib.Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    defs = json.loads((source / f"v{KUBERNETES_VERSION}-local-strict" / "_definitions.json").read_text())["$defs"]
    keep: dict[str, Any] = {}
    todo = named_types()
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(defs[name])
        text = json.dumps(keep[name])
        for ref in {part.split('"')[0] for part in text.split('"$ref": "#/$defs/')[1:]}:
            todo.append(ref)
    # The published schema lets any string be a quantity; Kubernetes refuses what its grammar does not
    # parse (`cpu: lots`), so the function says so before a workload is refused.
    quantity = keep["io.k8s.apimachinery.pkg.api.resource.Quantity"]
    quantity["oneOf"] = [
        {**branch, "pattern": QUANTITY} if "string" in branch["type"] else branch for branch in quantity["oneOf"]
    ]
    # The function owns the containers of its pods: a podTemplate need not list any.
    pod_spec = keep["io.k8s.api.core.v1.PodSpec"]
    pod_spec["required"] = [r for r in pod_spec.get("required", []) if r != "containers"]
    return {"kubernetesVersion": KUBERNETES_VERSION, "$defs": dict(sorted(keep.items()))}


def render() -> str:
    """function/api/k8s_definitions.json as committed."""
    return json.dumps(extract(), sort_keys=True, separators=(",", ":")) + "\n"


if __name__ == "__main__":
    sys.exit(generated.main({OUT: render}, __doc__, "hack/gen_k8s_schemas.py"))
