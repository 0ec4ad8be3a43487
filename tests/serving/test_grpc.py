"""RunFunction over real gRPC, as Crossplane calls it (v1 and v1beta1)."""

from __future__ import annotations

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from function.api.status_model import FederationStatus
from function.serving import wire
from support.helpers import BASE, pool, spec, xr

COMPOSED = [
    "networkpolicy-superlink",
    "networkpolicy-supernode-default-team-a",
    "pool-default",
    "serviceaccount-default-team-a",
    "superlink",
    "superlink-service",
    "superlink-serviceaccount",
]


def request(spec, module=fnv1, observed=None):
    req = module.RunFunctionRequest(meta=module.RequestMeta(tag="t1"))
    req.observed.composite.resource.update(xr(spec))
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    return req


@pytest.fixture(scope="module")
def channel(function_address):
    with grpc.insecure_channel(function_address) as ch:
        yield ch


def test_v1_composes_objects(channel):
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(BASE), timeout=10)
    assert rsp.meta.tag == "t1"
    assert [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL] == []
    assert sorted(rsp.desired.resources) == COMPOSED
    obj = resource.struct_to_dict(rsp.desired.resources["pool-default"].resource)
    assert obj["apiVersion"] == "kubernetes.crossplane.io/v1alpha2"
    assert obj["kind"] == "Object"
    assert obj["spec"]["providerConfigRef"] == {"name": "default"}
    assert obj["spec"]["forProvider"]["manifest"]["metadata"]["name"] == "fed-supernode-default"
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    # The Control API is on the SuperLink pod's loopback: kubectl port-forward leads there.
    assert status["endpoints"]["superlinkService"] == "127.0.0.1:9093"
    assert status["endpoints"]["portForward"] == "kubectl -n team-a port-forward pod/fed-superlink-0 9093:9093"


def test_v1beta1_is_served_too(channel):
    rsp = grpcv1beta1.FunctionRunnerServiceStub(channel).RunFunction(request(BASE, fnv1beta1), timeout=10)
    assert sorted(rsp.desired.resources) == COMPOSED


def test_provider_config_from_spec(channel):
    s = dict(BASE, providerConfigRef={"name": "gpu-cluster"})
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(s), timeout=10)
    for name in rsp.desired.resources:
        obj = resource.struct_to_dict(rsp.desired.resources[name].resource)
        assert obj["spec"]["providerConfigRef"] == {"name": "gpu-cluster"}


def test_bad_spec_is_fatal_and_composes_nothing(channel):
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(pool(BASE, replicas=None)), timeout=10)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1
    assert "spec.supernodes.pools[0].replicas" in fatal[0]
    assert "replicas must be set (>=1)" in fatal[0]
    assert len(rsp.desired.resources) == 0


def test_observed_counts_reach_status(channel):
    observed = {
        "pool-default": {
            "apiVersion": "kubernetes.crossplane.io/v1alpha2",
            "kind": "Object",
            "status": {"atProvider": {"manifest": {"status": {"readyReplicas": 1, "replicas": 2}}}},
        }
    }
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(BASE, observed=observed), timeout=10)
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["supernodes"] == "1/2"
    assert status["pools"] == [
        {
            "name": "default",
            "kind": "StatefulSet",
            "desired": 2,
            "ready": 1,
            "namespace": "team-a",
            "providerConfig": "default",
        }
    ]
    assert rsp.desired.resources["pool-default"].ready == fnv1.READY_FALSE
    conditions = {c.type: c for c in rsp.conditions}
    assert conditions["SuperNodesReady"].status == fnv1.STATUS_CONDITION_FALSE
    assert conditions["SuperNodesReady"].message.startswith("Pool default not fully ready (1/2)")


def test_observed_generation_reaches_status(channel):
    req = request(BASE)
    x = resource.struct_to_dict(req.observed.composite.resource)
    x["metadata"]["generation"] = 7
    req.observed.composite.resource.Clear()
    req.observed.composite.resource.update(x)
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=10)
    assert resource.struct_to_dict(rsp.desired.composite.resource)["status"]["observedGeneration"] == 7


def test_status_and_conditions_on_the_wire(channel):
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(BASE), timeout=10)
    status = wire.to_dict(rsp.desired.composite.resource)["status"]
    # The status model's dump, no more: no nulls, nothing the XRD does not know.
    assert FederationStatus.model_validate(status).wire() == status
    assert [(c.type, c.status, c.reason, c.message) for c in rsp.conditions] == [
        (
            "SuperLinkReady",
            fnv1.STATUS_CONDITION_FALSE,
            "Creating",
            "SuperLink not ready: not created yet; SuperLink Service not ready: not created yet",
        ),
        ("SuperNodesReady", fnv1.STATUS_CONDITION_FALSE, "Creating", "Pool default not ready: not created yet"),
        ("ClustersReachable", fnv1.STATUS_CONDITION_TRUE, "Available", "provider-kubernetes reaches every cluster"),
    ]


def test_conditions_reach_the_claim_too(channel):
    """A tenant often may read the claim alone: why a Federation is not ready must be there, not only on the XR."""
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(BASE), timeout=10)
    assert rsp.conditions, "no condition to check"
    assert {(c.type, c.target) for c in rsp.conditions} == {
        ("SuperLinkReady", fnv1.TARGET_COMPOSITE_AND_CLAIM),
        ("SuperNodesReady", fnv1.TARGET_COMPOSITE_AND_CLAIM),
        ("ClustersReachable", fnv1.TARGET_COMPOSITE_AND_CLAIM),
    }


def test_an_exposed_fleet_api_without_node_authentication_warns_the_claim(channel):
    # TLS and narrowed addresses: the one warning left is that whoever reaches the Fleet API joins.
    exposed = spec(
        BASE,
        tls={"secretName": "superlink-tls"},
        networkPolicy={"fleetCIDRs": ["192.0.2.0/24"]},
        superlink__service={"type": "LoadBalancer"},
    )
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(exposed), timeout=10)
    warnings = [(r.message, r.target) for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    anyone_joins = (
        "spec.superlink.service.type is LoadBalancer and spec.nodeAuthentication.enabled is false: anyone who "
        "reaches the Fleet API can join this Federation as a SuperNode, receive the model and send updates; "
        "enable spec.nodeAuthentication"
    )
    assert warnings == [(anyone_joins, fnv1.TARGET_COMPOSITE_AND_CLAIM)]
    assert "superlink-service" in rsp.desired.resources


@pytest.mark.parametrize(
    ("reason", "changes", "field"),
    [
        ("no tag, no spec.version", {"superlink__image": "x/sl", "supernodes__image": "x/sn"}, "spec.version"),
        ("before the oldest supported", {"superlink__image": "flwr/superlink:1.20.0"}, "spec.superlink.image"),
        (
            "a pool across 1.40's Fleet change",
            {"supernodes__image": "flwr/supernode:1.41.0"},
            "spec.supernodes.pools[0]",
        ),
    ],
)
def test_a_release_the_function_cannot_serve_is_fatal_and_composes_nothing(channel, reason, changes, field):
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(spec(BASE, **changes)), timeout=10)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1, reason
    assert f"{field}: " in fatal[0], (reason, fatal)
    assert len(rsp.desired.resources) == 0, reason


def test_a_request_past_grpcs_default_4_mib_is_served(channel):
    # Hundreds of clusters' observed Objects, live state included, as Crossplane sends them.
    bulky = {"status": {"atProvider": {"manifest": {"metadata": {"annotations": {"note": "x" * 1024}}}}}}
    observed = {f"pool-gone-{i}": bulky for i in range(6000)}
    req = request(BASE, observed=observed)
    assert req.ByteSize() > 4 * 1024 * 1024
    rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=60)
    assert "pool-default" in rsp.desired.resources


@pytest.mark.parametrize("module", [fnv1, fnv1beta1], ids=["v1", "v1beta1"])
def test_a_federation_too_deep_for_protobuf_gets_a_fatal_result_not_a_grpc_error(channel, module):
    # The SDK's server fails such a request before the function sees it
    # (UNKNOWN, "Exceeded upb_DecodeOptions_MaxDepth"), naming no field.
    deep: dict = {}
    for _ in range(120):
        deep = {"deeper": deep}
    stub = (grpcv1 if module is fnv1 else grpcv1beta1).FunctionRunnerServiceStub(channel)
    rsp = stub.RunFunction(request(dict(BASE, extra=deep), module), timeout=10)
    assert rsp.meta.tag == "t1"
    assert [r.severity for r in rsp.results] == [module.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith("invalid Federation: spec.extra.deeper.deeper."), rsp.results[0].message
    assert len(rsp.desired.resources) == 0


def test_reflection_lists_both_services(channel):
    # As the SDK's server does, for grpcurl and friends.
    services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {
        "apiextensions.fn.proto.v1.FunctionRunnerService",
        "apiextensions.fn.proto.v1beta1.FunctionRunnerService",
    } <= services
