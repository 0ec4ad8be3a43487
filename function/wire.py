"""Between the protobuf Structs Crossplane sends and receives and the plain dicts the function works on.

The SDK converts both ways (crossplane.function.resource), with two gaps this
module fills: a Struct carries every number as a double, so decoding gives
whole numbers back as ints (Kubernetes wants `replicas: 2`, not `2.0`); and
encoding, most of a call's cost, is cached by content.
"""

from __future__ import annotations

from typing import Any

from crossplane.function import resource
from google.protobuf import struct_pb2 as structpb

from function import caching


def integral(value: Any) -> Any:
    """Give every whole float in value back as an int, in dicts and lists too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def to_dict(struct: structpb.Struct) -> dict[str, Any]:
    """A Struct as a dict, whole numbers as ints."""
    decoded: dict[str, Any] = integral(resource.struct_to_dict(struct))
    return decoded


def struct_bytes(obj: dict[str, Any]) -> bytes:
    """Serialise obj as a Struct: the same bytes for the same content, whatever the order of its maps."""
    return _encoded(caching.Content(obj))


@caching.memoize()
def _encoded(content: caching.Content) -> bytes:
    # Struct.update is what the SDK's resource.update uses; its dict_to_struct
    # (json_format.ParseDict) is about 1.5 times slower on this path.
    struct = structpb.Struct()
    struct.update(content.value)
    # Map entries sorted: equal content, equal bytes, whichever order was seen first.
    return struct.SerializeToString(deterministic=True)
