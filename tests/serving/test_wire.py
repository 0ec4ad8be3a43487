"""Struct conversion and the content caches: ints stay ints, equal content shares bytes, other content never."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from function import caching
from function.serving import fn, wire
from support.helpers import BASE, spec, xr


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


def nested(depth: int, leaf: Any = "leaf", key: str = "n") -> Any:
    """leaf inside depth maps (or lists, for key ""), one in the other."""
    for _ in range(depth):
        leaf = [leaf] if key == "" else {key: leaf}
    return leaf


def request_with(place: str, value: Any) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="deep"))
    if place == "xr":
        req.observed.composite.resource.update(xr(dict(BASE, extra=value)))
    elif place == "observed":
        req.observed.composite.resource.update(xr(BASE))
        req.observed.resources["pool-default"].resource.update({"status": {"atProvider": {"manifest": value}}})
    elif place == "required":
        req.observed.composite.resource.update(xr(BASE))
        req.required_resources["ca"].items.add().resource.update({"data": value})
    elif place == "context":
        req.observed.composite.resource.update(xr(BASE))
        req.context.update({"note": value})
    return req


@dataclasses.dataclass(frozen=True)
class Deep:
    reason: str
    place: str
    value: Any
    # The path too_deep names, as far as it goes (it stops at the decoder's depth).
    starts: list[str | int] | None


DEEP = [
    Deep("30 maps under spec fit", "xr", nested(30), None),
    Deep("31 maps under spec do not", "xr", nested(31), ["observed", "composite", "resource", "spec", "extra", "n"]),
    Deep(
        "lists, named by index (a list is two messages a level, a map three)",
        "xr",
        {"a": nested(60, key="")},
        ["observed", "composite", "resource", "spec", "extra", "a", 0, 0],
    ),
    Deep(
        "the second item of a list is named by its index",
        "xr",
        [1, nested(40)],
        ["observed", "composite", "resource", "spec", "extra", 1, "n"],
    ),
    Deep(
        "an observed Object's live state, named by the Object",
        "observed",
        nested(40),
        ["observed", "resources", "pool-default", "resource", "status", "atProvider", "manifest", "n"],
    ),
    Deep(
        "a required resource, by key and item",
        "required",
        nested(40),
        ["required_resources", "ca", "items", "resource", "data", "n"],
    ),
    Deep("the pipeline's context", "context", nested(40), ["context", "note", "n"]),
    Deep("deep but within the context's budget", "context", nested(30), None),
]


@pytest.mark.parametrize("case", DEEP, ids=lambda c: c.reason)
def test_too_deep_finds_what_protobuf_cannot_decode(case):
    data = request_with(case.place, case.value).SerializeToString()
    # The real decoder is the judge: too_deep finds a path exactly when it fails.
    try:
        fnv1.RunFunctionRequest.FromString(data)
        decodes = True
    except DecodeError:
        decodes = False
    path = wire.too_deep(data, fn.REQUEST)
    assert (path is None) is decodes, case.reason
    if case.starts is None:
        assert path is None, case.reason
    else:
        assert path is not None, case.reason
        assert path[: len(case.starts)] == case.starts, case.reason


def test_a_federation_too_deep_to_decode_is_fatal_naming_the_field():
    data = request_with("xr", {"a": nested(120)}).SerializeToString()
    rsp = fnv1.RunFunctionResponse.FromString(fn.run_bytes(data))
    assert rsp.meta.tag == "deep"
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    message = rsp.results[0].message
    assert message.startswith("invalid Federation: spec.extra.a.n.n.n.n.n.n.n.n.n...: nested deeper than"), message
    assert len(rsp.desired.resources) == 0
    assert not rsp.desired.HasField("composite")


def test_deep_observed_state_is_fatal_naming_where_it_is():
    data = request_with("observed", nested(120)).SerializeToString()
    rsp = fnv1.RunFunctionResponse.FromString(fn.run_bytes(data))
    [result] = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message.startswith(
        "cannot read the request: observed.resources.pool-default.resource.status.atProvider.manifest.n"
    ), result.message
    assert len(rsp.desired.resources) == 0


@pytest.mark.parametrize(
    ("reason", "data"),
    [
        ("not protobuf at all", b"\xff\xff\xff\xff"),
        ("a field cut short", fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="t")).SerializeToString()[:-1]),
    ],
)
def test_bytes_that_are_no_request_are_fatal(reason, data):
    rsp = fnv1.RunFunctionResponse.FromString(fn.run_bytes(data))
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL], reason
    assert rsp.results[0].message.startswith("cannot read the request: Error parsing message"), reason
    assert len(rsp.desired.resources) == 0, reason


def test_to_dict_reads_every_map_in_sorted_order():
    # Crossplane sends a Struct's fields in any order; what the function builds
    # from them, and so its encodings' cache keys (caching.Built), has one.
    decoded = wire.to_dict(struct({"b": 1, "a": {"d": [{"f": 1, "e": 2}], "c": 2}}))
    assert list(decoded) == ["a", "b"]
    assert list(decoded["a"]) == ["c", "d"]
    assert list(decoded["a"]["d"][0]) == ["e", "f"]


def request_for(s: dict[str, Any]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t"
    req.observed.composite.resource.update(xr(s))
    return req


ANSWERS = {
    "a Federation, its resources ready or not": spec(BASE),
    "several pools": spec(BASE, supernodes__pools=[{"name": f"p{i}", "replicas": i + 1} for i in range(3)]),
    "a fatal result, nothing composed": spec(BASE, supernodes__pools=[{"name": "p", "replicas": -1}]),
}


@pytest.mark.parametrize("given", ANSWERS.values(), ids=ANSWERS.keys())
def test_the_served_bytes_are_the_response_run_returns(given):
    # run_bytes writes the composed resources' bytes after the rest of the
    # response; decoded, that is the same message as run's, every time.
    data = request_for(given).SerializeToString()
    served = fn.run_bytes(data)
    assert fnv1.RunFunctionResponse.FromString(served) == fn.run(request_for(given))
    assert fn.run_bytes(data) == served


def test_composed_resources_are_written_as_protobuf_writes_them():
    # desired_resources against the library's own encoding of the same field.
    composed = {"b": (wire.struct_bytes({"x": 1}), fnv1.READY_TRUE), "a": (wire.struct_bytes({}), fnv1.READY_FALSE),
                "c": (wire.struct_bytes({"y": [True]}), fnv1.READY_UNSPECIFIED)}  # fmt: skip
    want = fnv1.RunFunctionResponse()
    for name, (data, ready) in sorted(composed.items()):
        want.desired.resources[name].resource.ParseFromString(data)
        want.desired.resources[name].ready = ready
    assert fnv1.RunFunctionResponse.FromString(wire.desired_resources(composed)) == want
    assert wire.desired_resources(composed) == want.SerializeToString(deterministic=True)
    assert wire.desired_resources({}) == b""


@pytest.mark.parametrize(
    ("reason", "data", "expected"),
    [
        ("the field first, then others", wire.delimited(1, b"meta") + b"\x12\x00", (b"meta", b"\x12\x00")),
        ("the field alone, empty", wire.delimited(1, b""), (b"", b"")),
        ("a length past 127: two bytes of it", wire.delimited(1, b"x" * 300), (b"x" * 300, b"")),
        ("another field first", b"\x12\x00" + wire.delimited(1, b"meta"), None),
        ("a length past the end", b"\x0a\x05abc", None),
        ("a length cut short", b"\x0a\x80", None),
        ("a length longer than any varint", b"\x0a" + b"\xff" * 11, None),
        ("nothing", b"", None),
    ],
)
def test_leading_reads_only_a_whole_first_field(reason, data, expected):
    assert wire.leading(data, 1) == expected, reason
