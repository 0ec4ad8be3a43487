"""TLS: the SuperLink's certificate, the CA SuperNodes trust, never a copied key."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api.refusals import SpecError, parse
from function.builders import tls
from function.serving import fn, render
from support.helpers import BASE, PROCESS, container, manifests, pod, spec, xr
from support.peers import EXAMPLES, ROOT, load_all

SECRET = spec(BASE, tls={"secretName": "superlink-tls"})
CERT_MANAGER = spec(
    BASE,
    tls={"certManager": {"issuerRef": {"name": "flower-ca", "kind": "ClusterIssuer"}}},
    providerConfigRef={"name": "hub"},
    superlink__service={"type": "LoadBalancer"},
    supernodes__pools=[
        {"name": "local", "replicas": 1},
        {"name": "eu", "replicas": 2, "providerConfigRef": {"name": "spoke-eu"}},
        {
            "name": "us",
            "replicas": 1,
            "providerConfigRef": {"name": "spoke-us"},
            "caSecretRef": {"name": "their-ca", "key": "root.pem"},
        },
    ],
)
KEY = base64.b64encode(b"PRIVATE KEY MATERIAL").decode()
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n").decode()
TLS_SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "fed-superlink-tls", "namespace": "team-a"},
    "data": {"ca.crt": CA, "tls.crt": base64.b64encode(b"leaf").decode(), "tls.key": KEY},
}
LB = {
    "superlink-service": {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}},
    }
}
# cert-manager's Certificate as issued: its Ready condition True.
ISSUED = {
    "superlink-certificate": {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "status": {"atProvider": {"manifest": {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}}},
    }
}


def run(s, observed=None, required=None):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr(s))
    for key, obj in (observed or {}).items():
        req.observed.resources[key].resource.update(obj)
    if required is not None:
        req.required_resources[tls.REQUIREMENT].items.add().resource.update(required)
    rsp = fn.run(req)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    objects = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    return rsp, objects, {c.type: c for c in rsp.conditions}


def manifest(objects, name):
    return objects[name]["spec"]["forProvider"]["manifest"]


def test_superlink_serves_tls_from_the_secret():
    c = container(SECRET, "superlink", "superlink")
    assert "--insecure" not in c["args"]
    assert {
        "--ssl-ca-certfile=/app/tls/ca.crt",
        "--ssl-certfile=/app/tls/tls.crt",
        "--ssl-keyfile=/app/tls/tls.key",
    } <= set(c["args"])
    assert {"name": "tls", "mountPath": "/app/tls", "readOnly": True} in c["volumeMounts"]
    volumes = pod(SECRET, "superlink")["volumes"]
    assert {"name": "tls", "secret": {"secretName": "superlink-tls", "defaultMode": 0o440}} in volumes


def test_supernodes_in_the_superlinks_namespace_mount_only_its_ca():
    c = container(SECRET)
    assert "--insecure" not in c["args"]
    assert "--root-certificates=/app/tls/ca.crt" in c["args"]
    assert {
        "name": "tls",
        "secret": {"secretName": "superlink-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}], "defaultMode": 0o440},
    } in pod(SECRET)["volumes"]


def test_superexec_sidecars_keep_plain_appio():
    s = spec(PROCESS, tls={"secretName": "superlink-tls"})
    assert "--insecure" in container(s, "superexec-clientapp")["args"]
    assert "--insecure" in container(s, "superexec-serverapp", "superlink")["args"]
    assert "--insecure" not in container(s)["args"]


@pytest.mark.parametrize(
    ("s", "insecure", "reason"),
    [
        (BASE, True, "without TLS: plain gRPC, --insecure"),
        (SECRET, False, "with TLS: --insecure goes"),
        (spec(SECRET, insecure=False), False, "TLS, and insecure: false said too"),
        (spec(BASE, insecure=False), False, "insecure: false without TLS is the user's word: no --insecure"),
    ],
)
def test_insecure_defaults_follow_tls(s, insecure, reason):
    assert ("--insecure" in container(s)["args"]) is insecure, reason
    assert ("--insecure" in container(s, "superlink", "superlink")["args"]) is insecure, reason


@pytest.mark.parametrize(
    ("s", "field", "message", "reason"),
    [
        (
            spec(SECRET, insecure=True),
            "spec.insecure",
            "must not be true when spec.tls is set",
            "insecure and TLS contradict each other",
        ),
        (
            spec(BASE, tls={}),
            "spec.tls",
            "exactly one of secretName and certManager",
            "TLS with no source of its certificate",
        ),
        (
            spec(BASE, tls={"secretName": "a", "certManager": {"issuerRef": {"name": "b"}}}),
            "spec.tls",
            "exactly one",
            "two sources of one certificate",
        ),
        (
            spec(BASE, tls={"certManager": {"issuerRef": {"name": "b", "kind": "Vault"}}}),
            "spec.tls.certManager.issuerRef.kind",
            "'Issuer' or 'ClusterIssuer'",
            "cert-manager issues from an Issuer or a ClusterIssuer, nothing else",
        ),
    ],
)
def test_bad_tls_names_the_field(s, field, message, reason):
    with pytest.raises(SpecError) as err:
        parse(s)
    assert any(f == field and message in m for f, m in err.value.errors), (reason, err.value.errors)


def test_cert_manager_certificate_names_the_service_and_the_external_address():
    _, objects, _ = run(CERT_MANAGER, LB, TLS_SECRET)
    cert = manifest(objects, "superlink-certificate")
    assert (cert["apiVersion"], cert["kind"]) == ("cert-manager.io/v1", "Certificate")
    assert objects["superlink-certificate"]["spec"]["providerConfigRef"] == {"name": "hub"}
    assert cert["spec"]["secretName"] == "fed-superlink-tls"
    assert cert["spec"]["issuerRef"] == {"name": "flower-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert "fed-superlink.team-a.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["ipAddresses"] == ["127.0.0.1", "203.0.113.7"]
    hostname = spec(CERT_MANAGER, superlink__externalAddress="fleet.example.com:443")
    _, objects, _ = run(hostname, None, TLS_SECRET)
    assert "fleet.example.com" in manifest(objects, "superlink-certificate")["spec"]["dnsNames"]


def test_remote_pools_wait_for_the_ca_and_it_is_requested():
    rsp, objects, conditions = run(CERT_MANAGER, LB)
    assert "pool-eu" not in objects
    assert "pool-us" in objects  # it brings its own CA Secret
    assert conditions["TLSReady"].status == fnv1.STATUS_CONDITION_FALSE
    # Both waits, each said: cert-manager has not issued, and so no CA to copy.
    assert conditions["TLSReady"].message == (
        "Certificate team-a/fed-superlink-tls: not created yet; pools eu wait for the CA certificate (ca.crt) of "
        "Secret team-a/fed-superlink-tls, read through Crossplane's required resources"
    )
    selector = rsp.requirements.resources[tls.REQUIREMENT]
    assert (selector.api_version, selector.kind, selector.match_name, selector.namespace) == (
        "v1",
        "Secret",
        "fed-superlink-tls",
        "team-a",
    )


def test_the_ca_is_copied_to_other_clusters_and_the_key_never_is():
    _rsp, objects, conditions = run(CERT_MANAGER, {**LB, **ISSUED}, TLS_SECRET)
    assert conditions["TLSReady"].status == fnv1.STATUS_CONDITION_TRUE
    ca = manifest(objects, "ca-spoke-eu-team-a")
    assert objects["ca-spoke-eu-team-a"]["spec"]["providerConfigRef"] == {"name": "spoke-eu"}
    assert ca["data"] == {"ca.crt": CA}
    assert KEY not in json.dumps(objects)
    eu = manifest(objects, "pool-eu")["spec"]["template"]["spec"]
    assert {
        "name": "tls",
        "secret": {
            "secretName": "fed-superlink-ca",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
            "defaultMode": 0o440,
        },
    } in eu["volumes"]
    assert "--root-certificates=/app/tls/ca.crt" in eu["containers"][0]["args"]
    us = manifest(objects, "pool-us")["spec"]["template"]["spec"]
    assert {
        "name": "tls",
        "secret": {"secretName": "their-ca", "items": [{"key": "root.pem", "path": "ca.crt"}], "defaultMode": 0o440},
    } in us["volumes"]
    assert not any(k.startswith("ca-spoke-us") for k in objects)


def test_no_requirement_when_no_pool_needs_a_copy():
    rsp, _, conditions = run(SECRET)
    assert tls.REQUIREMENT not in rsp.requirements.resources
    assert "TLSReady" not in conditions


def test_render_with_required_resources(tmp_path):
    example = EXAMPLES / "claims" / "tls-cert-manager-multicluster.yaml"
    observed = {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {"annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-service"}},
        "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}},
    }
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump(observed))
    required = EXAMPLES / "required" / "superlink-tls.yaml"
    text, _ = render.render_file(str(example), str(tmp_path), None, str(required))
    docs = list(yaml.safe_load_all(text))
    names = {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME] for d in docs[1:]}
    assert {"pool-eu", "pool-us", "ca-spoke-eu-flower", "superlink-certificate"} <= names
    key = load_all(required)[0]["data"]["tls.key"]
    assert key not in text


def test_crank_render_with_required_resources(crank, functions_file, tmp_path):
    example = EXAMPLES / "claims" / "tls-cert-manager-multicluster.yaml"
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(render.composite(load_all(example)[0])))
    observed = {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {"name": "svc", "annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-service"}},
        "spec": {"forProvider": {"manifest": {}}},
        "status": {"atProvider": {"manifest": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}}},
    }
    issued = {
        **ISSUED["superlink-certificate"],
        "metadata": {"name": "cert", "annotations": {render.COMPOSITION_RESOURCE_NAME: "superlink-certificate"}},
        "spec": {"forProvider": {"manifest": {}}},
    }
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump_all([observed, issued]))
    proc = subprocess.run(
        [
            crank,
            "render",
            str(xr_file),
            str(ROOT / "apis" / "composition.yaml"),
            str(functions_file),
            f"--observed-resources={tmp_path / 'observed.yaml'}",
            f"--required-resources={EXAMPLES / 'required' / 'superlink-tls.yaml'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    objects = {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d for d in docs[1:]}
    assert "pool-eu" in objects and "ca-spoke-eu-flower" in objects
    ours, _ = render.render(
        load_all(example)[0], [observed, issued], required=load_all(EXAMPLES / "required" / "superlink-tls.yaml")
    )
    assert {k: v["spec"] for k, v in objects.items()} == {
        d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d["spec"] for d in ours[1:]
    }
    conditions = {c["type"]: c for c in docs[0]["status"]["conditions"]}
    assert conditions["TLSReady"]["status"] == "True"


@pytest.mark.parametrize(
    ("reason", "release"),
    [
        ("1.25: users reach Control through a port-forward to the pod", "1.25.0"),
        ("1.41: so do they, and the sidecar dials the SuperLink's TLS at localhost", "1.41.0"),
    ],
)
def test_cert_manager_certificate_names_the_loopback(reason, release):
    s = spec(
        PROCESS,
        tls={"certManager": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}},
        superlink__image=f"flwr/superlink:{release}",
        supernodes__image=f"flwr/supernode:{release}",
    )
    certificate = manifests(s)["superlink-certificate"]["spec"]
    assert "localhost" in certificate["dnsNames"], reason
    assert "127.0.0.1" in certificate["ipAddresses"], reason


def _whole_secret_mounts(pod_spec: dict) -> list[str]:
    """The containers of a pod that mount a Secret's every key (no items), by name."""
    whole = {v["name"] for v in pod_spec.get("volumes", []) if "secret" in v and "items" not in v["secret"]}
    return sorted(
        c["name"]
        for c in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]
        if any(m["name"] in whole for m in c.get("volumeMounts", []))
    )


def test_only_the_superlink_mounts_its_key_the_containers_that_dial_it_get_the_ca():
    # Process isolation from 1.37 puts the SuperExec's link behind the SuperLink's
    # TLS, and node authentication adds the registrar: both dial, neither serves.
    s = spec(PROCESS, tls={"secretName": "superlink-tls"}, nodeAuthentication={"enabled": True})
    s = yaml.safe_load(yaml.safe_dump(s).replace(":1.25.0", ":1.41.0"))
    superlink = pod(s, "superlink")
    # The two that serve its certificate: the SuperLink, and from 1.40 its Fleet proxy.
    assert _whole_secret_mounts(superlink) == ["fleet-proxy", "superlink"]
    ca_only = {"secretName": "superlink-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}], "defaultMode": 0o440}
    assert {"name": tls.CA_VOLUME, "secret": ca_only} in superlink["volumes"]
    dialing = {c["name"]: c for c in [*superlink["initContainers"], *superlink["containers"]]}
    for name in ("superexec-serverapp", "supernode-registrar"):
        assert {"name": tls.CA_VOLUME, "mountPath": "/app/tls", "readOnly": True} in dialing[name]["volumeMounts"]


@pytest.mark.parametrize("example", sorted((ROOT / "tests" / "golden").glob("*.yaml")), ids=lambda p: p.stem)
def test_no_example_mounts_a_whole_secret_but_in_the_superlink(example):
    templates = [
        m["spec"]["template"]["spec"]
        for r in load_all(example)
        for m in [r.get("spec", {}).get("forProvider", {}).get("manifest", r)]
        if m.get("kind") in ("StatefulSet", "DaemonSet", "Deployment")
    ]
    assert templates
    for template in templates:
        assert set(_whole_secret_mounts(template)) <= {"superlink", "fleet-proxy"}
