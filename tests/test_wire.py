"""Struct conversion and the content caches: ints stay ints, equal content shares bytes, other content never."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import caching, fn, wire
from helpers import BASE, xr


def struct(obj: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(obj)
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    given: dict[str, Any]
    want: dict[str, Any]


DECODE = [
    Case("whole numbers come back as ints", {"replicas": 2, "port": 9092}, {"replicas": 2, "port": 9092}),
    Case("fractions stay floats", {"ratio": 2.5}, {"ratio": 2.5}),
    Case(
        "inside lists and maps too",
        {"a": [1, {"b": 3}], "c": {"d": [0]}},
        {"a": [1, {"b": 3}], "c": {"d": [0]}},
    ),
    Case(
        "other values as they are",
        {"s": "2", "t": True, "f": False, "n": None, "e": {}, "l": []},
        {"s": "2", "t": True, "f": False, "n": None, "e": {}, "l": []},
    ),
]


@pytest.mark.parametrize("case", DECODE, ids=lambda c: c.reason)
def test_to_dict(case):
    # As text, 2 and 2.0 differ.
    assert caching.Content(wire.to_dict(struct(case.given))).text == caching.Content(case.want).text


def test_struct_bytes_decode_to_what_struct_update_builds():
    obj = {"a": {"b": [1, 2.5, "x", True, None, {}, []], "c": {}}, "d": [], "e": "", "f": 0, "g": False}
    decoded = struct_pb2.Struct()
    decoded.ParseFromString(wire.struct_bytes(obj))
    assert decoded == struct(obj)


@dataclasses.dataclass(frozen=True)
class Pair:
    reason: str
    first: dict[str, Any]
    second: dict[str, Any]
    same: bool


PAIRS = [
    Pair("map order does not matter", {"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": 3, "c": 2}, "a": 1}, same=True),
    Pair("list order does", {"a": [1, 2]}, {"a": [2, 1]}, same=False),
    Pair("an int is not a bool", {"a": 1}, {"a": True}, same=False),
    Pair("a float is not an int", {"a": 1.5}, {"a": 1}, same=False),
    Pair("a string is not a number", {"a": "1"}, {"a": 1}, same=False),
    Pair("null is not an empty map", {"a": None}, {"a": {}}, same=False),
]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.reason)
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_struct_bytes_share_only_equal_content(pair, warm):
    caching.clear_caches()
    if warm:
        wire.struct_bytes(pair.first)
    first, second = wire.struct_bytes(pair.first), wire.struct_bytes(pair.second)
    assert (first == second) is pair.same
    decoded = struct_pb2.Struct()
    decoded.ParseFromString(second)
    assert decoded == struct(pair.second)


def test_cleared_caches_give_the_same_response():
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr(BASE))
    warm = fn.run(req)
    caching.clear_caches()
    cold = fn.run(req)
    assert [r.message for r in cold.results] == []
    assert cold.SerializeToString(deterministic=True) == warm.SerializeToString(deterministic=True)
