"""The composition function: a thin gRPC shell around function.composition.compose."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any, cast

from crossplane.function import logging, request, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.message import DecodeError

from function.api import k8s_schema, policy
from function.api.refusals import SpecError
from function.builders import published_keys, tls
from function.composition import admission, compose, groups, objects, status
from function.federation import read
from function.federation.value import Federation
from function.serving import wire
from function.topology import clusters

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor


# Crossplane reads a function's response with gRPC's default limit, 4 MiB;
# what is left is room for the results and framing.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024 - 64 * 1024
# How soon Crossplane composes a composite again when nothing it watches changed: it requeues after the
# response's TTL (with realtime compositions, its default, that and watch events alone; its
# --poll-interval does not apply to composites). A Federation reads what no watch tells it of (the
# ProviderConfigs its selectors match, the CA to copy, the keys its pools published) and keeps the SDK's
# minute, the time a cluster joining or a new SuperNode's key waits at most. A FederationCluster is told
# everything by watches (its spec by its Federation, its Objects by their status) but the platform's
# EnvironmentConfig, which rarely changes: again every few minutes is enough. Each minute, a thousand
# FederationClusters would apply their nine Objects again 17 times a second, changing nothing.
# A group is composed again each minute too: it lists its clusters' keys beside the SuperLink, and
# Crossplane's circuit breaker drops the watch events of a group its FederationClusters woke too often
# (while their pods start, every one of them writes its status): a key its FederationCluster reported
# then waited for this TTL before its SuperNode could join (five minutes, measured at 100 clusters).
# 32 groups each minute re-apply their clusters' FederationClusters, unchanged: at 1,000 clusters,
# about 17 applies a second on an idle hub.
FEDERATION_TTL = response.DEFAULT_TTL
GROUP_TTL = response.DEFAULT_TTL
FEDERATION_CLUSTER_TTL = dt.timedelta(minutes=5)


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
    if _kind(req) in read.GROUP_KINDS:
        # A group only fans out FederationClusters, each judged under the policy by its own call.
        return _compose_group(req, rsp)
    try:
        given = policy.load(wire.to_dict(req.input) if req.HasField("input") else None)
    except SpecError as err:
        return Answer(fatal(rsp, f"invalid function input (the Composition's policy): {err}"))
    if given.environmentConfig and policy.REQUIREMENT not in req.required_resources:
        # First ask for the policy, then judge: Crossplane calls again with it at once, and
        # would not after a fatal result. Nothing desired here is applied.
        _require_policy(rsp, given)
        return Answer(rsp)
    return _compose(req, rsp, given)


def _compose(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, given: policy.Policy) -> Answer:
    """Compose the Federation under the platform's policy into rsp, or a fatal result."""
    xr = wire.to_dict(req.observed.composite.resource)
    observed = {name: wire.to_dict(r.resource) for name, r in req.observed.resources.items()}
    required = {
        key: [wire.to_dict(item.resource) for item in answered.items]
        for key, answered in req.required_resources.items()
    }
    try:
        platform = policy.effective(given, required.get(policy.REQUIREMENT) or [])
    except SpecError as err:
        return Answer(fatal(rsp, f"invalid platform policy: {err}"))
    try:
        fed = read.cluster(xr) if read.is_cluster(xr) else read.federation(xr, required, observed)
        remembered = ((xr.get("status") or {}).get("endpoints") or {}).get("external")
        tls_secret = request.get_required_resource(req, tls.REQUIREMENT)
        built = compose.plan(fed, observed, remembered, tls_secret, required.get(published_keys.REQUIREMENT))
        # The platform's policy, from the Composition's step: what the Federation may have composed.
        admission.check(fed, platform, built)
        desired = compose.desired(fed, built)
        report = status.report(fed, built, observed, (xr.get("metadata") or {}).get("generation"))
    except SpecError as err:
        return Answer(fatal(rsp, f"invalid Federation: {err}"))
    except Exception as err:  # a bug must not crash the server or drop resources
        logging.get_logger().exception("cannot compose Federation")
        return Answer(fatal(rsp, f"cannot compose Federation: {type(err).__name__}: {err}"))
    composed = _answer(rsp, fed, built, desired, report)
    _require_policy(rsp, given)
    rsp.meta.ttl.FromTimedelta(FEDERATION_TTL if fed.part is None else FEDERATION_CLUSTER_TTL)
    return _within_limit(composed, "Federation")


def _within_limit(composed: Answer, kind: str) -> Answer:
    """composed, or a fatal result if Crossplane could not read it (a gRPC error that names nothing)."""
    size = composed.rsp.ByteSize() + len(composed.resources_field())
    if size <= MAX_RESPONSE_BYTES:
        return composed
    return Answer(
        fatal(
            composed.rsp,
            f"invalid {kind}: its {len(composed.composed)} composed resources take "
            f"{size / 2**20:.1f} MiB, more than Crossplane reads from a function (4 MiB): select fewer "
            "clusters (clusterSelector.maxClusters) or pools, make the pools' pod templates smaller, or split the "
            "Federation",
        )
    )


def _kind(req: fnv1.RunFunctionRequest) -> str:
    fields = req.observed.composite.resource.fields
    return fields["kind"].string_value if "kind" in fields else ""


def _compose_group(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> Answer:
    """Compose a FederationClusterGroup's FederationClusters into rsp, or a fatal result."""
    xr = wire.to_dict(req.observed.composite.resource)
    observed = {name: wire.to_dict(r.resource) for name, r in req.observed.resources.items()}
    try:
        group = groups.compose(xr, observed)
    except SpecError as err:
        return Answer(fatal(rsp, f"invalid FederationClusterGroup: {err}"))
    except Exception as err:  # a bug must not crash the server or drop resources
        logging.get_logger().exception("cannot compose FederationClusterGroup")
        return Answer(fatal(rsp, f"cannot compose FederationClusterGroup: {type(err).__name__}: {err}"))
    composed = {name: _composed(obj, ready=group.ready[name]) for name, obj in group.desired.items()}
    resource.update(rsp.desired.composite, {"status": group.status.wire()})
    response.set_conditions(rsp, group.condition)
    rsp.meta.ttl.FromTimedelta(GROUP_TTL)
    return _within_limit(Answer(rsp, composed), "FederationClusterGroup")


def _answer(
    rsp: fnv1.RunFunctionResponse,
    fed: Federation,
    built: compose.Plan,
    desired: dict[str, dict[str, Any]],
    report: status.Report,
) -> Answer:
    """Write what was judged into rsp (status, what to read next, conditions); rsp with what was composed."""
    # Not the SDK's update_status: it leaves out unset fields, where the ones
    # left out here are those set to None (no generation, no external address).
    resource.update(rsp.desired.composite, {"status": report.status.wire()})
    if built.held or not fed.spec.supernodes.pools:
        # Pools that wait are not desired resources, yet the Federation is not
        # ready; nor is one whose selectors stand for no cluster yet.
        rsp.desired.composite.ready = fnv1.READY_FALSE
    if fed.part is None:
        # A FederationCluster is given what these would tell it.
        _require(rsp, fed, built)
    if fed.registers_keys:
        # The keys the pools' pods published, as the collections' Objects observed them: a
        # FederationCluster's own collections' alone, and the Federation's those of its own pools.
        response.require_resources(
            rsp,
            published_keys.REQUIREMENT,
            objects.NAMESPACED_OBJECT_API if fed.namespaced else objects.OBJECT_API,
            "Object",
            match_labels={published_keys.CARRIED_LABEL: compose.carried_label(fed)},
            namespace=fed.namespace if fed.namespaced else None,
        )
    response.set_conditions(rsp, *report.conditions)
    for warning in report.warnings:
        # Crossplane makes each an event; on the claim too, where a claim's user looks (`kubectl describe`).
        rsp.results.append(
            fnv1.Result(severity=fnv1.SEVERITY_WARNING, message=warning, target=fnv1.TARGET_COMPOSITE_AND_CLAIM)
        )
    return Answer(rsp, {name: _composed(obj, ready=bool(report.ready.get(name))) for name, obj in desired.items()})


def _require(rsp: fnv1.RunFunctionResponse, fed: Federation, built: compose.Plan) -> None:
    """Ask for what the next call needs: the selectors' ProviderConfigs and the CA to copy."""
    for need in clusters.requirements(fed.written, fed.namespace, namespaced=fed.namespaced):
        # Asked for on every call: Crossplane answers only what the last response asked.
        response.require_resources(
            rsp, need.key, need.api_version, need.kind, match_labels=need.labels, namespace=need.namespace
        )
    if built.needs_ca:
        # Copying the CA to other namespaces and clusters needs the SuperLink's Secret.
        response.require_resources(
            rsp,
            tls.REQUIREMENT,
            "v1",
            "Secret",
            match_name=tls.secret_name(fed.name, fed.spec),
            namespace=fed.namespace,
        )


def _require_policy(rsp: fnv1.RunFunctionResponse, given: policy.Policy) -> None:
    """Ask for the EnvironmentConfig the input names, on every call (Crossplane answers only the last asks)."""
    if given.environmentConfig:
        response.require_resources(
            rsp,
            policy.REQUIREMENT,
            policy.ENVIRONMENT_CONFIG_API,
            policy.ENVIRONMENT_CONFIG_KIND,
            match_name=given.environmentConfig,
        )


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


# The parts of a too deep path a message shows: enough to find where it is.
SHOWN_PATH_PARTS = 12

# The stubs type a generated message's DESCRIPTOR as the pure-Python class or
# upb's; either is the one interface too_deep uses.
REQUEST = cast("Descriptor", fnv1.RunFunctionRequest.DESCRIPTOR)

# Where the XR itself is in a request: a path under it is a Federation's field.
COMPOSITE = ["observed", "composite", "resource"]


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
    in_xr = path[: len(COMPOSITE)] == COMPOSITE
    shown = path[len(COMPOSITE) :] if in_xr else path
    where = k8s_schema.field_path(str(shown[0]), shown[1:SHOWN_PATH_PARTS])
    if len(shown) > SHOWN_PATH_PARTS:
        where += "..."
    return fatal(
        rsp,
        f"{'invalid Federation' if in_xr else 'cannot read the request'}: {where}: nested deeper than a "
        f"function's request can carry (protobuf decodes {wire.MAX_MESSAGE_DEPTH} levels of messages, "
        "about 30 levels of maps and lists)",
    )


def answer_to(data: bytes) -> fnv1.RunFunctionResponse:
    """An empty response to a serialized request, with its tag, whether or not the rest of it decodes."""
    meta = fnv1.RequestMeta()
    try:
        meta.ParseFromString(wire.field(data, 1) or b"")
    except DecodeError:  # an answer with no tag, then
        meta.Clear()
    return response.to(fnv1.RunFunctionRequest(meta=meta))
