"""The Configuration packages: built by the real Crossplane CLI from apis/ as committed."""

from __future__ import annotations

import gzip
import io
import json
import operator
import re
import subprocess
import tarfile
import tomllib
from typing import Any

import pytest
import yaml

from function.__version__ import __version__
from support.peers import ROOT, hack_module

gen_package = hack_module("gen_package")
pins = hack_module("pins")

# flavor -> the `crossplane xpkg build` arguments the Makefile gives it.
BUILDS = {
    "v1": ["--package-root=apis", "--ignore=v2/*", "--examples-root=examples/claims"],
    "v2": ["--package-root=apis/v2", "--examples-root=examples/v2"],
}


def package_objects(xpkg: bytes) -> list[dict[str, Any]]:
    """The objects of a package's package.yaml, read from its OCI image tarball."""
    with tarfile.open(fileobj=io.BytesIO(xpkg)) as image:
        manifest = json.load(image.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(image.extractfile(layer).read()))) as files:  # type: ignore[union-attr]
                if "package.yaml" in files.getnames():
                    docs = yaml.safe_load_all(files.extractfile("package.yaml"))  # type: ignore[arg-type]
                    return [_as_written(d) for d in docs if d]
    msg = "no package.yaml in any layer"
    raise AssertionError(msg)


def _as_written(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as its file has it: the CLI serializes typed objects, which
    adds an empty status and a null creationTimestamp."""
    obj = {k: v for k, v in obj.items() if k != "status"}
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if not (k == "creationTimestamp" and v is None)}
    return obj


@pytest.fixture(scope="module")
def built(crank, tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("xpkg")
    packages = {}
    for flavor, args in BUILDS.items():
        target = out / f"{flavor}.xpkg"
        subprocess.run([crank, "xpkg", "build", *args, "-o", str(target)], cwd=ROOT, check=True,
                       capture_output=True, text=True)  # fmt: skip
        packages[flavor] = package_objects(target.read_bytes())
    return packages


def committed(folder: str) -> dict[str, dict[str, Any]]:
    return {
        name: yaml.safe_load((ROOT / folder / f"{name}.yaml").read_text())
        for name in (
            "crossplane",
            "definition",
            "composition",
            "cluster-definition",
            "cluster-composition",
            "group-definition",
            "group-composition",
            "run-definition",
            "run-composition",
        )
    }


@pytest.mark.parametrize(
    ("flavor", "folder", "xrds"),
    [
        # claims: Crossplane's v1 XRD shape
        (
            "v1",
            "apis",
            [
                "xfederations.flower.crossplane.io",
                "xfederationclusters.flower.crossplane.io",
                "xfederationclustergroups.flower.crossplane.io",
                "xfederationruns.flower.crossplane.io",
            ],
        ),
        # namespaced, no claim
        (
            "v2",
            "apis/v2",
            [
                "federations.flower.crossplane.io",
                "federationclusters.flower.crossplane.io",
                "federationclustergroups.flower.crossplane.io",
                "federationruns.flower.crossplane.io",
            ],
        ),
    ],
)
def test_each_flavor_packages_its_committed_files_and_nothing_else(built, flavor, folder, xrds):
    objects = built[flavor]
    files = committed(folder)
    # The package is the committed files, as parsed: no copy that can drift. The Federation's
    # XRD and Composition, those of the FederationCluster it composes per remote cluster, of the
    # groups it composes those through, and of the FederationRuns users apply on it.
    meta = next(o for o in objects if o["kind"] == "Configuration")
    assert meta["spec"] == files["crossplane"]["spec"]
    assert meta["metadata"]["name"] == files["crossplane"]["metadata"]["name"]
    definitions = {o["metadata"]["name"]: o for o in objects if o["kind"] == "CompositeResourceDefinition"}
    compositions = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Composition"}
    assert len(objects) == 1 + len(definitions) + len(compositions)
    assert sorted(definitions) == sorted(xrds)
    assert definitions[xrds[0]] == files["definition"]
    assert definitions[xrds[1]] == files["cluster-definition"]
    assert definitions[xrds[2]] == files["group-definition"]
    assert definitions[xrds[3]] == files["run-definition"]
    assert sorted(compositions.values(), key=lambda c: c["metadata"]["name"]) == sorted(
        [files[f"{part}composition"] for part in ("", "cluster-", "group-", "run-")],
        key=lambda c: c["metadata"]["name"],
    )
    for definition in definitions.values():
        assert definition["spec"]["defaultCompositionRef"]["name"] in compositions


def test_the_packages_differ_by_name_so_both_can_be_published():
    names = {
        yaml.safe_load((ROOT / f / "crossplane.yaml").read_text())["metadata"]["name"] for f in ("apis", "apis/v2")
    }
    assert names == {"configuration-flower", "configuration-flower-v2"}


def _requires(go_mod: str) -> dict[str, str]:
    """Each module tools/<go_mod>/go.mod requires, and its release."""
    text = (ROOT / "tools" / go_mod / "go.mod").read_text()
    return dict(re.findall(r"^(?:require)?\s+(\S+) (v\S+)", text, flags=re.MULTILINE))


def test_the_cli_and_the_control_plane_share_their_libraries():
    """The CLI (tools/crank) and Crossplane core (tools/crossplane) differ in Crossplane alone: every library
    both require is at one release, so a cold build compiles it once (docs/development.md, Stages)."""
    cli, core = _requires("crank"), _requires("crossplane")
    apart = {"github.com/crossplane/crossplane/v2", "github.com/crossplane/crossplane-runtime/v2"}
    shared = (set(cli) & set(core)) - apart
    assert len(shared) > 100, "the modules no longer share the Kubernetes libraries: this check checks nothing"
    assert {m: (cli[m], core[m]) for m in sorted(shared) if cli[m] != core[m]} == {}


def test_the_cli_is_cores_release_once_it_can_be():
    """The CLI that builds the packages and renders in the tests (tools/crank) is Crossplane core's release
    (tools/crossplane) when it is its own module, github.com/crossplane/cli/v2 (from 2.3.0); until tools/crank
    pins that module, it is 2.2, the last minor whose CLI was inside core's module (README, Compatibility)."""
    cli, core = _requires("crank"), _requires("crossplane")["github.com/crossplane/crossplane/v2"]
    if "github.com/crossplane/cli/v2" in cli:
        assert cli["github.com/crossplane/cli/v2"] == core
    else:
        assert pins.version(cli["github.com/crossplane/crossplane/v2"])[:2] == (2, 2)


@pytest.mark.parametrize("folder", ["apis", "apis/v2"])
def test_dependencies_are_what_the_e2e_runs(folder):
    meta = yaml.safe_load((ROOT / folder / "crossplane.yaml").read_text())
    function_meta = yaml.safe_load((ROOT / "package" / "crossplane.yaml").read_text())
    version = __version__
    deps = {d["kind"]: d for d in meta["spec"]["dependsOn"]}
    assert set(deps) == {"Function", "Provider"}
    assert all(d["apiVersion"] == "pkg.crossplane.io/v1" for d in deps.values()), "the deprecated keys are not used"
    # The function release built beside it, exactly: schema and function change together.
    assert deps["Function"]["version"] == f"v{version}"
    assert deps["Function"]["package"].rsplit("/", 1)[1] == function_meta["metadata"]["name"]
    # provider-kubernetes: the releases the e2e runs, from the oldest to the newest one's minor
    # (test_the_provider_range_holds_what_the_e2e_runs_and_no_later_minor); Crossplane from the one it runs.
    assert deps["Provider"]["package"] == "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"
    oldest = _requires("provider-kubernetes")["github.com/crossplane-contrib/provider-kubernetes"]
    assert deps["Provider"]["version"] == pins.provider_range()
    assert deps["Provider"]["version"].startswith(f">={oldest} <")
    assert (
        meta["spec"]["crossplane"]["version"] == ">=" + _requires("crossplane")["github.com/crossplane/crossplane/v2"]
    )
    # Every release labels its Composition, so each one is a CompositionRevision users can pick.
    composition = yaml.safe_load((ROOT / folder / "composition.yaml").read_text())
    assert composition["metadata"]["labels"]["flower.crossplane.io/release"] == f"v{version}"


def _satisfies(release: str, constraint: str) -> bool:
    """Whether a release meets a constraint of space-separated comparisons, as Masterminds semver (Crossplane's
    package manager) reads ">=v1.0.0 <v1.3.0": every comparison holds."""
    compare = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "=": operator.eq}
    terms = re.findall(r"(>=|<=|>|<|=)\s*(v\d+\.\d+\.\d+)", constraint)
    assert " ".join(f"{op}{v}" for op, v in terms) == constraint, f"{constraint!r}: not only comparisons"
    return all(compare[op](pins.version(release), pins.version(v)) for op, v in terms)


@pytest.mark.parametrize("folder", ["apis", "apis/v2"])
def test_the_provider_range_holds_what_the_e2e_runs_and_no_later_minor(folder):
    """The Configuration accepts every provider-kubernetes release the e2e runs, and no minor release after the
    newest of them: the package manager installs the newest release a range allows, which is then a tested one."""
    meta = yaml.safe_load((ROOT / folder / "crossplane.yaml").read_text())
    constraint = next(d["version"] for d in meta["spec"]["dependsOn"] if d["kind"] == "Provider")
    tested = [p.release for p in pins.providers()]
    assert len(tested) >= 2, "the e2e runs the oldest accepted release and the newest tested one"
    assert [r for r in tested if not _satisfies(r, constraint)] == []
    major, minor, patch = pins.version(tested[-1])
    assert _satisfies(f"v{major}.{minor}.{patch + 1}", constraint), "a patch release of the newest is accepted"
    assert not _satisfies(f"v{major}.{minor + 1}.0", constraint)
    assert not _satisfies(f"v{major + 1}.0.0", constraint)
    # The e2e runs the newest on the newest Kubernetes minor and the oldest on the others.
    planes = pins.kube_planes()
    assert pins.provider_for(planes[-1]).release == tested[-1]
    assert {pins.provider_for(m).release for m in planes[:-1]} == {tested[0]}


@pytest.mark.parametrize(
    ("package", "name", "reason"),
    [
        # Names Crossplane gave packages it installed as dependencies.
        (
            "xpkg.crossplane.io/crossplane-contrib/function-patch-and-transform",
            "crossplane-contrib-function-patch-and-transform",
            "a function Crossplane installed as a dependency",
        ),
        (
            "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes",
            "crossplane-contrib-provider-kubernetes",
            "a provider Crossplane installed as a dependency",
        ),
        ("registry.example.com/function-flower", "function-flower", "at the registry's root: the bare name"),
        ("127.0.0.1:5000/function-flower", "function-flower", "the registry's port is not in the path"),
        ("ghcr.io/acme/function_flower", "acme-functionflower", '"_" is dropped, as Crossplane does'),
    ],
)
def test_dependency_name_follows_crossplane(package, name, reason):
    assert gen_package.dependency_name(package) == name, reason


def test_the_composition_calls_the_function_by_the_name_its_dependency_gets():
    # Installed by the Configuration's dependency resolution, the Function is
    # named after its repository; the Composition must call that name.
    meta = yaml.safe_load((ROOT / "apis" / "crossplane.yaml").read_text())
    source = next(d["package"] for d in meta["spec"]["dependsOn"] if d["kind"] == "Function")
    for folder in ("apis", "apis/v2"):
        composition = yaml.safe_load((ROOT / folder / "composition.yaml").read_text())
        refs = {s["functionRef"]["name"] for s in composition["spec"]["pipeline"]}
        assert refs == {gen_package.dependency_name(source)} == {"function-flower"}, folder
    install = yaml.safe_load((ROOT / "examples" / "install" / "function.yaml").read_text())
    assert install["spec"]["package"].rsplit(":", 1)[0] == source


def test_a_release_bump_makes_a_new_composition_revision(monkeypatch):
    # Crossplane hashes a Composition's labels with its spec into the revision;
    # a release with an unchanged pipeline must still be told apart.
    before = gen_package.composition("v1")
    monkeypatch.setattr(gen_package, "__version__", "0.2.0")
    after = gen_package.composition("v1")
    assert before["spec"] == after["spec"]
    assert before["metadata"]["labels"] != after["metadata"]["labels"]


# What every package says of itself (the keys Crossplane's package metadata reads), and why.
META = "meta.crossplane.io"
ANNOTATIONS = [
    ("maintainer", "who to ask: a name, the project publishes no address"),
    ("license", "the license the package's source is under: pyproject.toml's, whose text is LICENSE"),
    ("description", "one sentence, as a registry lists it"),
    ("readme", "what installing it does"),
]


@pytest.mark.parametrize("meta", ["package/crossplane.yaml", "apis/crossplane.yaml", "apis/v2/crossplane.yaml"])
def test_every_package_names_its_maintainer_and_license(meta):
    annotations = yaml.safe_load((ROOT / meta).read_text())["metadata"]["annotations"]
    for key, why in ANNOTATIONS:
        assert annotations.get(f"{META}/{key}"), f"{meta}: {META}/{key} ({why})"
    assert annotations[f"{META}/maintainer"] == gen_package.MAINTAINER
    license_ = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert annotations[f"{META}/license"] == license_ == "Apache-2.0"
    # No repository URL is published yet: one made up would send users to the wrong place.
    assert f"{META}/source" not in annotations


def test_the_license_file_is_the_apache_license_2_0():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
