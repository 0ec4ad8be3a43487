"""Generate the XRDs in apis/ from the pydantic models (function/api/spec.py, function/api/status_model.py).

apis/definition.yaml is the apiextensions.crossplane.io/v1 flavor (cluster
XFederation, claim Federation: Crossplane 1.x and 2.x); apis/v2/definition.yaml
the Crossplane v2 flavor (namespaced Federation, no claim). Same group, version
and schema.

The models are the one source of truth; this turns their JSON schemas into
structural OpenAPI v3 schemas as Kubernetes wants them. Run with --check to
fail when the committed XRD differs from what the models say.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import pathlib
import sys
from typing import Any

import yaml
from pydantic import BaseModel

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import generated  # noqa: E402 - needs the sys.path set-up above
from function.api import policy, rules  # noqa: E402 - needs the sys.path set-up above
from function.api.cluster_spec import FederationClusterGroupSpec, FederationClusterSpec  # noqa: E402 - needs the sys.path set-up above
from function.api.run_spec import FederationRunSpec  # noqa: E402 - needs the sys.path set-up above
from function.api.spec import K8S_TYPE, NODE_CONFIG, FederationSpec  # noqa: E402 - needs the sys.path set-up above
from function.api.status_model import (  # noqa: E402 - needs the sys.path set-up above
    FederationClusterGroupStatus,
    FederationClusterStatus,
    FederationRunStatus,
    FederationStatus,
)

OUT = ROOT / "apis" / "definition.yaml"
OUT_V2 = ROOT / "apis" / "v2" / "definition.yaml"
# The FederationCluster a Federation composes per remote cluster (function/api/cluster_spec.py).
OUT_CLUSTER = ROOT / "apis" / "cluster-definition.yaml"
OUT_CLUSTER_V2 = ROOT / "apis" / "v2" / "cluster-definition.yaml"
# The groups that compose those, a share of the clusters each.
OUT_GROUP = ROOT / "apis" / "group-definition.yaml"
OUT_GROUP_V2 = ROOT / "apis" / "v2" / "group-definition.yaml"
# The runs users apply on a Federation (function/api/run_spec.py).
OUT_RUN = ROOT / "apis" / "run-definition.yaml"
OUT_RUN_V2 = ROOT / "apis" / "v2" / "run-definition.yaml"
# The function's input, as function packages ship it: for `crossplane beta validate` and editors.
OUT_INPUT = ROOT / "package" / "input" / "flower.fn.crossplane.io_policies.yaml"
GROUP = "flower.crossplane.io"

KEEP = (
    "type",
    "description",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "x-kubernetes-validations",
)


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].split("/")[-1]]
            merged = {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve(merged, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    """Optional[X] is anyOf[X, null]; Kubernetes has no null type, unset is enough."""
    node = dict(node)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            msg = f"no structural form for a union: {options}"
            raise ValueError(msg)
        node = {**options[0], **node}
    return node


def _node_config(node: dict[str, Any]) -> dict[str, Any]:
    """A nodeConfig map: string values at admission.

    As the operator's map[string]string ("32", "true", "0.5" still become
    typed values in the function). Kubernetes CEL cannot read values of no
    type, and before 1.34 the cost estimate puts no bound on an int-or-string
    value, which pushes the placeholder rules over the budget: a typed string
    fits on 1.30+.
    """
    out = {
        "type": "object",
        "description": node["description"],
        "maxProperties": node["maxProperties"],
        "additionalProperties": {"type": "string", "maxLength": node[NODE_CONFIG]},
    }
    if "x-kubernetes-validations" in node:
        out["x-kubernetes-validations"] = node["x-kubernetes-validations"]
    return out


def _kubernetes_typed(node: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes-typed field, open here; the function checks it against its definition."""
    out: dict[str, Any] = {"description": f"{node.get('description', '')} ({node[K8S_TYPE]})".strip()}
    if node.get("type") == "array":
        out["type"] = "array"
        out["items"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    else:
        out["type"] = "object"
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _default(node: dict[str, Any]) -> dict[str, Any]:
    """The default to keep: scalars as they are, objects as {} (their own field defaults fill in)."""
    default = node.get("default")
    if isinstance(default, dict):
        return {"default": {}}
    if default is None or isinstance(default, list):
        return {}
    return {"default": default}


def _no_typed_keys(node: dict[str, Any]) -> dict[str, Any]:
    """The node, unless it is a map with typed keys.

    Kubernetes has no patternProperties, and leaving it out would prune the
    map's entries at admission.
    """
    if "patternProperties" in node:
        msg = f"no structural form for typed map keys (check them with a validator): {node.get('title')}"
        raise ValueError(msg)
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """Turn one resolved pydantic JSON-schema node into a structural schema."""
    node = _without_null(_no_typed_keys(node))
    if node.get(NODE_CONFIG):
        return _node_config(node)
    if node.get(K8S_TYPE):
        return _kubernetes_typed(node)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out = {key: node[key] for key in KEEP if key in node}
    out.update(_default(node))
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "object" or "properties" in node:
        out["type"] = "object"
        if "properties" in node:
            out["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
            if node.get("required"):
                out["required"] = list(node["required"])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra)
    if node.get("type") == "array":
        out["items"] = _structural(node["items"])
    return out


def resolved_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, with every $ref replaced by its definition."""
    raw = model.model_json_schema(mode="validation")
    resolved: dict[str, Any] = _resolve(raw, copy.deepcopy(raw.get("$defs", {})))
    resolved.pop("$defs", None)
    return resolved


def spec_schema() -> dict[str, Any]:
    """The structural schema of spec, from the model's JSON schema."""
    resolved = resolved_schema(FederationSpec)
    # The cross-field rules' CEL (function/api/rules.py), run at admission as the function runs their checks.
    # Keys sorted, as pydantic sorts the rest of the schema.
    resolved["x-kubernetes-validations"] = [dict(sorted(rule.items())) for rule in rules.admission()]
    schema = _structural(resolved)
    schema["description"] = "Desired state of a Flower federation."
    return schema


def _optional(node: Any) -> Any:
    """Node with no required fields, at any depth."""
    if isinstance(node, dict):
        return {k: _optional(v) for k, v in node.items() if k != "required"}
    return node


def status_schema() -> dict[str, Any]:
    """The structural schema of status, from the status model's JSON schema.

    Nothing in it is required: Crossplane writes status.conditions before the
    function has written anything (and alone when the function fails), and the
    model already checks every status the function writes.
    """
    schema: dict[str, Any] = _optional(_structural(resolved_schema(FederationStatus)))
    return {"type": "object", "description": "Observed state of the Federation, written by the function.", **schema}


COLUMNS = [
    {"name": "MODE", "type": "string", "jsonPath": ".spec.mode"},
    {"name": "ISOLATION", "type": "string", "jsonPath": ".spec.isolationMode"},
    # The SuperLink's Flower release, resolved by the function (spec.version may be unset).
    {"name": "VERSION", "type": "string", "jsonPath": ".status.version"},
    {"name": "SUPERNODES", "type": "string", "jsonPath": ".status.supernodes"},
    # Empty without node authentication; below SUPERNODES when keys wait for the SuperLink.
    {"name": "REGISTERED", "type": "integer", "jsonPath": ".status.registeredSupernodes"},
    # The clusters SuperNode pools run in; with cluster selectors it follows their labels.
    {"name": "CLUSTERS", "type": "integer", "jsonPath": ".status.clusters"},
    # Its FederationRuns: how many are Pending or Running, and the newest with its phase.
    {"name": "RUNNING", "type": "integer", "jsonPath": ".status.runs.inProgress"},
    {"name": "LATEST-RUN", "type": "string", "jsonPath": ".status.runs.latest"},
]


def _version() -> dict[str, Any]:
    return {
        "name": "v1alpha1",
        "served": True,
        "referenceable": True,
        # Crossplane appends its own SYNCED, READY and AGE columns.
        "additionalPrinterColumns": COLUMNS,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "required": ["spec"],
                "properties": {"spec": spec_schema(), "status": status_schema()},
            }
        },
    }


def definition() -> dict[str, Any]:
    """The apiextensions.crossplane.io/v1 XRD: cluster-scoped XFederation, claim Federation."""
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": f"xfederations.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": "XFederation",
                "plural": "xfederations",
                "categories": ["crossplane", "composite", "flower"],
            },
            "claimNames": {
                "kind": "Federation",
                "plural": "federations",
                "shortNames": ["fedf"],
                "categories": ["flower"],
            },
            "defaultCompositionRef": {"name": f"xfederations.{GROUP}"},
            "versions": [_version()],
        },
    }


def definition_v2() -> dict[str, Any]:
    """The apiextensions.crossplane.io/v2 XRD: a namespaced Federation, no claim."""
    return {
        "apiVersion": "apiextensions.crossplane.io/v2",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": f"federations.{GROUP}"},
        "spec": {
            "scope": "Namespaced",
            "group": GROUP,
            "names": {
                "kind": "Federation",
                "plural": "federations",
                "shortNames": ["fedf"],
                "categories": ["crossplane", "flower"],
            },
            "defaultCompositionRef": {"name": f"federations.{GROUP}"},
            "versions": [_version()],
        },
    }


@dataclasses.dataclass(frozen=True)
class Part:
    """A composite the function writes for a Federation: its kind, models and columns."""

    kind: str  # the namespaced flavour's; the cluster-scoped one's has an X before it
    spec: type[BaseModel]
    status: type[BaseModel]
    spec_description: str
    status_description: str
    columns: list[dict[str, str]]
    # A kind users write: the cluster-scoped flavour has a claim of the plain kind's name.
    claimed: bool = False

    def definition(self, *, namespaced: bool) -> dict[str, Any]:
        """Its XRD: apiextensions.crossplane.io/v2 and namespaced, or v1 and cluster-scoped."""
        kind = self.kind if namespaced else f"X{self.kind}"
        plural = f"{kind.lower()}s"
        spec: dict[str, Any] = {
            "group": GROUP,
            "names": {"kind": kind, "plural": plural, "categories": ["crossplane", "flower"]},
            "defaultCompositionRef": {"name": f"{plural}.{GROUP}"},
            "versions": [self.version()],
        }
        if namespaced:
            spec = {"scope": "Namespaced", **spec}
        else:
            spec["names"]["categories"] = ["crossplane", "composite", "flower"]
        if self.claimed and not namespaced:
            spec["claimNames"] = {"kind": self.kind, "plural": f"{self.kind.lower()}s", "categories": ["flower"]}
        return {
            "apiVersion": f"apiextensions.crossplane.io/{'v2' if namespaced else 'v1'}",
            "kind": "CompositeResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": spec,
        }

    def version(self) -> dict[str, Any]:
        """Its one version, v1alpha1: the schema from the models, and the columns."""
        spec = _structural(resolved_schema(self.spec))
        spec["description"] = self.spec_description
        status: dict[str, Any] = _optional(_structural(resolved_schema(self.status)))
        status = {"type": "object", "description": self.status_description, **status}
        return {
            "name": "v1alpha1",
            "served": True,
            "referenceable": True,
            "additionalPrinterColumns": self.columns,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"spec": spec, "status": status},
                }
            },
        }


CLUSTER = Part(
    "FederationCluster",
    FederationClusterSpec,
    FederationClusterStatus,
    "One remote cluster's part of a Federation, written by the function for its Federation.",
    "Observed state of the cluster's pools, written by the function.",
    [
        {"name": "FEDERATION", "type": "string", "jsonPath": ".spec.federation"},
        {"name": "CLUSTER", "type": "string", "jsonPath": ".spec.providerConfigRef.name"},
        {"name": "SUPERNODES", "type": "string", "jsonPath": ".status.supernodes"},
    ],
)
GROUP_PART = Part(
    "FederationClusterGroup",
    FederationClusterGroupSpec,
    FederationClusterGroupStatus,
    "The FederationClusters of a share of a Federation's remote clusters, written by the function.",
    "Observed state of those FederationClusters, rolled up by the function.",
    [
        {"name": "FEDERATION", "type": "string", "jsonPath": ".spec.federation"},
        {"name": "CLUSTERS", "type": "integer", "jsonPath": ".status.clusters"},
        {"name": "READY-CLUSTERS", "type": "integer", "jsonPath": ".status.readyClusters"},
        {"name": "SUPERNODES", "type": "string", "jsonPath": ".status.supernodes"},
    ],
)

RUN = Part(
    "FederationRun",
    FederationRunSpec,
    FederationRunStatus,
    "One Flower run on a Federation of the same namespace: the app and its run config.",
    "What Flower records of the run, written by the function.",
    [
        {"name": "FEDERATION", "type": "string", "jsonPath": ".spec.federation"},
        {"name": "PHASE", "type": "string", "jsonPath": ".status.phase"},
        {"name": "RUN-ID", "type": "string", "jsonPath": ".status.runId"},
        {"name": "FINISHED", "type": "date", "jsonPath": ".status.finishedAt"},
    ],
    claimed=True,
)


def input_definition() -> dict[str, Any]:
    """The CRD of the function's input, the platform's Policy (function/api/policy.py)."""
    group, version = policy.API_VERSION.split("/")
    schema = _structural(resolved_schema(policy.Policy))
    properties = {k: v for k, v in schema["properties"].items() if k not in ("apiVersion", "kind")}
    schema = {
        **schema,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            **properties,
        },
        "description": "The platform's policy: what Federations composed with this Composition may ask for.",
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"policies.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": policy.KIND,
                "listKind": f"{policy.KIND}List",
                "plural": "policies",
                "singular": "policy",
                "categories": ["crossplane"],
            },
            "scope": "Namespaced",
            # Lives in a Composition's step, not as objects; the package manager installs it all the same.
            "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


HEADER = "# Generated by hack/gen_xrd.py from function/api/spec.py. Do not edit.\n"
CLUSTER_HEADER = "# Generated by hack/gen_xrd.py from function/api/cluster_spec.py. Do not edit.\n"
RUN_HEADER = "# Generated by hack/gen_xrd.py from function/api/run_spec.py. Do not edit.\n"
INPUT_HEADER = "# Generated by hack/gen_xrd.py from function/api/policy.py. Do not edit.\n"


def render() -> str:
    """apis/definition.yaml as committed."""
    return HEADER + yaml.safe_dump(definition(), sort_keys=False, width=100)


def render_v2() -> str:
    """apis/v2/definition.yaml as committed."""
    return HEADER + yaml.safe_dump(definition_v2(), sort_keys=False, width=100)


def render_part(part: Part, *, namespaced: bool) -> str:
    """A part's XRD as committed: apis/ (cluster-scoped) or apis/v2/ (namespaced)."""
    header = RUN_HEADER if part is RUN else CLUSTER_HEADER
    return header + yaml.safe_dump(part.definition(namespaced=namespaced), sort_keys=False, width=100)


def render_input() -> str:
    """package/input/'s CRD as committed."""
    return INPUT_HEADER + yaml.safe_dump(input_definition(), sort_keys=False, width=100)


if __name__ == "__main__":
    outputs = {
        OUT: render,
        OUT_V2: render_v2,
        OUT_CLUSTER: functools.partial(render_part, CLUSTER, namespaced=False),
        OUT_CLUSTER_V2: functools.partial(render_part, CLUSTER, namespaced=True),
        OUT_GROUP: functools.partial(render_part, GROUP_PART, namespaced=False),
        OUT_GROUP_V2: functools.partial(render_part, GROUP_PART, namespaced=True),
        OUT_RUN: functools.partial(render_part, RUN, namespaced=False),
        OUT_RUN_V2: functools.partial(render_part, RUN, namespaced=True),
        OUT_INPUT: render_input,
    }
    sys.exit(generated.main(outputs, __doc__, "hack/gen_xrd.py"))
