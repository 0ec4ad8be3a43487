"""The API files: generated from the model, in agreement with it, wired together."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pydantic
import pytest
import yaml

from function.api.spec import MAX_POOLS, FederationSpec
from function.api.status_model import FederationStatus
from function.builders import tls
from support.api_schema import SPEC_SCHEMA, STATUS_SCHEMA, XRD, apply_defaults
from support.peers import EXAMPLES, ROOT


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("hack/gen_xrd.py", "the XRDs, from the model: what admission checks"),
        ("hack/gen_package.py", "the Compositions and package metadata the Configurations are built from"),
        ("hack/gen_k8s_schemas.py", "the Kubernetes definitions the function checks typed fields against"),
    ],
)
def test_generated_files_are_fresh(script, reason):
    proc = subprocess.run([sys.executable, script, "--check"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{reason}: {proc.stderr}"


def _model_paths(model: type[pydantic.BaseModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        for arg in _types(info.annotation):
            if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel):
                paths |= _model_paths(arg, f"{path}.")
    return paths


def _types(annotation: Any):
    yield annotation
    for arg in getattr(annotation, "__args__", ()):
        yield from _types(arg)


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    node = schema.get("items", schema) if schema.get("type") == "array" else schema
    for name, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{name}"
        paths.add(path)
        paths |= _schema_paths(sub, f"{path}.")
    return paths


def test_xrd_and_model_have_the_same_fields():
    assert _schema_paths(SPEC_SCHEMA) == _model_paths(FederationSpec)


def test_xrd_status_and_status_model_have_the_same_fields():
    assert _schema_paths(STATUS_SCHEMA) == _model_paths(FederationStatus)


def _schema_keys(node: Any):
    if isinstance(node, dict):
        yield from node
        for sub in node.values():
            yield from _schema_keys(sub)


def test_xrd_status_requires_nothing():
    # Crossplane writes status.conditions before the function writes the rest.
    assert "required" not in set(_schema_keys(STATUS_SCHEMA))


def test_xrd_defaults_are_the_model_defaults():
    minimal = {
        "mode": "StatefulSet",
        "isolationMode": "subprocess",
        "superlink": {"image": "l"},
        "supernodes": {"image": "n", "pools": [{"name": "p", "replicas": 1, "gpu": {"enabled": True}}]},
    }
    defaulted = apply_defaults(SPEC_SCHEMA, yaml.safe_load(yaml.safe_dump(minimal)))
    # The operator's defaults: ClusterIP, 9092/9091/9093, one GPU; insecure is not
    # defaulted by the XRD, since with spec.tls it must default to false.
    assert "insecure" not in defaulted
    assert tls.insecure(FederationSpec.model_validate(defaulted)) is True
    assert defaulted["superlink"]["service"] == {
        "type": "ClusterIP",
        "ports": {"grpc": 9092, "serverAppIO": 9091, "extra": 9093},
    }
    assert defaulted["supernodes"]["pools"][0]["gpu"] == {"enabled": True, "count": 1, "mountAll": False}
    assert defaulted["providerConfigRef"] == {"name": "default", "kind": "ClusterProviderConfig"}
    assert FederationSpec.model_validate(defaulted) == FederationSpec.model_validate(minimal)


def test_xrd_names_and_columns():
    spec = XRD["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["claimNames"]["kind"]) == (
        "flower.crossplane.io",
        "XFederation",
        "Federation",
    )
    assert spec["claimNames"]["shortNames"] == ["fedf"]
    columns = [c["name"] for c in spec["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["MODE", "ISOLATION", "VERSION", "SUPERNODES", "REGISTERED", "CLUSTERS", "RUNNING", "LATEST-RUN"]
    assert SPEC_SCHEMA["properties"]["supernodes"]["properties"]["pools"]["maxItems"] == MAX_POOLS == 128


def test_composition_runs_this_function():
    composition = yaml.safe_load((ROOT / "apis" / "composition.yaml").read_text())
    functions = yaml.safe_load((EXAMPLES / "functions.yaml").read_text())
    package = yaml.safe_load((ROOT / "package" / "crossplane.yaml").read_text())
    assert composition["spec"]["mode"] == "Pipeline"
    assert composition["spec"]["compositeTypeRef"] == {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederation",
    }
    names = {step["functionRef"]["name"] for step in composition["spec"]["pipeline"]}
    assert names == {functions["metadata"]["name"]} == {package["metadata"]["name"]}
    assert XRD["spec"]["defaultCompositionRef"]["name"] == composition["metadata"]["name"]


def test_package_metadata_is_a_v1_composition_function():
    package = yaml.safe_load((ROOT / "package" / "crossplane.yaml").read_text())
    assert (package["apiVersion"], package["kind"]) == ("meta.pkg.crossplane.io/v1", "Function")
    assert package["spec"]["capabilities"] == ["composition"]
    # v1 Function metadata installs from Crossplane v1.17.2 on; the README says the same.
    readme = (ROOT / "README.md").read_text()
    oldest = re.search(r"`package/crossplane.yaml` asks for\s+`(>=v\d+\.\d+\.\d+)`", readme)
    assert oldest and package["spec"]["crossplane"]["version"] == oldest.group(1)
    # What the README says is supported is what the Configuration packages ask for.
    configuration = yaml.safe_load((ROOT / "apis" / "crossplane.yaml").read_text())
    supported = re.search(r"^\| Crossplane \| (\d+\.\d+\.\d+) or later", readme, re.MULTILINE)  # Compatibility
    assert supported and configuration["spec"]["crossplane"]["version"] == f">=v{supported.group(1)}"
