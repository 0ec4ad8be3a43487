"""Turn a raw spec into a FederationSpec, or into errors that name the field.

The XRD rejects most bad input at admission; this module rejects all of it,
with the same messages, for the paths that skip the XRD (a render without
it, an older XRD, an operator manifest).
"""

from __future__ import annotations

from typing import Any

import pydantic

from function import k8s_schema, names, nodeconfig
from function.spec import K8S_TYPE, STATE_VOLUME, FederationSpec


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
    """The rules that need more than one field, in the XRD's order."""
    return [
        *_replicas(spec),
        *_superexec_images(spec),
        *_unique_pool_names(spec),
        *_pool_settings(spec),
        *_tls(spec),
        *_auth_keys(spec),
        *_state_volume(spec),
        *_check_kubernetes_types(spec),
    ]


def _replicas(spec: FederationSpec) -> list[tuple[str, str]]:
    errors = []
    for i, pool in enumerate(spec.supernodes.pools):
        field = f"spec.supernodes.pools[{i}]"
        if spec.mode == "DaemonSet" and pool.replicas is not None:
            errors.append((f"{field}.replicas", "replicas must not be set for pools when mode is DaemonSet"))
        if spec.mode == "StatefulSet" and pool.replicas is None:
            errors.append(
                (
                    f"{field}.replicas",
                    "replicas must be set (>=1) for every pool when mode is StatefulSet",
                )
            )
    return errors


def _superexec_images(spec: FederationSpec) -> list[tuple[str, str]]:
    """SuperExec images go with process isolation, and only with it (the GPU vendor rule rides along)."""
    errors = []
    if spec.isolationMode == "process" and not spec.superlink.superexecImage:
        errors.append(
            (
                "spec.superlink.superexecImage",
                "spec.superlink.superexecImage is required when isolationMode=process",
            )
        )
    if spec.isolationMode == "subprocess" and spec.superlink.superexecImage:
        errors.append(
            (
                "spec.superlink.superexecImage",
                "spec.superlink.superexecImage must be empty when isolationMode=subprocess",
            )
        )
    for i, pool in enumerate(spec.supernodes.pools):
        field = f"spec.supernodes.pools[{i}]"
        sidecar = pool.images.superexecClientApp
        if spec.isolationMode == "process" and not sidecar:
            errors.append(
                (
                    f"{field}.images.superexecClientApp",
                    "spec.supernodes.pools[*].images.superexecClientApp is required when isolationMode=process",
                )
            )
        if spec.isolationMode == "subprocess" and sidecar:
            errors.append(
                (
                    f"{field}.images.superexecClientApp",
                    "spec.supernodes.pools[*].images.superexecClientApp must be empty when isolationMode=subprocess",
                )
            )
        if pool.gpu is not None and pool.gpu.mountAll and not pool.gpu.vendor:
            errors.append(
                (
                    f"{field}.gpu.vendor",
                    "spec.supernodes.pools[*].gpu.vendor is required when gpu.mountAll=true",
                )
            )
    return errors


def _unique_pool_names(spec: FederationSpec) -> list[tuple[str, str]]:
    errors = []
    seen: dict[str, int] = {}
    for i, pool in enumerate(spec.supernodes.pools):
        if pool.name in seen:
            errors.append(
                (
                    f"spec.supernodes.pools[{i}].name",
                    f"spec.supernodes.pools[*].name must be unique: {pool.name!r} is also pools[{seen[pool.name]}]",
                )
            )
        seen.setdefault(pool.name, i)
    return errors


def _pool_settings(spec: FederationSpec) -> list[tuple[str, str]]:
    errors = []
    for i, pool in enumerate(spec.supernodes.pools):
        field = f"spec.supernodes.pools[{i}]"
        errors.extend(nodeconfig.check(pool.nodeConfig, spec.mode, f"{field}.nodeConfig"))
        if pool.volumeClaimTemplates and spec.mode != "StatefulSet":
            errors.append((f"{field}.volumeClaimTemplates", "volumeClaimTemplates need mode StatefulSet"))
    return errors


def _tls(spec: FederationSpec) -> list[tuple[str, str]]:
    errors = []
    if spec.tls is not None and (spec.tls.secretName is None) == (spec.tls.certManager is None):
        errors.append(("spec.tls", "spec.tls needs exactly one of secretName and certManager"))
    if spec.tls is not None and spec.insecure:
        errors.append(("spec.insecure", "spec.insecure must not be true when spec.tls is set"))
    return errors


def _auth_keys(spec: FederationSpec) -> list[tuple[str, str]]:
    if spec.nodeAuthentication is None or not spec.nodeAuthentication.enabled:
        return []
    return [
        (
            f"spec.supernodes.pools[{i}].authKeySecretRef",
            "spec.supernodes.pools[*].authKeySecretRef is required when nodeAuthentication.enabled=true",
        )
        for i, pool in enumerate(spec.supernodes.pools)
        if pool.authKeySecretRef is None
    ]


def _state_volume(spec: FederationSpec) -> list[tuple[str, str]]:
    if spec.superlink.persistence is not None and any(
        t.metadata.name == STATE_VOLUME for t in spec.superlink.volumeClaimTemplates
    ):
        return [
            ("spec.superlink.volumeClaimTemplates", f"the name {STATE_VOLUME!r} is taken by spec.superlink.persistence")
        ]
    return []


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
