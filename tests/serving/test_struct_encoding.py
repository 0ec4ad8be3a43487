"""wire.encode_struct writes the bytes protobuf writes: Struct.update, then SerializeToString(deterministic=True).

The composed resources go out as these bytes (wire.struct_bytes), so they must
be protobuf's to the byte: the same content, the same bytes, whichever writes
them. What protobuf refuses, the encoder refuses with the same exception type.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from function.serving import wire
from support.peers import IN_CI


def protobuf(value: dict[str, Any]) -> bytes:
    out = wire.structpb.Struct()
    out.update(value)
    return out.SerializeToString(deterministic=True)


def outcome(encode: Any, value: dict[str, Any]) -> bytes | type[BaseException]:
    """encode(value)'s bytes, or the type of what it raised."""
    try:
        return encode(value)
    except Exception as e:  # the exception's type is the outcome compared
        return type(e)


def nan(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


class Color(enum.IntEnum):
    RED = 1


class Name(enum.StrEnum):
    SUPERLINK = "superlink"


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    value: dict[str, Any]


CASES = [
    Case("no field at all", {}),
    Case("an empty key and an empty string: a oneof's default is written when set", {"": ""}),
    Case("0.0 is written, not left out as proto3's default", {"a": 0.0}),
    Case("-0.0 keeps its sign bit", {"a": -0.0}),
    Case("false is written too", {"a": False}),
    Case("true", {"a": True}),
    Case("null: the enum's one value, 0", {"a": None}),
    Case("an empty map is a struct_value of no fields", {"a": {}}),
    Case("an empty list is a list_value of no values", {"a": []}),
    Case("lists of empty lists and maps", {"a": [[], {}, [[]], [{}]]}),
    Case("an int is a double", {"replicas": 2, "port": 9092, "negative": -7}),
    Case("a bool is not an int (bool before int)", {"t": True, "one": 1, "f": False, "zero": 0}),
    Case("past 2**53 an int rounds to the nearest double, half to even", {"a": 2**53 + 1, "b": 2**53 + 3}),
    Case("past 2**63", {"a": 2**63 + 1, "b": -(2**64)}),
    Case("the largest double as an int", {"a": 2**1024 - 2**971}),
    Case("NaN, with its payload and sign as they are", {"a": math.nan, "b": -math.nan, "c": nan(0x7FF0000000000001)}),
    Case("infinities", {"a": math.inf, "b": -math.inf}),
    Case("the smallest subnormal", {"a": 5e-324}),
    Case("keys by their UTF-8 bytes: code point order", {"z": 1, "é": 2, "\uffff": 3, "\U0001f600": 4, "A": 5}),
    Case("a key that begins another goes after it, as upb writes", {"name": 1, "namespace": 2, "nam": 3, "n": 4}),
    Case("a prefix after a longer key's non-ASCII byte too", {"x": 1, "xé": 2, "x\x00": 3, "x\x7f": 4}),
    Case("a key beside one of the highest code point", {"x": 1, "x\U0010ffff": 2, "x\U0010ffff\U0010ffff": 3}),
    Case("an empty key goes after every other", {"": 1, "a": 2, "\x00": 3}),
    Case("the order of a map as given does not matter", {"b": 1, "a": {"d": 1, "c": 2}}),
    Case("non-ASCII strings and NUL", {"a": "ünïcødé \U0001f600", "b": "\x00"}),
    Case("a string of 127 bytes: the last one-byte length", {"a": "x" * 127}),
    Case("a string of 128 bytes: a two-byte length", {"a": "x" * 128}),
    Case("a key of 200 bytes", {"k" * 200: "v"}),
    Case("an entry just past a one-byte length", {"a": "x" * 120, "b": "x" * 121, "c": "x" * 122}),
    Case("a value of 3 bytes of length", {"a": ["x" * 20000]}),
    Case("deep", {"a": {"b": {"c": {"d": [[[{"e": None}]]]}}}}),
    Case("a tuple is a list", {"a": (1, "b", (None,))}),
    Case("subclasses of the plain types as their plain values", {"a": Color.RED, "b": Name.SUPERLINK}),
    Case("a bool inside a list", {"a": [True, 1, 1.0, False, 0]}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason)
def test_the_same_bytes_as_protobuf(case):
    assert wire.encode_struct(case.value) == protobuf(case.value)


REFUSED = [
    Case("an int past the largest double: OverflowError", {"a": 2**1024}),
    Case("an int that would round up past it too", {"a": 2**1024 - 2**970}),
    Case("a surrogate in a string: UnicodeEncodeError", {"a": "\ud800"}),
    Case("a surrogate in a key", {"\udfff": 1}),
    Case("a key not a str: TypeError", {1: "a"}),
    Case("a value of another type: ValueError", {"a": object()}),
    Case("bytes are not a string", {"a": b"x"}),
    Case("nor a set a list", {"a": {1}}),
    Case("deep inside a list", {"a": [{"b": [object()]}]}),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.reason)
def test_what_protobuf_refuses_is_refused_alike(case):
    refused = outcome(protobuf, case.value)
    assert isinstance(refused, type)
    assert outcome(wire.encode_struct, case.value) is refused


def test_a_struct_message_as_a_value_is_refused():
    # Struct.update takes a Struct or ListValue message as a value; the function builds none.
    with pytest.raises(ValueError, match="Unexpected type"):
        wire.encode_struct({"a": wire.structpb.Struct()})


# JSON-like values: every key and string any unicode but a surrogate (st.text's default,
# refused alike, above), ints past a double's range, every float (NaN, -0.0, infinities).
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**1030), max_value=2**1030)
    | st.floats()
    | st.sampled_from([0.0, -0.0, 2**53 + 1, 2**1024 - 2**971])
    | st.text()
)
KEYS = st.text() | st.sampled_from(["", "name", "namespace", "nam", "a", "é", "\U0010ffff"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=40,
)


@settings(
    max_examples=200,
    deadline=None,
    # CI runs the same examples every time, so a red run can be run again as it was.
    derandomize=IN_CI,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.dictionaries(KEYS, VALUES, max_size=8))
@example({"name": "x", "namespace": "y", "labels": {"": "", "a": [0.0, -0.0, False, None, {}, []]}})
def test_generated_values_give_protobufs_bytes(value):
    assert outcome(wire.encode_struct, value) == outcome(protobuf, value)
