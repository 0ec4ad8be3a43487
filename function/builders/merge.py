"""Merges of user lists and pod templates, in a stable order.

The operator merged env and mounts through a Go map, so their order changed
from one reconcile to the next and pods rolled for nothing. Here the first
occurrence of a name keeps its place and later lists win its value.

Builders share the parsed spec's objects instead of copying them: nothing
mutates a manifest after it is built, and serialising it copies anyway.
"""

from __future__ import annotations

from typing import Any

from function.api.spec import VolumeClaimTemplate

# Pod-level fields a podTemplate may set; a set field replaces ours, except
# volumes, imagePullSecrets and initContainers, which are added after ours by
# name (ours write the SuperExec secret the Flower containers start with).
# Containers are the function's and are rejected by validation.
_BY_NAME = ("volumes", "imagePullSecrets", "initContainers")
_OWNED = ("containers",)


def by_name(*lists: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Merge lists of named items: later lists win, first position kept."""
    merged: dict[str, dict[str, Any]] = {}
    for items in lists:
        for item in items or []:
            merged[item["name"]] = item
    return list(merged.values())


def add_missing(base: list[dict[str, Any]], extra: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Append the items of extra whose name base lacks (base wins)."""
    names = {item["name"] for item in base}
    return base + [item for item in extra or [] if item["name"] not in names]


def pod_template(labels: dict[str, str], pod_spec: dict[str, Any], template: dict[str, Any] | None) -> dict[str, Any]:
    """The pod template of a workload: ours, with the user's podTemplate merged in.

    The managed labels win over user labels, since selectors depend on them.
    """
    template = template or {}
    user_meta = template.get("metadata") or {}
    meta: dict[str, Any] = {"labels": {**(user_meta.get("labels") or {}), **labels}}
    if user_meta.get("annotations"):
        meta["annotations"] = dict(user_meta["annotations"])
    spec = dict(pod_spec)
    for key, value in (template.get("spec") or {}).items():
        if key in _OWNED or value is None:
            continue
        spec[key] = add_missing(spec.get(key, []), value) if key in _BY_NAME else value
    return {"metadata": meta, "spec": spec}


def claim_templates(templates: list[VolumeClaimTemplate]) -> list[dict[str, Any]]:
    """StatefulSet volumeClaimTemplates from the spec's claim templates."""
    out = []
    for template in templates:
        meta: dict[str, Any] = {"name": template.metadata.name}
        if template.metadata.labels:
            meta["labels"] = dict(template.metadata.labels)
        if template.metadata.annotations:
            meta["annotations"] = dict(template.metadata.annotations)
        out.append({"metadata": meta, "spec": template.spec})
    return out
