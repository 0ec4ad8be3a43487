"""Every example: golden output, official Kubernetes schemas, and the real Crossplane CLI."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from function.serving import render
from support.peers import (
    CLAIMS,
    EXAMPLES,
    INVALID,
    ROOT,
    composition_for,
    expected_message,
    load_all,
    policy_for,
    policy_path,
)

GOLDEN = ROOT / "tests" / "golden"
KUBERNETES_VERSIONS = ["1.30", "1.35"]  # the oldest and newest supported minors (admission policies are v1 from 1.30)
EXAMPLE_FILES = [*CLAIMS, EXAMPLES / "xr.yaml"]
# The warnings an example is meant to draw; every other example renders without any.
EXPLAIN_PLAIN = "Service carries the Fleet API without TLS to every address that reaches it: set spec.tls"
ANYONE_JOINS = (
    "and spec.nodeAuthentication.enabled is false: anyone who reaches the Fleet API can join this Federation as a "
    "SuperNode, receive the model and send updates; enable spec.nodeAuthentication"
)
EXPECTED_WARNINGS = {
    # Short examples of an exposed SuperLink, without TLS or node authentication: the function says what that means.
    **{
        example: [
            f"The SuperLink's {kind} {EXPLAIN_PLAIN}",
            f"spec.superlink.service.type is {kind} {ANYONE_JOINS} (it needs spec.tls)",
        ]
        for example, kind in [
            ("multicluster-hub-spokes", "LoadBalancer"),
            ("multicluster-nodeport", "NodePort"),
            ("multicluster-selector", "LoadBalancer"),
            ("resources", "LoadBalancer"),
        ]
    },
    # Exposed with TLS, or behind an external address, but without node authentication.
    "tls-cert-manager-multicluster": [f"spec.superlink.service.type is LoadBalancer {ANYONE_JOINS}"],
    "multicluster-external-address": [f"spec.superlink.externalAddress is set {ANYONE_JOINS} (it needs spec.tls)"],
    # The flower-operator's mixed-release example: a 1.24 pool beside a 1.25 SuperLink.
    "multipools": ["pool pool-b runs Flower 1.24.0, the SuperLink 1.25.0"],
    "flower-upgrade": [
        (
            "pool not-yet runs Flower 1.37.0, the SuperLink 1.41.0: the SuperLink serves it through Flower's "
            "internal gRPC Fleet adapter (FLWR_INTERNAL_GRPC_FLEET_API), meant for the move to 1.40; upgrade the pool"
        )
    ],
}


def ids(paths):
    return [p.stem for p in paths]


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=ids(EXAMPLE_FILES))
def test_golden_output(example):
    policy = policy_path(example)
    text, warnings = render.render_file(str(example), policy_path=str(policy) if policy else None)
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert warnings == EXPECTED_WARNINGS.get(example.stem, [])
    assert text == golden.read_text(), f"run UPDATE_GOLDEN=1 pytest {__file__} and review the diff"


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=ids(EXAMPLE_FILES))
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_pass_the_official_kubernetes_schema(example, version):
    docs, _ = render.render(load_all(example)[0], [], policy=policy_for(example))
    # Observe-only Objects name what they read; their manifest is not an object to create.
    written = [
        d for d in docs[1:] if d["kind"] == "Object" and "Observe" not in d["spec"].get("managementPolicies", [])
    ]
    manifests = [d["spec"]["forProvider"]["manifest"] for d in written]
    assert {m["kind"] for m in manifests} >= {"Service"}
    for manifest in manifests:
        if manifest["apiVersion"] == "cert-manager.io/v1":
            # Not a Kubernetes type; its shape is asserted in test_tls.py.
            continue
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("bad", INVALID, ids=ids(INVALID))
def test_function_rejects_invalid_examples(bad):
    with pytest.raises(render.RenderError) as err:
        render.render_file(str(bad))
    assert expected_message(bad) in str(err.value)


def test_render_cli_exit_status_and_stderr():
    ok = subprocess.run(
        ["function", "render", str(CLAIMS[0])], cwd=ROOT, capture_output=True, text=True, env=_venv_env(), check=False
    )
    assert ok.returncode == 0, ok.stderr
    assert next(d["kind"] for d in yaml.safe_load_all(ok.stdout)) == "XFederation"
    bad = subprocess.run(
        ["function", "render", str(INVALID[0])], cwd=ROOT, capture_output=True, text=True, env=_venv_env(), check=False
    )
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert expected_message(INVALID[0]) in bad.stderr


def _function_render(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["function", "render", *args]
    return subprocess.run(argv, cwd=ROOT, input=stdin, capture_output=True, text=True, env=_venv_env(), check=False)


def test_render_reads_standard_input_and_renders_every_federation_of_a_stream():
    """Each document is rendered, in order, as if given alone; - reads standard input (as `crossplane render`)."""
    first, second = CLAIMS[0], CLAIMS[1]
    stream = first.read_text() + "\n---\n" + second.read_text()
    both = _function_render("-", stdin=stream)
    assert both.returncode == 0, both.stderr
    alone = [render.render_file(str(p))[0] for p in (first, second)]
    assert both.stdout == "".join(alone)


NAMESPACE_DOC = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
V1BETA1_DOC = {**yaml.safe_load(CLAIMS[0].read_text()), "apiVersion": "flower.crossplane.io/v1beta1"}


@pytest.mark.parametrize(
    ("reason", "extra", "named"),
    [
        ("another kind: a Namespace beside the claim", NAMESPACE_DOC, "document 2 (v1 Namespace team-a)"),
        ("a version this function does not serve", V1BETA1_DOC, "document 2 (flower.crossplane.io/v1beta1 Federation"),
    ],
    ids=["another kind", "another version"],
)
def test_render_refuses_a_document_it_does_not_render_naming_it_and_prints_nothing(reason, extra, named):
    stream = CLAIMS[0].read_text() + "\n---\n" + yaml.safe_dump(extra)
    refused = _function_render("-", stdin=stream)
    assert refused.returncode == 1, reason
    assert refused.stdout == "", reason
    assert named in refused.stderr, refused.stderr
    assert "function render renders flower.crossplane.io/v1alpha1 Federation or XFederation" in refused.stderr


def test_render_reads_observed_state(tmp_path):
    observed = {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {"annotations": {render.COMPOSITION_RESOURCE_NAME: "pool-default"}},
        "status": {"atProvider": {"manifest": {"status": {"readyReplicas": 2}}}},
    }
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump(observed))
    text, _ = render.render_file(str(EXAMPLES / "claims" / "quickstart.yaml"), str(tmp_path))
    xr = next(yaml.safe_load_all(text))
    assert xr["status"]["supernodes"] == "2/2"


def _venv_env():
    env = dict(os.environ)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


# --- the real Crossplane CLI ---------------------------------------------------


def _xr_file(tmp_path, example):
    xr = render.composite(load_all(example)[0])
    path = tmp_path / f"{example.stem}-xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    return path


def _specs_by_resource(docs):
    """The composed resources of a render (the XR first) by composition resource name."""
    return {d["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]: d["spec"] for d in docs[1:]}


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=ids(EXAMPLE_FILES))
def test_crank_render_matches_function_render(example, crank, functions_file, tmp_path):
    proc = subprocess.run(
        [
            crank,
            "render",
            str(_xr_file(tmp_path, example)),
            str(composition_for(example, tmp_path)),
            str(functions_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    crank_docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    ours, _ = render.render(load_all(example)[0], [], policy=policy_for(example))
    assert _specs_by_resource(crank_docs) == _specs_by_resource(ours)
    # Status, conditions included: function render computes Ready as crossplane render does.
    assert crank_docs[0]["status"] == ours[0]["status"]
    (tmp_path / "rendered.yaml").write_text(proc.stdout)


def test_crank_validate_accepts_examples(crank_validate, shared_crds):
    # The Composition's step input too, against the function package's input CRD.
    proc = crank_validate(
        [ROOT / "apis" / "definition.yaml", shared_crds / "crossplane-crds", ROOT / "package" / "input"],
        [*EXAMPLE_FILES, ROOT / "apis" / "composition.yaml", EXAMPLES / "functions.yaml"],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(EXAMPLE_FILES) + 3} success cases, 0 failure cases" in proc.stdout


@pytest.mark.parametrize("bad", INVALID, ids=ids(INVALID))
def test_crank_validate_rejects_invalid_examples(bad, crank_validate):
    proc = crank_validate(ROOT / "apis" / "definition.yaml", bad, strict=False)
    assert proc.returncode != 0
    assert expected_message(bad) in proc.stdout, proc.stdout


def test_rendered_objects_pass_provider_kubernetes_crds(crank_validate, provider_crds, tmp_path):
    rendered = tmp_path / "objects"
    rendered.mkdir()
    for example in EXAMPLE_FILES:
        docs, _ = render.render(load_all(example)[0], [], policy=policy_for(example))
        (rendered / f"{example.stem}.yaml").write_text(yaml.safe_dump_all(docs[1:]))
    proc = crank_validate(provider_crds, rendered)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failure cases" in proc.stdout
    assert "0 missing schemas" in proc.stdout
