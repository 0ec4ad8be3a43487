"""The answers the server remembers (function/serving/answers.py): the same question answered as composing would.

Each case composes for real (fn.run_bytes) and compares what memory answers
with what composing the second request answers: byte for byte.
"""

from __future__ import annotations

import copy
import pathlib

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.serving import answers, fn
from support import served
from support.helpers import BASE, spec, xr


def request(federation: dict, *, tag: str = "t1", observed: dict | None = None) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=tag))
    req.observed.composite.resource.update(xr(federation))
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    return req


def kept(given: answers.Answers, req: fnv1.RunFunctionRequest) -> bytes:
    """Compose req and remember the answer; the answer."""
    data = req.SerializeToString()
    answer = fn.run_bytes(data)
    given.keep(given.asked(data), answer)
    return answer


def observed_in_order(names: list[str]) -> bytes:
    """A request whose observed resources are written in the order of names: as Crossplane writes a map."""
    base = request(BASE).SerializeToString()
    entries = b""
    for name in names:
        one = fnv1.RunFunctionRequest()
        one.observed.resources[name].resource.update({"apiVersion": "v1", "kind": "Object", "metadata": {"name": name}})
        entries += one.SerializeToString()
    return base + entries  # a message field seen again is merged; a map's entries are added


def test_the_same_question_with_another_tag_gets_what_composing_it_gives():
    given = answers.Answers()
    kept(given, request(BASE, tag="first"))
    again = request(BASE, tag="second").SerializeToString()
    remembered = given.answer(given.asked(again))
    assert remembered == fn.run_bytes(again)
    assert fnv1.RunFunctionResponse.FromString(remembered).meta.tag == "second"


def test_maps_written_in_another_order_ask_the_same():
    given = answers.Answers()
    first, second = observed_in_order(["a", "b", "c"]), observed_in_order(["c", "a", "b"])
    assert first != second, "the same bytes: this tests nothing"
    assert given.asked(first).key == given.asked(second).key
    given.keep(given.asked(first), fn.run_bytes(first))
    assert given.answer(given.asked(second)) == fn.run_bytes(second)


@pytest.mark.parametrize(
    ("reason", "other"),
    [
        ("another spec: a pool's replicas", lambda: request(spec(supernodes__pools__0__replicas=3))),
        ("an observed Object more", lambda: request(BASE, observed={"superlink": {"apiVersion": "v1", "kind": "X"}})),
        ("the same spec under another name", lambda: _renamed(request(BASE))),
        ("the same request asked with an input", lambda: _with_input(request(BASE))),
    ],
)
def test_another_question_is_not_answered_from_memory(reason, other):
    given = answers.Answers()
    kept(given, request(BASE))
    assert given.answer(given.asked(other().SerializeToString())) is None, reason


def _renamed(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    req.observed.composite.resource["metadata"]["name"] = "other"
    return req


def _with_input(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    req.input.update({"apiVersion": "flower.example.org/v1alpha1", "kind": "Policy"})
    return req


@pytest.mark.parametrize(
    ("reason", "federation"),
    [
        ("a refused spec: the next call must compose and say why again", {**BASE, "superlink": {"replicas": "x"}}),
        ("a release the function cannot serve", spec(superlink__image="flwr/superlink:1.20.0")),
    ],
)
def test_an_answer_with_a_fatal_result_is_not_kept(reason, federation):
    given = answers.Answers()
    answer = kept(given, request(federation))
    fatal = [r for r in fnv1.RunFunctionResponse.FromString(answer).results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal, f"{reason}: composing gave no fatal result; this tests nothing"
    assert given.answer(given.asked(request(federation).SerializeToString())) is None, reason


def test_a_request_protobuf_cannot_decode_is_never_answered_from_memory():
    given = answers.Answers()
    broken = b"\x0a\xff"  # a meta field longer than the request
    asked = given.asked(broken)
    assert asked.key is None
    given.keep(asked, fn.run_bytes(broken))
    assert given.answer(asked) is None


def test_the_least_recently_used_answers_go_first_within_the_bound():
    one, two, three = (request(spec(supernodes__pools__0__replicas=n)) for n in (1, 2, 3))
    size = len(fn.run_bytes(one.SerializeToString()))
    given = answers.Answers(max_bytes=2 * size + size // 2)  # room for two
    kept(given, one)
    kept(given, two)
    assert given.answer(given.asked(one.SerializeToString())) is not None  # one is now the most recent
    kept(given, three)
    assert given.answer(given.asked(two.SerializeToString())) is None, "the least recently used was kept"
    assert given.answer(given.asked(one.SerializeToString())) is not None
    assert given.answer(given.asked(three.SerializeToString())) is not None


def test_an_answer_larger_than_the_bound_is_not_kept():
    given = answers.Answers(max_bytes=100)
    kept(given, request(BASE))
    assert given.answer(given.asked(request(BASE).SerializeToString())) is None


def test_no_answer_is_kept_with_a_bound_of_nothing():
    given = answers.Answers(max_bytes=0)
    kept(given, request(BASE))
    assert given.answer(given.asked(request(BASE).SerializeToString())) is None


def test_the_served_function_answers_a_question_asked_before_without_composing(tmp_path: pathlib.Path):
    """Over real gRPC, the function as served: the second call's answer is the first's with its own tag,
    and no worker composed it (a worker logs each call it composes, with --debug)."""
    port = served.free_port()
    log = tmp_path / "function.log"
    proc = served.serve("--insecure", "--debug", port=port, log=log)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            first = stub.RunFunction(request(BASE, tag="first"), timeout=60)
            second = stub.RunFunction(request(BASE, tag="second"), timeout=60)
            other = stub.RunFunction(request(spec(supernodes__pools__0__replicas=3), tag="third"), timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert (first.meta.tag, second.meta.tag, other.meta.tag) == ("first", "second", "third")
    assert first.desired.resources, "nothing composed: this tests nothing"
    expected = copy.deepcopy(first)
    expected.meta.tag = "second"
    assert second == expected
    assert other.desired.resources != first.desired.resources
    composed = [line for line in log.read_text().splitlines() if "ran function" in line]
    assert len(composed) == 2, composed  # the first and the third
