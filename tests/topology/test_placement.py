"""Federations across clusters: placement, external addresses, held-back pools."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api.refusals import SpecError
from function.composition import compose
from function.federation import read
from function.serving import fn, render
from support.helpers import ANY_NAMESPACE_POLICY, BASE, spec, xr
from support.peers import EXAMPLES, PLATFORM_POLICY, composition_for, load_all

HUB_SPOKES = EXAMPLES / "claims" / "multicluster-hub-spokes.yaml"

REMOTE = spec(
    BASE,
    providerConfigRef={"name": "hub"},
    superlink__service={"type": "LoadBalancer"},
    supernodes__pools=[
        {"name": "local", "replicas": 1},
        {
            "name": "eu",
            "replicas": 2,
            "providerConfigRef": {"name": "spoke-eu"},
            "namespace": "fl",
            "createNamespace": True,
        },
    ],
)


def run(s, observed=None, status=None, name="fed"):
    x = xr(s, name=name)
    if status:
        x["status"] = status
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(x)
    # Placement, not tenancy: a platform that lets pools use any namespace of theirs (tests/api/test_policy.py).
    req.input.update(ANY_NAMESPACE_POLICY)
    for key, obj in (observed or {}).items():
        req.observed.resources[key].resource.update(obj)
    rsp = fn.run(req)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    objects = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    xr_status = resource.struct_to_dict(rsp.desired.composite.resource).get("status", {})
    conditions = {c.type: c for c in rsp.conditions}
    return rsp, objects, xr_status, conditions


def service_object(live_status=None, ports=None):
    manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"generation": 1}, "spec": {"ports": ports or []}}
    if live_status is not None:
        manifest["status"] = live_status
    return {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "status": {"atProvider": {"manifest": manifest}},
    }


def superlink_arg(obj):
    args = obj["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"][0]["args"]
    return next(a for a in args if a.startswith("--superlink="))


def test_each_part_goes_to_its_cluster_and_namespace():
    _, objects, status, _ = run(
        REMOTE, {"superlink-service": service_object({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}})}
    )
    assert objects["superlink"]["spec"]["providerConfigRef"] == {"name": "hub"}
    assert objects["pool-local"]["spec"]["providerConfigRef"] == {"name": "hub"}
    assert objects["pool-eu"]["spec"]["providerConfigRef"] == {"name": "spoke-eu"}
    assert objects["pool-eu"]["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] == "fl"
    ns = objects["namespace-spoke-eu-fl"]
    assert ns["spec"]["providerConfigRef"] == {"name": "spoke-eu"}
    assert ns["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "fl",
            # test_pods.py: labelled for Pod Security admission at its pods' level.
            "labels": {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("audit", "enforce", "warn")},
        },
    }
    assert [(p["name"], p["providerConfig"], p["namespace"]) for p in status["pools"]] == [
        ("local", "hub", "team-a"),
        ("eu", "spoke-eu", "fl"),
    ]


def test_superlink_can_have_its_own_cluster():
    s = spec(REMOTE, superlink__providerConfigRef={"name": "spoke-eu"}, superlink__externalAddress="fl.example.com")
    s["supernodes"]["pools"][1] = {"name": "eu", "replicas": 2, "providerConfigRef": {"name": "spoke-eu"}}
    _, objects, _, _ = run(s)
    assert objects["superlink"]["spec"]["providerConfigRef"] == {"name": "spoke-eu"}
    # Now "local" (on the default cluster) is the remote one, and eu is local to the SuperLink.
    assert superlink_arg(objects["pool-local"]) == "--superlink=fl.example.com:9092"
    assert superlink_arg(objects["pool-eu"]) == "--superlink=fed-superlink.team-a.svc:9092"


def test_remote_pools_wait_for_an_address():
    rsp, objects, status, conditions = run(REMOTE)
    assert "pool-eu" not in objects and "namespace-spoke-eu-fl" not in objects
    assert superlink_arg(objects["pool-local"]) == "--superlink=fed-superlink.team-a.svc:9092"
    assert conditions["ExternalAddressReady"].status == fnv1.STATUS_CONDITION_FALSE
    assert "pools eu in other clusters wait for the LoadBalancer address" in conditions["ExternalAddressReady"].message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert "external" not in status["endpoints"]
    assert [(p["name"], p["desired"], p["ready"]) for p in status["pools"]] == [("local", 1, 0), ("eu", 2, 0)]


@pytest.mark.parametrize(
    ("ingress", "address", "reason"),
    [
        ({"ip": "203.0.113.7"}, "203.0.113.7:9092", "an IPv4 address"),
        (
            {"hostname": "lb-123.elb.example.com"},
            "lb-123.elb.example.com:9092",
            "a hostname, as some clouds' load balancers give instead of an address",
        ),
        ({"ip": "2001:db8::7"}, "[2001:db8::7]:9092", "an IPv6 address, in brackets before the port"),
    ],
)
def test_remote_pools_released_when_the_load_balancer_has_an_address(ingress, address, reason):
    rsp, objects, status, conditions = run(
        REMOTE, {"superlink-service": service_object({"loadBalancer": {"ingress": [ingress]}})}
    )
    assert superlink_arg(objects["pool-eu"]) == f"--superlink={address}", reason
    assert status["endpoints"]["external"] == address, reason
    assert conditions["ExternalAddressReady"].status == fnv1.STATUS_CONDITION_TRUE
    assert rsp.desired.composite.ready != fnv1.READY_FALSE


@pytest.mark.parametrize(
    ("given", "address", "reason"),
    [
        ("fleet.example.com", "fleet.example.com:9092", "no port: the Service's Fleet port"),
        ("fleet.example.com:443", "fleet.example.com:443", "a port given is kept (a proxy in front, on 443)"),
        ("[2001:db8::1]:30092", "[2001:db8::1]:30092", "an IPv6 address and its port"),
    ],
)
def test_explicit_external_address(given, address, reason):
    _, objects, status, _ = run(spec(REMOTE, superlink__externalAddress=given))
    assert superlink_arg(objects["pool-eu"]) == f"--superlink={address}", reason
    assert status["endpoints"]["external"] == address, reason


def test_node_port_needs_a_node_address_then_the_observed_node_port():
    s = spec(REMOTE, superlink__service={"type": "NodePort"})
    _, objects, _, conditions = run(s)
    assert "pool-eu" not in objects
    assert "spec.superlink.service.nodeAddress" in conditions["ExternalAddressReady"].message
    s = spec(REMOTE, superlink__service={"type": "NodePort", "nodeAddress": "198.51.100.10"})
    _, objects, _, conditions = run(s)
    assert "the node port" in conditions["ExternalAddressReady"].message
    observed = {"superlink-service": service_object({}, ports=[{"name": "fleet", "port": 9092, "nodePort": 30092}])}
    _, objects, _status, _ = run(s, observed)
    assert superlink_arg(objects["pool-eu"]) == "--superlink=198.51.100.10:30092"


def test_a_gap_in_observation_does_not_flap_the_address():
    remembered = {"endpoints": {"external": "203.0.113.7:9092"}}
    _, objects, status, _ = run(REMOTE, status=remembered)
    assert superlink_arg(objects["pool-eu"]) == "--superlink=203.0.113.7:9092"
    assert status["endpoints"]["external"] == "203.0.113.7:9092"
    # A new observation wins over the remembered address.
    observed = {"superlink-service": service_object({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}})}
    _, objects, _, _ = run(REMOTE, observed, status=remembered)
    assert superlink_arg(objects["pool-eu"]) == "--superlink=203.0.113.9:9092"


def test_an_existing_remote_pool_is_kept_while_its_address_is_unknown():
    _, before, _, _ = run(
        REMOTE, {"superlink-service": service_object({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}})}
    )
    observed = {"pool-eu": {**before["pool-eu"], "status": {"atProvider": {}}}}
    rsp, objects, _, _ = run(REMOTE, observed)
    assert objects["pool-eu"] == before["pool-eu"]
    assert any("keep their last applied state" in r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING)


def test_a_claim_keeps_hub_pools_in_its_namespace():
    s = spec(REMOTE, supernodes__pools=[{"name": "local", "replicas": 1, "namespace": "kube-system"}])
    with pytest.raises(SpecError) as err:
        read.federation(xr(s))
    assert err.value.errors[0][0] == "spec.supernodes.pools[0].namespace"
    # A bare XR may place pools where it likes.
    bare = {"metadata": {"name": "solo"}, "spec": s}
    assert compose.manifests(read.federation(bare))["pool-local"]["metadata"]["namespace"] == "kube-system"


def test_crank_render_releases_pools_with_an_observed_load_balancer(crank, functions_file, tmp_path):
    xr_file = tmp_path / "xr.yaml"
    xr_doc = render.composite(load_all(HUB_SPOKES)[0])
    xr_file.write_text(yaml.safe_dump(xr_doc))
    observed = {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {
            "name": "federation-multicluster-svc",
            "annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-service"},
        },
        "spec": {"forProvider": {"manifest": {}}},
        "status": {
            "atProvider": {
                "manifest": {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
                }
            }
        },
    }
    observed_file = tmp_path / "observed.yaml"
    observed_file.write_text(yaml.safe_dump(observed))
    composition = composition_for(HUB_SPOKES, tmp_path)
    base = [crank, "render", str(xr_file), str(composition), str(tmp_path / "functions.yaml")]
    (tmp_path / "functions.yaml").write_text(functions_file.read_text())

    def names(extra):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return docs, {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d for d in docs[1:]}

    docs, held = names([])
    assert "pool-eu" not in held and "pool-hub-local" in held
    assert docs[0]["status"]["conditions"][0]["reason"] == "Creating"
    docs, released = names([f"--observed-resources={observed_file}"])
    assert superlink_arg(released["pool-eu"]) == "--superlink=203.0.113.7:9092"
    assert superlink_arg(released["pool-us"]) == "--superlink=203.0.113.7:9092"
    assert {"namespace-spoke-eu-flower-clients", "namespace-spoke-us-flower-clients"} <= set(released)
    assert docs[0]["status"]["endpoints"]["external"] == "203.0.113.7:9092"


def test_provider_configs_example_is_valid(crank_validate, provider_crds):
    proc = crank_validate(provider_crds, EXAMPLES / "multicluster" / "providerconfigs.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_function_render_observed_releases_remote_pools(tmp_path):
    held, _ = render.render_file(str(HUB_SPOKES), policy_path=str(PLATFORM_POLICY))
    assert "pool-eu" not in held
    observed = {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {"annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-service"}},
        "status": {
            "atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"hostname": "hub.example.com"}]}}}}
        },
    }
    (tmp_path / "service.yaml").write_text(yaml.safe_dump(observed))
    text, _ = render.render_file(str(HUB_SPOKES), str(tmp_path), policy_path=str(PLATFORM_POLICY))
    docs = list(yaml.safe_load_all(text))
    objects = {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d for d in docs[1:]}
    assert superlink_arg(objects["pool-eu"]) == "--superlink=hub.example.com:9092"
    conditions = {c["type"]: c for c in docs[0]["status"]["conditions"]}
    assert conditions["ExternalAddressReady"]["status"] == "True"
    assert docs[0]["status"]["endpoints"]["external"] == "hub.example.com:9092"
