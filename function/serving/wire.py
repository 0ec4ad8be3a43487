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

from collections.abc import Iterable, Iterator, Mapping
from struct import Struct as Packed
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
    return encode_struct(content.value)


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


# The wire types of integers and enums, of doubles, and of strings, bytes and messages.
VARINT, FIXED64, LENGTH_DELIMITED = 0, 1, 2


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


def delimited(number: int, payload: bytes) -> bytes:
    """The length-delimited field number (a string, bytes or message) holding payload."""
    return _delimited(number, payload)


def leading(data: bytes, number: int) -> tuple[bytes, bytes] | None:
    """(payload, rest) if a serialized message starts with the length-delimited field number; None if not."""
    head = _varint(number << 3 | LENGTH_DELIMITED)
    if not data.startswith(head):
        return None
    size, start = 0, len(head)
    for shift in range(0, 64, 7):
        if start >= len(data):
            return None
        byte = data[start]
        start += 1
        size |= (byte & SEVEN_BITS) << shift
        if not byte & MORE:
            break
    else:  # longer than any varint
        return None
    if start + size > len(data):
        return None
    return data[start : start + size], data[start + size :]


# A varint's byte: seven bits of the number, the eighth set on all but the last.
SEVEN_BITS, MORE = 0x7F, 0x80


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > SEVEN_BITS:
        out.append(value & SEVEN_BITS | MORE)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_struct(obj: Mapping[str, Any]) -> bytes:
    """The google.protobuf.Struct of obj, serialized: Struct.update(obj)'s SerializeToString(deterministic=True).

    Written straight from the plain value (str, int, float, bool, None, list,
    tuple and dict, and their subclasses), without building the message.
    What Struct.update refuses is refused alike: a key not a str (TypeError),
    a surrogate in a string (UnicodeEncodeError), an int too large for a
    double (OverflowError), a value of any other type (ValueError); and so is
    a Struct or ListValue message, which Struct.update would take (the
    function builds none). tests/serving/test_struct_encoding.py holds the two
    to the same bytes.

    Each map's parts are joined once: a field's tag and one-byte length come
    from a table (_heads), and a string value, most of a composed resource,
    is written without a call.
    """
    parts: list[bytes] = []
    for key in _sorted_keys(obj):
        name = _utf8(key)  # a TypeError for a key not a str, as Struct's map gives
        value = obj[key]
        if type(value) is str:
            data = _utf8(value)
            size, name_size = len(data), len(name)
            # The entry (its key's and its value's heads, then the string's) fits a one-byte length.
            if name_size + size <= SEVEN_BITS - _STRING_ENTRY_HEADS:
                parts += (
                    _ENTRY[name_size + size + _STRING_ENTRY_HEADS],
                    _KEY[name_size],
                    name,
                    _VALUE[size + _STRING_HEAD],
                    _STRING[size],
                    data,
                )
                continue
            value = _delimited_by(_STRING, data)
        else:
            value = _value(value)
        parts += _entry(name, value)
    return b"".join(parts)


def _entry(name: bytes, value: bytes) -> tuple[bytes, ...]:
    """A map entry of Struct.fields: name and the Value's bytes, as the parts of a field."""
    name_size, size = len(name), len(value)
    if name_size + size <= SEVEN_BITS - _ENTRY_HEADS:
        return (_ENTRY[name_size + size + _ENTRY_HEADS], _KEY[name_size], name, _VALUE[size], value)
    entry = _delimited_by(_KEY, name) + _delimited_by(_VALUE, value)
    return (_delimited_by(_ENTRY, entry),)


def _sorted_keys(obj: Mapping[str, Any]) -> Iterable[str]:
    """The keys of obj in the order deterministic serialization writes a map's string keys.

    protobuf's upb sorts them by their UTF-8 bytes, which is the order of
    their code points, str's, but a key that begins another goes after it
    ("namespace", then "name"): upb compares the bytes both have, then the
    lengths, and writes the message from its end. So str's order, unless a
    key is a prefix of the next (rare: a few maps in a hundred).
    """
    if len(obj) < 2:  # noqa: PLR2004 - one key or none: no order to find
        return obj
    keys = sorted(obj)
    if any(map(str.startswith, keys[1:], keys)):
        # No UTF-8 text holds the byte 0xFF: after it, a key's end sorts after every longer key's next byte.
        keys.sort(key=_after_its_extensions)
    return keys


def _after_its_extensions(key: str) -> bytes:
    return _utf8(key) + b"\xff"


def _value(value: Any) -> bytes:  # noqa: PLR0911 - a return per kind of Value: a table would cost a call each
    # By exact type, the most frequent first; Struct.update's isinstance
    # order (bool before int, as a bool is an int) for anything else, in _plain.
    kind = type(value)
    if kind is dict:
        return _delimited_by(_MAP, encode_struct(value))
    if kind is str:
        return _delimited_by(_STRING, _utf8(value))
    if kind is list:
        return _delimited_by(_LIST, b"".join([_delimited_by(_ITEM, _value(item)) for item in value]))
    if kind is int:
        # As Struct's number_value: the int rounded to the nearest double,
        # an OverflowError past the largest (float's own).
        return _NUMBER + _double(float(value))
    if kind is float:
        return _NUMBER + _double(value)
    if kind is bool:
        return _TRUE if value else _FALSE
    if value is None:
        return _NULL
    return _value(_plain(value))


def _plain(value: Any) -> Any:
    """A value of a plain type's subclass, or a tuple, as the plain type's value; what Struct refuses, refused."""
    # bool is never subclassed; str(value) would be the subclass's __str__ (an Enum's name).
    for kind, plain in _PLAIN_OF:
        if isinstance(value, kind):
            return plain(value)
    msg = "Unexpected type"  # Struct.update's words
    raise ValueError(msg)


_PLAIN_OF: tuple[tuple[type | tuple[type, ...], Any], ...] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
    (dict, dict),
    ((list, tuple), list),
)


def _delimited_by(heads: tuple[bytes, ...], payload: bytes) -> bytes:
    """A length-delimited field of payload, its tag (and a one-byte length) taken from heads."""
    size = len(payload)
    if size <= SEVEN_BITS:
        return heads[size] + payload
    return heads[0][:-1] + _varint(size) + payload  # the tag, then the length


def _heads(message: Any, name: str) -> tuple[bytes, ...]:
    """The tag of message's length-delimited field name, then each length below 128 (one byte): 128 heads."""
    tag = _varint(_field_number(message, name) << 3 | LENGTH_DELIMITED)
    return tuple(tag + bytes((size,)) for size in range(SEVEN_BITS + 1))


def _tag(message: Any, name: str, wire_type: int) -> bytes:
    return _varint(_field_number(message, name) << 3 | wire_type)


_utf8 = str.encode
# A double as fixed64 writes it: eight bytes, little-endian.
_double = Packed("<d").pack
_ENTRY = _heads(structpb.Struct, "fields")
_ITEM = _heads(structpb.ListValue, "values")
_KEY = _heads(structpb.Struct.FieldsEntry, "key")
_VALUE = _heads(structpb.Struct.FieldsEntry, "value")
_STRING = _heads(structpb.Value, "string_value")
_MAP = _heads(structpb.Value, "struct_value")
_LIST = _heads(structpb.Value, "list_value")
# The bytes of a map entry's heads with one-byte lengths (2 each, as the fields' numbers are below 16).
_ENTRY_HEADS = len(_KEY[0]) + len(_VALUE[0])
_STRING_HEAD = len(_STRING[0])
_STRING_ENTRY_HEADS = _ENTRY_HEADS + _STRING_HEAD
_NULL = _tag(structpb.Value, "null_value", VARINT) + _varint(structpb.NULL_VALUE)
_NUMBER = _tag(structpb.Value, "number_value", FIXED64)
# A oneof's field is written when set, its default (false, 0, "") too.
_TRUE = _tag(structpb.Value, "bool_value", VARINT) + _varint(1)
_FALSE = _tag(structpb.Value, "bool_value", VARINT) + _varint(0)


# protobuf's decoder (upb) refuses a message nested deeper than this, so that
# deep input cannot overflow its stack; a level of JSON in a Struct is three
# messages (the Struct, its map entry, the Value).
MAX_MESSAGE_DEPTH = 100


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
