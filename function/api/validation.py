"""Turn a raw spec into a FederationSpec, or into errors that name the field.

The XRD rejects most bad input at admission; this module rejects all of it,
with the same messages, for the paths that skip the XRD (a render without
it, an older XRD, an operator manifest).
"""

from __future__ import annotations

from typing import Any

import pydantic

from function.api import k8s_schema, names, nodeconfig, rules
from function.api.spec import K8S_TYPE, FederationSpec


class SpecError(Exception):
    """The spec is invalid; errors holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        """Hold errors; the message lists them all."""
        self.errors = errors
        super().__init__("; ".join(f"{field}: {message}" for field, message in errors))


def parse(raw: Any) -> FederationSpec:
    """Parse and fully check a spec; raise SpecError naming every bad field."""
    if not isinstance(raw, dict):
        raise SpecError([("spec", "must be an object")])
    try:
        spec = FederationSpec.model_validate(raw)
    except pydantic.ValidationError as err:
        raise SpecError(
            [(k8s_schema.field_path("spec", e["loc"]), e["msg"]) for e in err.errors(include_url=False)]
        ) from None
    errors = check(spec)
    if errors:
        raise SpecError(errors)
    return spec


def check(spec: FederationSpec) -> list[tuple[str, str]]:
    """The cross-field rules (function/api/rules.py, in the XRD's order), then what only the function can check."""
    return [*rules.violations(spec), *_node_configs(spec), *_check_kubernetes_types(spec)]


def _node_configs(spec: FederationSpec) -> list[tuple[str, str]]:
    """Each pool's nodeConfig entries that Flower would not read back as written."""
    return [
        error
        for i, pool in enumerate(spec.supernodes.pools)
        for error in nodeconfig.check(pool.nodeConfig, spec.mode, f"spec.supernodes.pools[{i}].nodeConfig")
    ]


def check_names(federation: str, spec: FederationSpec) -> list[tuple[str, str]]:
    """Generated names must be valid Kubernetes names of the right length."""
    errors = []
    for field, name, kind in names.generated(federation, spec):
        problem = names.problem(name, kind)
        if problem:
            errors.append((field, f"generated {kind} name {name!r} {problem}"))
    return errors


def _kubernetes_field(type_name: str, name: str, value: Any, path: str) -> list[tuple[str, str]]:
    """Check one Kubernetes-typed field (an object, or a list of them) against its definition."""
    if isinstance(value, list):
        errors = [e for i, item in enumerate(value) for e in k8s_schema.check(type_name, item, f"{path}[{i}]")]
    else:
        errors = k8s_schema.check(type_name, value, path)
    if name == "podTemplate" and (value.get("spec") or {}).get("containers"):
        errors.append(
            (
                f"{path}.spec.containers",
                (
                    "containers are built by the function; set images, env, "
                    "resources and volumeMounts in the spec instead"
                ),
            )
        )
    return errors


def _check_kubernetes_types(spec: FederationSpec) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []

    def walk(model: pydantic.BaseModel, field: str) -> None:
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            path = f"{field}.{name}"
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            type_name = extra.get(K8S_TYPE)
            if isinstance(type_name, str) and type_name and value is not None:
                errors.extend(_kubernetes_field(type_name, name, value, path))
            elif isinstance(value, pydantic.BaseModel):
                walk(value, path)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, pydantic.BaseModel):
                        walk(item, f"{path}[{i}]")

    walk(spec, "spec")
    return errors
