"""Check Kubernetes-typed parts of a spec against the official schema.

The definitions come from function/api/k8s_definitions.json, a trimmed copy of
the official OpenAPI definitions made by hack/gen_k8s_schemas.py.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
from collections.abc import Iterable
from typing import Any

import jsonschema
import referencing

from function import caching

DEFINITIONS_FILE = pathlib.Path(__file__).with_name("k8s_definitions.json")
# A resource.Quantity as Kubernetes parses it (apimachinery's serialization format): a signed
# decimal, then a binary (Ki..Ei) or decimal (n, u, m, k..E) suffix or an exponent.
# hack/gen_k8s_schemas.py puts it into the Quantity definition.
QUANTITY = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


@functools.cache
def _definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = json.loads(DEFINITIONS_FILE.read_text())
    return definitions


@functools.cache
def _validator(type_name: str) -> jsonschema.protocols.Validator:
    defs = _definitions()
    if type_name not in defs["$defs"]:
        msg = f"no Kubernetes definition {type_name} in {DEFINITIONS_FILE.name}"
        raise KeyError(msg)
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs["$defs"]}
    resource = referencing.Resource.from_contents(root)
    registry = referencing.Registry().with_resource("urn:k8s", resource)
    schema = {"$ref": f"urn:k8s#/$defs/{type_name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def field_path(prefix: str, parts: Iterable[str | int]) -> str:
    """spec.a[0].b from a prefix and path parts (ints are list indexes).

    A map key that is not a plain word (a label key such as
    app.kubernetes.io/name) is bracketed, as Kubernetes writes it:
    spec.labels[app.kubernetes.io/name].
    """
    out = prefix
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) or not PLAIN_KEY.match(part) else f".{part}"
    return out


PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _innermost(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    # oneOf/anyOf failures say little; the innermost error names the field.
    while error.context:
        error = min(error.context, key=lambda e: (-len(e.absolute_path), e.message))
    return error


def check(type_name: str, value: Any, field: str) -> list[tuple[str, str]]:
    """Return (field path, message) for each way value breaks the definition."""
    problems = _problems(type_name, caching.Content(value))
    return [(field_path(field, parts), message) for parts, message in problems]


@caching.memoize()
def _problems(type_name: str, value: caching.Content) -> tuple[tuple[tuple[str | int, ...], str], ...]:
    # The canonical form, so a message naming a map's keys reads the same whatever order they came in.
    errors = sorted(_validator(type_name).iter_errors(value.canonical()), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for error in errors:
        inner = _innermost(error)
        message = inner.message
        if inner.validator == "additionalProperties":
            message = message.replace("Additional properties are not allowed", "unknown field")
        elif inner.validator == "pattern" and inner.validator_value == QUANTITY:
            message = f"{inner.instance!r} is not a Kubernetes quantity (for example 500m, 2, 1.5Gi)"
        out.append((tuple(inner.absolute_path), message))
    return tuple(out)
