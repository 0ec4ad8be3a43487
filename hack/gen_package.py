"""Generate the Configuration packages' sources in apis/: Compositions and crossplane.yaml.

Each API flavor is one Configuration package, built by `make package` with
`crossplane xpkg build` straight from its folder (apis/ for the
cluster-scoped XRD with claims, apis/v2/ for the namespaced one), so the XRD a
user installs is the committed file, byte for byte.

The versions come from where they are decided, not from a second copy:
- the function release (function/__version__.py) is the Function the
  Configuration depends on, exactly, and a label on each Composition, so every
  release makes a new CompositionRevision that users can select or pin;
- provider-kubernetes' accepted releases are those the e2e runs (hack/pins.py): from the oldest
  (tools/provider-kubernetes/go.mod) up to the minor release of the newest (its go.v1.N.mod);
- the lowest accepted Crossplane is the one the e2e runs (tools/crossplane/go.mod).
Run with --check to fail when a committed file is stale.
"""

from __future__ import annotations

import pathlib
import sys
import tomllib
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import generated  # noqa: E402 - needs the sys.path set-up above
import pins  # noqa: E402 - needs the sys.path set-up above
from function.__version__ import __version__  # noqa: E402 - needs the sys.path set-up above
from function.api import policy  # noqa: E402 - needs the sys.path set-up above

GROUP = "flower.crossplane.io"
FUNCTION = "function-flower"
# Where the README pushes the function package; a Configuration must name its
# dependencies by a fully qualified repository (see README, Install).
# Crossplane names a Function it installs as a dependency after the package's
# repository path, and the Composition calls it by that name: a repository at
# the registry's root keeps the name function-flower (see dependency_name).
FUNCTION_PACKAGE = f"registry.example.com/{FUNCTION}"
PROVIDER_PACKAGE = "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"
# Who maintains the packages, as every package's meta.crossplane.io/maintainer says (a name, no
# address: the project publishes none), and their license, pyproject.toml's (LICENSE holds its text).
MAINTAINER = "Flower Federation function maintainers"
LICENSE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
# CompositionRevisions copy the Composition's labels: this one names the release.
RELEASE_LABEL = f"{GROUP}/release"
API_LABEL = f"{GROUP}/api"
API_VERSION = "v1alpha1"


def dependency_name(package: str) -> str:
    """The name Crossplane's package manager gives a package it installs as a dependency.

    The repository path (registry and tag left out), cut to 63 characters,
    with every '.', '/', ':' and '-' inside it turned to '-' and every other
    character but [a-z0-9] dropped.
    """
    repository = package.split("/", 1)[1].split(":", 1)[0]
    out = []
    for i, char in enumerate(repository[:63]):
        if char in "abcdefghijklmnopqrstuvwxyz0123456789":
            out.append(char)
        if char in "./:-" and i not in (0, 62, len(repository) - 1):
            out.append("-")
    return "".join(out).strip("-")


def release() -> str:
    """The package release: the function's version as an OCI tag."""
    return f"v{__version__}"


FLAVORS: dict[str, dict[str, Any]] = {
    "v1": {
        "dir": ROOT / "apis",
        "package": "configuration-flower",
        "composition": f"xfederations.{GROUP}",
        "kind": "XFederation",
        "cluster_composition": f"xfederationclusters.{GROUP}",
        "cluster_kind": "XFederationCluster",
        "group_composition": f"xfederationclustergroups.{GROUP}",
        "group_kind": "XFederationClusterGroup",
        "run_composition": f"xfederationruns.{GROUP}",
        "run_kind": "XFederationRun",
        "summary": "the cluster-scoped XFederation with the namespaced claim Federation",
    },
    "v2": {
        "dir": ROOT / "apis" / "v2",
        "package": "configuration-flower-v2",
        "composition": f"federations.{GROUP}",
        "kind": "Federation",
        "cluster_composition": f"federationclusters.{GROUP}",
        "cluster_kind": "FederationCluster",
        "group_composition": f"federationclustergroups.{GROUP}",
        "group_kind": "FederationClusterGroup",
        "run_composition": f"federationruns.{GROUP}",
        "run_kind": "FederationRun",
        "summary": "the namespaced Federation of Crossplane v2 (no claim)",
    },
}


def composition(flavor: str, part: str = "") -> dict[str, Any]:
    """The flavor's Composition: one step, this function; of its FederationCluster or group with part.

    The same step and policy for a Federation, a FederationCluster and a
    FederationRun: a remote cluster's pools are judged where they are composed,
    a run's app where it is asked for. A group only fans out FederationClusters
    and reads no policy.
    """
    spec = FLAVORS[flavor]
    prefix = f"{part}_" if part else ""
    name, kind = spec[f"{prefix}composition"], spec[f"{prefix}kind"]
    step: dict[str, Any] = {"step": "compose-federation", "functionRef": {"name": dependency_name(FUNCTION_PACKAGE)}}
    if part != "group":
        # The platform's policy (function/api/policy.py): the EnvironmentConfig's
        # rules once a platform team applies it, the safe defaults until then.
        step["input"] = {
            "apiVersion": policy.API_VERSION,
            "kind": policy.KIND,
            "environmentConfig": policy.PLATFORM_ENVIRONMENT_CONFIG,
        }
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {
            "name": name,
            "labels": {API_LABEL: API_VERSION, RELEASE_LABEL: release()},
        },
        "spec": {
            "compositeTypeRef": {"apiVersion": f"{GROUP}/{API_VERSION}", "kind": kind},
            "mode": "Pipeline",
            "pipeline": [step],
        },
    }


def configuration(flavor: str) -> dict[str, Any]:
    """The flavor's package metadata (crossplane.yaml)."""
    spec = FLAVORS[flavor]
    return {
        "apiVersion": "meta.pkg.crossplane.io/v1",
        "kind": "Configuration",
        "metadata": {
            "name": spec["package"],
            "annotations": {
                "meta.crossplane.io/maintainer": MAINTAINER,
                # meta.crossplane.io/source takes the repository's public URL:
                # the project names none yet (as package/crossplane.yaml).
                "meta.crossplane.io/license": LICENSE,
                "meta.crossplane.io/description": (
                    "The Flower Federation API: a Federation deploys a Flower federated-learning "
                    "federation (SuperLink, its Service, SuperNode pools) in one cluster or many."
                ),
                "meta.crossplane.io/readme": (
                    f"Installs the CompositeResourceDefinition and Composition for {spec['summary']}, "
                    f"and depends on {FUNCTION}, which composes provider-kubernetes Objects, and on "
                    "provider-kubernetes, which delivers them to each cluster a ProviderConfig names."
                ),
            },
        },
        "spec": {
            # What the e2e runs; older Crossplane releases are untested.
            "crossplane": {"version": f">={pins.crossplane()}"},
            "dependsOn": [
                # The function release this Composition was built and tested
                # with: the schema and the function change together.
                {
                    "apiVersion": "pkg.crossplane.io/v1",
                    "kind": "Function",
                    "package": FUNCTION_PACKAGE,
                    "version": release(),
                },
                # The releases the e2e runs, from the oldest to the newest
                # one's minor: a later one is untested, and the package
                # manager would otherwise install the newest published.
                {
                    "apiVersion": "pkg.crossplane.io/v1",
                    "kind": "Provider",
                    "package": PROVIDER_PACKAGE,
                    "version": pins.provider_range(),
                },
            ],
        },
    }


HEADER = "# Generated by hack/gen_package.py. Do not edit.\n"


def _render(doc: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=100)


def outputs() -> dict[pathlib.Path, Any]:
    """Each generated file and how to render it."""
    out = {}
    for flavor, spec in FLAVORS.items():
        out[spec["dir"] / "composition.yaml"] = lambda f=flavor: _render(composition(f))
        out[spec["dir"] / "cluster-composition.yaml"] = lambda f=flavor: _render(composition(f, "cluster"))
        out[spec["dir"] / "group-composition.yaml"] = lambda f=flavor: _render(composition(f, "group"))
        out[spec["dir"] / "run-composition.yaml"] = lambda f=flavor: _render(composition(f, "run"))
        out[spec["dir"] / "crossplane.yaml"] = lambda f=flavor: _render(configuration(f))
    return out


if __name__ == "__main__":
    sys.exit(generated.main(outputs(), __doc__, "hack/gen_package.py"))
