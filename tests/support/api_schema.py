"""The Federation XRD's schema as the API server reads it: its spec and status, and its defaulting."""

from __future__ import annotations

from typing import Any

import yaml

from support.peers import ROOT

XRD = yaml.safe_load((ROOT / "apis" / "definition.yaml").read_text())
SPEC_SCHEMA = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
STATUS_SCHEMA = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural-schema defaulting, as the API server does it."""
    if schema.get("type") == "object" and isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = sub["default"]
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    if schema.get("type") == "array" and isinstance(value, list):
        return [apply_defaults(schema["items"], v) for v in value]
    return value
