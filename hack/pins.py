"""The releases pinned under tools/, read in one place: by the package generator, the e2e harness and the tests.

- Kubernetes: one control plane per tools/kube-1.NN (the e2e runs each), and a CRD validator per
  supported minor (those, and each tools/crdcheck/go.1.NN.mod).
- Crossplane: core in tools/crossplane/go.mod (what the e2e runs, and the lowest the packages ask
  for), the CLI in tools/crank/go.mod.
- provider-kubernetes: tools/provider-kubernetes/go.mod is the oldest release the Configuration
  accepts; each go.v1.N.mod beside it pins a newer one (built with -modfile, as tools/crdcheck's
  minors are). The newest minor's control plane runs the newest of them, every other plane the
  oldest, and the Configuration accepts up to the newest tested minor release of the provider.
Standard library only: hack/e2e/build-tools.sh's names and the Makefile's globs say the same.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
CROSSPLANE = "github.com/crossplane/crossplane/v2"
PROVIDER = "github.com/crossplane-contrib/provider-kubernetes"
PROVIDER_DIR = TOOLS / "provider-kubernetes"


def pinned(go_mod: pathlib.Path, module: str) -> str:
    """The release a go.mod file requires of a module."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        msg = f"{go_mod.relative_to(ROOT)} pins no {module}"
        raise ValueError(msg)
    return match.group(1)


def version(release: str) -> tuple[int, ...]:
    """A release as numbers: "v1.2.1" -> (1, 2, 1)."""
    return tuple(int(part) for part in release.removeprefix("v").split("."))


def _by_minor(minors: set[str]) -> list[str]:
    return sorted(minors, key=version)


def kube_planes() -> list[str]:
    """The Kubernetes minors the e2e runs a control plane of, oldest first."""
    return _by_minor({p.name.removeprefix("kube-") for p in TOOLS.glob("kube-1.*")})


def kube_minors() -> list[str]:
    """Every Kubernetes minor whose API server validates the CRDs in the unit tests, oldest first."""
    others = {p.name.removeprefix("go.").removesuffix(".mod") for p in (TOOLS / "crdcheck").glob("go.1.*.mod")}
    return _by_minor(others | set(kube_planes()))


def kubernetes(minor: str) -> str:
    """The Kubernetes release a control plane runs."""
    return pinned(TOOLS / f"kube-{minor}" / "go.mod", "k8s.io/kubernetes")


def crossplane() -> str:
    """The Crossplane core release the e2e runs."""
    return pinned(TOOLS / "crossplane" / "go.mod", CROSSPLANE)


def crossplane_cli() -> str:
    """The Crossplane CLI release that builds the packages and renders and validates in the tests."""
    return pinned(TOOLS / "crank" / "go.mod", CROSSPLANE)


@dataclasses.dataclass(frozen=True)
class Provider:
    """One provider-kubernetes release the e2e runs, and where build-tools.sh leaves it."""

    release: str  # "v1.2.1"
    modfile: str  # its go.mod under tools/provider-kubernetes: "go.mod", "go.v1.2.mod"
    binary: str  # the program in the e2e's tools folder
    crds: str  # the folder of its CRDs there, and in the unit tests' CRDs


def providers() -> list[Provider]:
    """The provider-kubernetes releases the e2e runs, oldest first: go.mod's, then each go.v1.N.mod's."""
    out = [Provider(pinned(PROVIDER_DIR / "go.mod", PROVIDER), "go.mod", "provider-kubernetes", "provider-crds")]
    for path in PROVIDER_DIR.glob("go.v*.mod"):
        label = path.name.removeprefix("go.").removesuffix(".mod")  # "v1.2"
        release = pinned(path, PROVIDER)
        if version(release)[:2] != version(label):
            msg = f"{path.relative_to(ROOT)} pins {release}, not a {label} release"
            raise ValueError(msg)
        out.append(Provider(release, path.name, f"provider-kubernetes-{label}", f"provider-crds-{label}"))
    return sorted(out, key=lambda p: version(p.release))


def provider_for(minor: str) -> Provider:
    """The provider-kubernetes release a minor's control plane runs.

    The newest on the newest minor, the oldest the Configuration accepts on every other.
    """
    tested = providers()
    return tested[-1] if minor == kube_planes()[-1] else tested[0]


def provider_range() -> str:
    """The provider-kubernetes releases the Configuration accepts, as a constraint.

    Crossplane's package manager reads it with Masterminds semver (space-separated comparisons all
    hold): from the oldest release the e2e runs, up to the minor release of the newest it runs; a
    later minor is untested until a go.v1.N.mod pins it.
    """
    tested = providers()
    major, minor, *_ = version(tested[-1].release)
    return f">={tested[0].release} <v{major}.{minor + 1}.0"
