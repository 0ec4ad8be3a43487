"""The Crossplane v2 flavor: a namespaced Federation composing namespaced Objects."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.serving import fn, render
from support.helpers import BASE, spec
from support.peers import EXAMPLES, INVALID, ROOT, expected_message, load_all

INPUT_CRD = ROOT / "package" / "input"
XRD_V2 = ROOT / "apis" / "v2" / "definition.yaml"
COMPOSITION_V2 = ROOT / "apis" / "v2" / "composition.yaml"
EXAMPLE = EXAMPLES / "v2" / "federation.yaml"


def rendered(path=EXAMPLE, xrd=XRD_V2):
    text, _ = render.render_file(str(path), None, str(xrd) if xrd else None)
    docs = list(yaml.safe_load_all(text))
    return docs[0], {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d for d in docs[1:]}


def test_namespaced_federation_composes_namespaced_objects():
    xr, objects = rendered()
    assert (xr["kind"], xr["metadata"]) == ("Federation", {"name": "team-federation", "namespace": "team-a"})
    assert set(objects) == {
        "superlink",
        "superlink-service",
        "pool-default",
        "pool-partner",
        "superlink-serviceaccount",
        "serviceaccount-team-a-cluster-team-a",
        "serviceaccount-partner-cluster-team-a",
        "networkpolicy-superlink",
        "networkpolicy-supernode-team-a-cluster-team-a",
        "networkpolicy-supernode-partner-cluster-team-a",
    }
    for obj in objects.values():
        assert obj["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
    assert objects["superlink"]["spec"]["providerConfigRef"] == {"kind": "ProviderConfig", "name": "team-a-cluster"}
    assert objects["pool-partner"]["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": "partner-cluster",
    }
    assert objects["superlink"]["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] == "team-a"
    args = objects["pool-partner"]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--superlink=fleet.team-a.example.com:443" in args


def test_without_the_xrd_a_namespaced_federation_is_a_claim():
    xr, objects = rendered(xrd=None)
    assert xr["kind"] == "XFederation"
    assert {o["apiVersion"] for o in objects.values()} == {"kubernetes.crossplane.io/v1alpha2"}
    assert objects["superlink"]["spec"]["providerConfigRef"] == {"name": "team-a-cluster"}


def test_the_v1_xrd_keeps_claim_semantics():
    xr, _ = rendered(xrd=ROOT / "apis" / "definition.yaml")
    assert xr["kind"] == "XFederation"


def test_function_picks_the_object_api_from_the_xr_scope():
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(
        {
            "apiVersion": "flower.crossplane.io/v1alpha1",
            "kind": "Federation",
            "metadata": {"name": "fed", "namespace": "team-b"},
            "spec": BASE,
        }
    )
    rsp = fn.run(req)
    objects = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    assert {o["apiVersion"] for o in objects.values()} == {"kubernetes.m.crossplane.io/v1alpha1"}
    assert objects["superlink"]["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}
    assert objects["pool-default"]["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] == "team-b"


def test_a_namespaced_federation_stays_in_its_namespace():
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(
        {
            "apiVersion": "flower.crossplane.io/v1alpha1",
            "kind": "Federation",
            "metadata": {"name": "fed", "namespace": "team-b"},
            "spec": spec(BASE, namespace="kube-system"),
        }
    )
    rsp = fn.run(req)
    assert next(r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL).startswith(
        "invalid Federation: spec.namespace: must be empty or 'team-b'"
    )
    assert len(rsp.desired.resources) == 0


def test_golden_v2_output():
    text, _ = render.render_file(str(EXAMPLE), None, str(XRD_V2))
    golden = ROOT / "tests" / "golden" / "v2-federation.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_crank_render_v2_matches_function_render(crank, functions_file, tmp_path):
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(render.composite(load_all(EXAMPLE)[0], namespaced=True)))
    proc = subprocess.run(
        [crank, "render", str(xr_file), str(COMPOSITION_V2), str(functions_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    ours_xr, ours = rendered()
    assert {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d["spec"] for d in docs[1:]} == {
        name: d["spec"] for name, d in ours.items()
    }
    assert docs[0]["status"] == ours_xr["status"]
    assert docs[0]["metadata"]["namespace"] == "team-a"


def test_crank_validate_v2_examples_and_objects(crank_validate, shared_crds, provider_crds, tmp_path):
    # The Composition's step input is validated too, against the function package's input CRD.
    proc = crank_validate([XRD_V2, shared_crds / "crossplane-crds", INPUT_CRD], [EXAMPLE, COMPOSITION_V2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 success cases, 0 failure cases" in proc.stdout
    _, objects = rendered()
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(list(objects.values())))
    resources = [tmp_path / "objects.yaml", EXAMPLES / "v2" / "providerconfigs.yaml"]
    proc = crank_validate(provider_crds, resources)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(objects) + 2} success cases, 0 failure cases" in proc.stdout


@pytest.mark.parametrize("bad", INVALID, ids=[p.stem for p in INVALID])
def test_v2_xrd_rejects_invalid_examples_too(bad, crank_validate):
    proc = crank_validate(XRD_V2, bad, strict=False)
    assert proc.returncode != 0
    assert expected_message(bad) in proc.stdout, proc.stdout


def test_namespaced_key_gatherers_pass_provider_kubernetes_crds(crank_validate, provider_crds, tmp_path):
    # The example with node authentication (Flower 1.41, so the partner pool may register remotely).
    claim = yaml.safe_load(EXAMPLE.read_text())
    spec = claim["spec"]
    spec["tls"] = {"secretName": "superlink-tls"}
    spec["nodeAuthentication"] = {"enabled": True}
    spec["superlink"]["image"] = "flwr/superlink:1.41.0"
    spec["supernodes"]["image"] = "flwr/supernode:1.41.0"
    spec["supernodes"]["pools"][1]["caSecretRef"] = {"name": "superlink-ca"}
    path = tmp_path / "auth.yaml"
    path.write_text(yaml.safe_dump(claim))
    _, objects = rendered(path)
    lists = {k: o for k, o in objects.items() if k.startswith("supernode-keys-gatherer-list-")}
    assert sorted(lists) == [
        "supernode-keys-gatherer-list-partner-cluster-team-a",
        "supernode-keys-gatherer-list-team-a-cluster-team-a",
    ]
    for made in lists.values():
        assert made["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
        assert made["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"]
    partner = lists["supernode-keys-gatherer-list-partner-cluster-team-a"]["spec"]["providerConfigRef"]
    assert partner == {"kind": "ClusterProviderConfig", "name": "partner-cluster"}
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(list(objects.values())))
    resources = [tmp_path / "objects.yaml", EXAMPLES / "v2" / "providerconfigs.yaml"]
    proc = crank_validate(provider_crds, resources)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failure cases" in proc.stdout
    assert "0 missing schemas" in proc.stdout
