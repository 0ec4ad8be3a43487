"""Between the protobuf Structs Crossplane sends and receives and the plain dicts the function works on.

The SDK converts both ways (crossplane.function.resource); this module does
it with two differences: a Struct carries every number as a double, so
decoding gives whole numbers back as ints (Kubernetes wants `replicas: 2`,
not `2.0`), and encoding, most of a call's cost, is cached by content.

The response's composed resources go out as those cached bytes, written
into the response's own (desired_resources), never parsed again.

It also reads what protobuf's decoder cannot: where a request nests too
deep, and a field of a message that does not decode.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import empty_pb2
from google.protobuf import struct_pb2 as structpb
from google.protobuf.descriptor import Descriptor
from google.protobuf.unknown_fields import UnknownFieldSet

from function import caching


def to_dict(struct: structpb.Struct) -> dict[str, Any]:
    """A Struct as a dict, whole numbers as ints, every map's keys in sorted order.

    One pass over the Struct's fields: the SDK's struct_to_dict goes through
    json_format, which took most of a call with hundreds of observed Objects
    (benchmarks/bench_clusters.py). Sorted because a Struct's fields are a
    map, which Crossplane sends in a different order on every call: what the
    function builds from them then has one order, and its encoding's cache key
    (caching.Built) one key.
    """
    return {key: _decoded(value) for key, value in sorted(struct.fields.items())}


def _decoded(value: structpb.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {key: _decoded(v) for key, v in sorted(value.struct_value.fields.items())}
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
    return _encoded(caching.Built(obj))


@caching.memoize()
def _encoded(content: caching.Built) -> bytes:
    # Struct.update is what the SDK's resource.update uses; its dict_to_struct
    # (json_format.ParseDict) is about 1.5 times slower on this path.
    struct = structpb.Struct()
    struct.update(content.value)
    # Map entries sorted: equal content, equal bytes, whichever order was seen first.
    return struct.SerializeToString(deterministic=True)


def desired_resources(composed: Mapping[str, tuple[bytes, int]]) -> bytes:
    """A RunFunctionResponse's `desired` field with only the composed resources: name -> (Struct bytes, ready).

    Written as bytes, not built as messages: appended to a serialized
    response, it merges into the response's own `desired` (a message field
    seen twice is merged; a map's entries are added), so each cached Struct
    goes out as it is, never parsed. Entries by name, so the same resources
    are the same bytes. b"" for none.
    """
    if not composed:
        return b""
    entries = []
    for name in sorted(composed):
        struct, ready = composed[name]
        resource = _delimited(_RESOURCE_STRUCT, struct)
        if ready:  # the enum's default, 0, is not written
            resource += _varint(_RESOURCE_READY << 3 | VARINT) + _varint(ready)
        entry = _delimited(MAP_KEY, name.encode()) + _delimited(MAP_VALUE, resource)
        entries.append(_delimited(_STATE_RESOURCES, entry))
    return _delimited(_RESPONSE_DESIRED, b"".join(entries))


def _field_number(message: Any, name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)


_RESPONSE_DESIRED = _field_number(fnv1.RunFunctionResponse, "desired")
_STATE_RESOURCES = _field_number(fnv1.State, "resources")
_RESOURCE_STRUCT = _field_number(fnv1.Resource, "resource")
_RESOURCE_READY = _field_number(fnv1.Resource, "ready")
# A map entry's fields, as protobuf defines every map.
MAP_KEY, MAP_VALUE = 1, 2


def _delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | LENGTH_DELIMITED) + _varint(len(payload)) + payload


# A varint's byte: seven bits of the number, the eighth set on all but the last.
SEVEN_BITS, MORE = 0x7F, 0x80


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > SEVEN_BITS:
        out.append(value & SEVEN_BITS | MORE)
        value >>= 7
    out.append(value)
    return bytes(out)


# protobuf's decoder (upb) refuses a message nested deeper than this, so that
# deep input cannot overflow its stack; a level of JSON in a Struct is three
# messages (the Struct, its map entry, the Value).
MAX_MESSAGE_DEPTH = 100

# The wire types of integers and enums, and of strings, bytes and messages.
VARINT, LENGTH_DELIMITED = 0, 2

Path = list[str | int]


def too_deep(data: bytes, message: Descriptor, depth: int = 1) -> Path | None:
    """Where the serialized message of type message nests deeper than its decoder reads, if it does.

    The path is of field names, map keys and list indexes, Structs read as
    JSON. Read without decoding the message itself, which is what failed.
    """
    if depth > MAX_MESSAGE_DEPTH:
        return []
    entry = message.GetOptions().map_entry
    index: dict[int, int] = {}
    for found in _fields(data):
        number = found.field_number
        index[number] = index.get(number, -1) + 1
        spec = message.fields_by_number.get(number)
        if spec is None or spec.message_type is None or found.wire_type != LENGTH_DELIMITED:
            continue
        below = too_deep(bytes(found.data), spec.message_type, depth + 1)
        if below is None:
            continue
        if entry:  # the value of a map: named by its key, field 1
            return [_key(data), *below]
        if message.full_name in _JSON_WRAPPERS:  # Struct.fields, Value.struct_value, Value.list_value
            return below
        if message.full_name == "google.protobuf.ListValue":
            return [index[number], *below]
        return [spec.name, *below]
    return None


_JSON_WRAPPERS = {"google.protobuf.Struct", "google.protobuf.Value"}


def _key(entry: bytes) -> str:
    key = field(entry, 1)
    return "" if key is None else key.decode(errors="replace")


def _fields(data: bytes) -> Iterator[Any]:
    # Parsed as an Empty, every field of a message is unknown, kept undecoded.
    unknown = UnknownFieldSet(empty_pb2.Empty.FromString(data))
    return (unknown[i] for i in range(len(unknown)))


def field(data: bytes, number: int) -> bytes | None:
    """The bytes of the first string, bytes or message field number in a serialized message, undecoded."""
    for found in _fields(data):
        if found.field_number == number and found.wire_type == LENGTH_DELIMITED:
            return bytes(found.data)
    return None
