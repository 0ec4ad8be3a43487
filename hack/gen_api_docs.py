"""Generate docs/api.md, the field-by-field reference of the Federation API.

It reads what the XRDs are generated from: the pydantic model in
function/api/spec.py (fields, types, defaults, constraints, descriptions), the
table of cross-field rules in function/api/rules.py and the status model in
function/api/status_model.py. So the reference cannot drift from the API; run
with --check to fail when the committed file is stale.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import gen_xrd  # noqa: E402
import generated  # noqa: E402
from function.api import rules  # noqa: E402
from function.api.spec import K8S_TYPE, NODE_CONFIG, FederationSpec  # noqa: E402
from function.api.status_model import FederationStatus  # noqa: E402

OUT = ROOT / "docs" / "api.md"

# JSON-schema keywords a field may be constrained by, as the reference words them.
CONSTRAINTS = {
    "enum": "one of {}",
    "minimum": ">= {}",
    "maximum": "<= {}",
    "minLength": "length >= {}",
    "maxLength": "length <= {}",
    "minItems": "items >= {}",
    "maxItems": "items <= {}",
    "maxProperties": "keys <= {}",
    "pattern": "pattern {}",
}

Row = tuple[str, dict[str, Any], bool]  # path, schema node, required


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    # A table cell ends at any unescaped |, even inside a code span.
    return "`" + text.replace("|", "\\|") + "`"


# Optional[X] is anyOf [X, null] in the model's schema; the reference shows X, as the XRD does.
_non_null = gen_xrd._without_null


def _fields(node: dict[str, Any], path: str) -> Iterator[Row]:
    """Every field under node, depth first, in the model's declaration order."""
    required = node.get("required", [])
    for name, raw in node.get("properties", {}).items():
        child = _non_null(raw)
        field = f"{path}.{name}"
        yield field, child, name in required
        # Kubernetes-typed fields are documented by Kubernetes; nodeConfig is a map of scalars.
        if K8S_TYPE in child or NODE_CONFIG in child:
            continue
        if child.get("type") == "array":
            yield from _fields(_non_null(child["items"]), f"{field}[]")
        else:
            yield from _fields(child, field)


def _type(node: dict[str, Any]) -> str:
    if node.get(NODE_CONFIG):
        # What admission takes (see gen_xrd); the function also reads numbers and booleans.
        return "map[string]string"
    if node.get("type") == "array":
        return "[]" + (node[K8S_TYPE] if K8S_TYPE in node else _type(_non_null(node["items"])))
    if K8S_TYPE in node:
        return str(node[K8S_TYPE])
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return "map[string]" + _type(extra)
    return str(node.get("type", "object"))


def _constraints(node: dict[str, Any]) -> list[str]:
    out = []
    for key, words in CONSTRAINTS.items():
        if key == "enum" and key in node:
            out.append(words.format(", ".join(_code(v) for v in node[key])))
        elif key == "pattern" and key in node:
            out.append(words.format(_code(node[key])))
        elif key in node:
            out.append(words.format(node[key]))
    if node.get(NODE_CONFIG):
        out.append(f"value length <= {node[NODE_CONFIG]}")
    if node.get("type") == "array" and K8S_TYPE not in node:
        # Scalar items (CIDRs, namespaces) carry their own pattern or length.
        out += [f"each {c}" for c in _constraints(_non_null(node["items"]))]
    return out


def _default(node: dict[str, Any], *, required: bool) -> str:
    if required:
        return "required"
    default = node.get("default")
    # None means unset; {} only lets the object's own field defaults apply.
    if default is None or default == {}:
        return ""
    return _code(default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _spec_table(schema: dict[str, Any]) -> list[str]:
    lines = ["| Field | Type | Default | Constraints | Description |", "|---|---|---|---|---|"]
    for path, node, required in _fields(schema, "spec"):
        lines.append(
            f"| `{path}` | `{_type(node)}` | {_default(node, required=required)} | "
            f"{'; '.join(_constraints(node))} | {_cell(node.get('description', ''))} |"
        )
    return lines


def _status_table() -> list[str]:
    lines = ["| Field | Type | Description |", "|---|---|---|"]
    for path, node, _ in _fields(gen_xrd.resolved_schema(FederationStatus), "status"):
        lines.append(f"| `{path}` | `{_type(node)}` | {_cell(node.get('description', ''))} |")
    return lines


def _rules() -> list[str]:
    lines = []
    for rule in rules.RULES:
        if rule.cel is not None:
            lines += [f"- `{rule.message}`", "", "  ```", f"  {rule.cel}", "  ```", ""]
    lines.append("Checked by the function only:\n")
    lines += [f"- `{rule.message}` (on `{rule.field}`): {rule.why}" for rule in rules.RULES if rule.cel is None]
    return lines


HEADER = """\
<!-- Generated by hack/gen_api_docs.py from function/api/spec.py, function/api/rules.py and
     function/api/status_model.py. Do not edit. -->

# Federation API reference

Group `flower.crossplane.io`, version `v1alpha1`. The same schema backs every flavor of the API:
the claim `Federation` and composite `XFederation` of `apis/definition.yaml`, and the namespaced
`Federation` of `apis/v2/definition.yaml` ([Crossplane v2](crossplane-v2.md)). This page, like
those XRDs, is generated from the pydantic model in `function/api/spec.py` (`make generate`), and a
test fails when it is stale.

## Spec

A field's path uses `[]` for "every item of the list". Fields typed by a Kubernetes definition
(`io.k8s.api...`: resources, env, volumes, mounts, claim specs, pod templates) are open in the
XRD, which stays small (about 20 KB, where the operator's CRD is 1.7 MB), and checked by the
function against the official Kubernetes 1.33 schema; an error names the field, e.g.
`spec.supernodes.pools[0].volumeMounts[0]: 'mountPath' is a required property`. Only the
definitions the function uses ship with it (`function/api/k8s_definitions.json`, made by
`hack/gen_k8s_schemas.py`).
"""

RULES_HEADING = """\
## Cross-field rules

Each rule that spans fields is one entry of `function/api/rules.py`: its message, the CEL the XRD
checks at admission and the check the function runs, which reports the same message on the field
that is wrong (e.g. `spec.supernodes.pools[1].replicas`). The XRD's CEL rules on `spec`, each with
the message `kubectl apply` prints when the rule fails:

"""

ADMISSION = """\
## Admission rules and supported Kubernetes versions

Both XRD flavors install on **Kubernetes 1.30 to 1.35**. The API server checks every CEL rule's
estimated cost when Crossplane creates the CRDs of an XRD, and each minor estimates
differently; `make test` runs the CRD validation of each of those six minors (its own
`k8s.io/apiextensions-apiserver`, pinned in `tools/crdcheck`) on the CRDs Crossplane's own
conversion generates from each XRD: the composite's and, for v1, the claim's.

Every rule fits the budget of the oldest minor, so every check below happens **at admission**
(`kubectl apply` is refused with the message) **and again in the function** (a render without
the XRD, or an older XRD, gets the same answer; the function returns a fatal result naming the
field and composes nothing, and a fatal result stops Crossplane before anything is applied or
deleted). `examples/invalid/` holds one manifest per rule, each with the message it must produce.

| Check | Admission | Function |
|---|---|---|
| field types, enums, patterns, lengths, pool count (1 to 128), `nodeConfig` bounds | OpenAPI | yes |
| operator's rules, with its messages: replicas in DaemonSet mode; missing replicas in StatefulSet \
mode; a missing or forbidden `superexecImage` or `images.superexecClientApp` for the isolation mode; \
`gpu.mountAll` without `vendor` | CEL | yes |
| ours: `spec.version` a Flower release this function supports (1.24 and later, 1.x; as the function \
reads it: `1.41`, `v1.41.0` and `1.41.0-py3.11` too); duplicate pool names; `{index}`/`{replicas}` \
or `{globalIndex}`/`{totalReplicas}` in \
`nodeConfig` in DaemonSet mode; `{index}` beside `{globalIndex}` in one pool; TLS sources; `insecure` \
beside `tls`; node authentication without TLS; `authKeySecretRef` on a pool of more than one SuperNode | CEL | yes |
| Kubernetes-typed fields (resources, env, volumes, pod templates) against the Kubernetes schema; \
`nodeConfig` values Flower cannot read; generated names too long; claims deploying outside their \
namespace; `volumeClaimTemplates` outside StatefulSet mode; a SuperLink claim template named like the \
persistence volume; a pool volume named like the identity volume; the release an image's tag names \
(a tag is any text at admission) | | yes |

The pool limit (128) and the `nodeConfig` bounds (32 keys, string values of at most 1024
characters) are what keeps these rules within budget. `nodeConfig` values are strings at
admission: before 1.34 the estimate puts no bound on a value that may be an integer or a string,
which put the placeholder rules 100 times over budget on 1.30 to 1.33.
"""

STATUS = """\
## Status

Written by the function from what Crossplane observed ([Operations](operations.md#status)).
Crossplane adds `status.conditions`: its own `Ready` and `Synced`, and the function's
`SuperLinkReady`, `SuperNodesReady`, `ExternalAddressReady` and `TLSReady`
([Conditions](operations.md#conditions)).

"""


def render() -> str:
    """The whole of docs/api.md."""
    schema = gen_xrd.resolved_schema(FederationSpec)
    lines = [HEADER, *_spec_table(schema), "", RULES_HEADING + "\n".join(_rules()).rstrip(), "", ADMISSION]
    lines += [STATUS + "\n".join(_status_table())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(generated.main({OUT: render}, __doc__, "hack/gen_api_docs.py"))
