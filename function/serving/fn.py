"""The composition function's gRPC shell: a request's fields in, the composition's outcome out.

Everything is decided by function.composition.outcome.decide; this module
only reads the request into plain values and writes the outcome into the
response, and refuses what cannot reach the composition at all (a request
protobuf cannot decode, a response Crossplane could not read), with the
composition's words for it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.message import DecodeError

from function.composition import outcome
from function.serving import wire

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor


# Crossplane reads a function's response with gRPC's default limit, 4 MiB;
# what is left is room for the results and framing.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024 - 64 * 1024


@dataclasses.dataclass
class Answer:
    """A response, and the resources it composed as serialized Structs, with whether each is ready.

    Kept apart until sent: run_bytes writes them into the response's bytes as
    they are (wire.desired_resources), where parsing each into the response
    and serializing it again took a tenth of a call.
    """

    rsp: fnv1.RunFunctionResponse
    # name -> (the Struct's bytes, fnv1.READY_TRUE or READY_FALSE)
    composed: dict[str, tuple[bytes, fnv1.Ready]] = dataclasses.field(default_factory=dict)
    # resources_field's bytes, once written: the size check and the response share them.
    _field: bytes | None = dataclasses.field(default=None, init=False, repr=False)

    def message(self) -> fnv1.RunFunctionResponse:
        """The whole response as one message, resources parsed in."""
        for name, (struct, ready) in self.composed.items():
            self.rsp.desired.resources[name].resource.ParseFromString(struct)
            self.rsp.desired.resources[name].ready = ready
        self.composed = {}
        self._field = None
        return self.rsp

    def serialized(self) -> bytes:
        """The whole response's bytes: a second `desired` field after the response's merges the resources in."""
        return self.rsp.SerializeToString() + self.resources_field()

    def resources_field(self) -> bytes:
        """The `desired` field that carries the composed resources, b"" without any."""
        if self._field is None:
            self._field = wire.desired_resources(self.composed)
        return self._field


def _composed(obj: dict[str, Any], *, ready: bool) -> tuple[bytes, fnv1.Ready]:
    """A composed resource as Answer keeps it."""
    return wire.struct_bytes(obj), fnv1.READY_TRUE if ready else fnv1.READY_FALSE


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Answer one request; every failure is a fatal result with no desired resources."""
    return answer(req).message()


def answer(req: fnv1.RunFunctionRequest) -> Answer:
    """Answer one request (see run), the composed resources kept serialized."""
    rsp = response.to(req)
    decided = outcome.decide(
        wire.to_dict(req.observed.composite.resource),
        {name: wire.to_dict(r.resource) for name, r in req.observed.resources.items()},
        {key: [wire.to_dict(i.resource) for i in answered.items] for key, answered in req.required_resources.items()},
        wire.to_dict(req.input) if req.HasField("input") else None,
    )
    if decided.refusal is not None:
        return Answer(fatal(rsp, decided.refusal))
    return _within_limit(_written(rsp, decided), decided.kind)


def _written(rsp: fnv1.RunFunctionResponse, decided: outcome.Outcome) -> Answer:
    """The outcome written into rsp (status, readiness, what to read next, conditions, warnings)."""
    if decided.status is not None:
        # Not the SDK's update_status: it leaves out unset fields, where the ones
        # left out here are those set to None (no generation, no external address).
        resource.update(rsp.desired.composite, {"status": decided.status})
    if decided.composite_ready is not None:
        rsp.desired.composite.ready = fnv1.READY_TRUE if decided.composite_ready else fnv1.READY_FALSE
    for need in decided.requirements:
        if need.match_name is not None:
            response.require_resources(rsp, need.key, need.api_version, need.kind, match_name=need.match_name,
                                       namespace=need.namespace)  # fmt: skip
        else:
            labels = dict(need.match_labels or {})
            response.require_resources(rsp, need.key, need.api_version, need.kind, match_labels=labels,
                                       namespace=need.namespace)  # fmt: skip
    if decided.conditions:
        response.set_conditions(rsp, *decided.conditions)
        for condition in rsp.conditions:
            # On the claim too: a tenant may often read the claim alone, not its composite.
            condition.target = fnv1.TARGET_COMPOSITE_AND_CLAIM
    for warning in decided.warnings:
        # Crossplane makes each an event; on the claim too, where a claim's user looks (`kubectl describe`).
        rsp.results.append(
            fnv1.Result(severity=fnv1.SEVERITY_WARNING, message=warning, target=fnv1.TARGET_COMPOSITE_AND_CLAIM)
        )
    if decided.ttl is not None:
        rsp.meta.ttl.FromTimedelta(decided.ttl)
    return Answer(rsp, {name: _composed(obj, ready=decided.ready.get(name, False))
                        for name, obj in decided.desired.items()})  # fmt: skip


def _within_limit(composed: Answer, kind: str) -> Answer:
    """composed, or a fatal result if Crossplane could not read it (a gRPC error that names nothing)."""
    size = composed.rsp.ByteSize() + len(composed.resources_field())
    if size <= MAX_RESPONSE_BYTES:
        return composed
    return Answer(fatal(composed.rsp, outcome.too_large(kind, len(composed.composed), size)))


def fatal(rsp: fnv1.RunFunctionResponse, message: str) -> fnv1.RunFunctionResponse:
    """Turn rsp into a fatal result with message, with nothing desired."""
    # A fatal result stops the pipeline before anything is applied or deleted,
    # so returning no desired resources here never removes live ones.
    rsp.desired.resources.clear()
    rsp.desired.ClearField("composite")
    response.fatal(rsp, message)
    return rsp


def run_bytes(data: bytes) -> bytes:
    """The serialized response to a serialized request (see run): what the server hands the workers."""
    try:
        req = fnv1.RunFunctionRequest.FromString(data)
    except DecodeError as err:
        return undecodable(data, err).SerializeToString()
    composed = answer(req)
    logging.get_logger().bind(tag=req.meta.tag).debug(
        "ran function", resources=len(composed.composed), results=len(composed.rsp.results)
    )
    return composed.serialized()


# The stubs type a generated message's DESCRIPTOR as the pure-Python class or
# upb's; either is the one interface too_deep uses.
REQUEST = cast("Descriptor", fnv1.RunFunctionRequest.DESCRIPTOR)


def undecodable(data: bytes, err: DecodeError) -> fnv1.RunFunctionResponse:
    """A fatal result for a request protobuf cannot decode, naming where it nests too deep if it does.

    The API server stores, and Crossplane sends, JSON nested far deeper than
    protobuf's decoder reads (100 messages, about 30 levels of a Federation's
    maps and lists) in the fields of Kubernetes types that keep unknown fields.
    """
    rsp = answer_to(data)
    try:
        path = wire.too_deep(data, REQUEST)
    except DecodeError:  # not a protobuf message at all
        path = None
    if not path:
        return fatal(rsp, f"cannot read the request: {err}")
    return fatal(rsp, outcome.too_deep(path, wire.MAX_MESSAGE_DEPTH))


def answer_to(data: bytes) -> fnv1.RunFunctionResponse:
    """An empty response to a serialized request, with its tag, whether or not the rest of it decodes."""
    meta = fnv1.RequestMeta()
    try:
        meta.ParseFromString(wire.field(data, 1) or b"")
    except DecodeError:  # an answer with no tag, then
        meta.Clear()
    return response.to(fnv1.RunFunctionRequest(meta=meta))
