"""Between the protobuf Structs Crossplane sends and receives and the plain dicts the function works on.

The SDK converts both ways (crossplane.function.resource); this module does
it with two differences: a Struct carries every number as a double, so
decoding gives whole numbers back as ints (Kubernetes wants `replicas: 2`,
not `2.0`), and encoding, most of a call's cost, is cached by content.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2 as structpb

from function import caching


def to_dict(struct: structpb.Struct) -> dict[str, Any]:
    """A Struct as a dict, whole numbers as ints.

    One pass over the Struct's fields: the SDK's struct_to_dict goes through
    json_format, which took most of a call with hundreds of observed Objects
    (benchmarks/bench_clusters.py).
    """
    return {key: _decoded(value) for key, value in struct.fields.items()}


def _decoded(value: structpb.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {key: _decoded(v) for key, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_decoded(v) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


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
