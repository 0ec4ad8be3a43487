"""The XRDs install on every supported Kubernetes minor.

Crossplane turns an XRD into CRDs (the composite's and, for a v1 XRD with
claims, the claim's) and the API server validates each, estimating the cost
of every CEL rule against a budget. Each minor estimates differently, so each
is judged by its own k8s.io/apiextensions-apiserver (tools/crdcheck), on the
CRDs Crossplane's own conversion generates (tools/crank/xrd2crd).
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
from typing import Any

import pytest
import yaml

from function.api import rules
from support.peers import KUBERNETES_MINORS, ROOT, crdcheck

FLAVORS = {
    # flavor: (XRD, names of the CRDs Crossplane generates from it)
    "v1": (
        ROOT / "apis" / "definition.yaml",
        ["xfederations.flower.crossplane.io", "federations.flower.crossplane.io"],
    ),
    "v2": (ROOT / "apis" / "v2" / "definition.yaml", ["federations.flower.crossplane.io"]),
}
# The nodeConfig rules over int-or-string values, as landed first: minors
# before 1.34 put no bound on such a value's size and refuse them.
INT_OR_STRING_REFUSED = {"1.30", "1.31", "1.32", "1.33"}


def generated(xrd2crd: str, xrd: dict[str, Any], tmp_path: pathlib.Path) -> pathlib.Path:
    """The CRDs Crossplane generates from an XRD, as a YAML stream on disk."""
    source = tmp_path / "xrd.yaml"
    source.write_text(yaml.safe_dump(xrd))
    proc = subprocess.run([xrd2crd, str(source)], capture_output=True, text=True, check=True)
    out = tmp_path / "crds.yaml"
    out.write_text(proc.stdout)
    return out


def check(minor: str, path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([crdcheck(minor), str(path)], capture_output=True, text=True, timeout=120, check=False)


def spec_schemas(path: pathlib.Path) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {
        d["metadata"]["name"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] for d in docs
    }


def load(flavor: str) -> dict[str, Any]:
    return yaml.safe_load(FLAVORS[flavor][0].read_text())


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
@pytest.mark.parametrize("minor", KUBERNETES_MINORS)
def test_api_server_accepts_the_generated_crds(xrd2crd, tmp_path, minor, flavor):
    crds = generated(xrd2crd, load(flavor), tmp_path)
    assert sorted(spec_schemas(crds)) == sorted(FLAVORS[flavor][1])
    proc = check(minor, crds)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The verdict is the named minor's own code, not another's.
    assert (
        f"ok: {len(FLAVORS[flavor][1])} CRDs, k8s.io/apiextensions-apiserver v0.{minor.split('.')[1]}." in proc.stdout
    )


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_generated_crds_keep_every_admission_rule(xrd2crd, tmp_path, flavor):
    # Every rule of the table reaches the API server: none was dropped to fit.
    for name, schema in spec_schemas(generated(xrd2crd, load(flavor), tmp_path)).items():
        assert schema["x-kubernetes-validations"] == rules.admission(), name


def int_or_string_node_config(xrd: dict[str, Any]) -> dict[str, Any]:
    xrd = copy.deepcopy(xrd)
    pools = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["supernodes"]
    node_config = pools["properties"]["pools"]["items"]["properties"]["nodeConfig"]
    node_config["additionalProperties"] = {"x-kubernetes-int-or-string": True, "maxLength": 1024}
    return xrd


@pytest.mark.parametrize("minor", KUBERNETES_MINORS)
def test_each_minor_judges_with_its_own_cost_estimate(xrd2crd, tmp_path, minor):
    # The defect that kept the first XRD off Kubernetes 1.30-1.33: with
    # int-or-string nodeConfig values the placeholder rules' cost has no bound.
    # Each validator must give its own minor's verdict on that form.
    proc = check(minor, generated(xrd2crd, int_or_string_node_config(load("v1")), tmp_path))
    if minor in INT_OR_STRING_REFUSED:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "estimated rule cost exceeds budget" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("minor", [KUBERNETES_MINORS[0], KUBERNETES_MINORS[-1]])
def test_unbounded_node_config_is_refused(xrd2crd, tmp_path, minor):
    # The bounds on nodeConfig are what keeps the rules in budget everywhere.
    xrd = load("v1")
    pools = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["supernodes"]
    node_config = pools["properties"]["pools"]["items"]["properties"]["nodeConfig"]
    del node_config["maxProperties"]
    del node_config["additionalProperties"]["maxLength"]
    proc = check(minor, generated(xrd2crd, xrd, tmp_path))
    assert proc.returncode == 1
    assert "estimated rule cost exceeds budget" in proc.stdout
