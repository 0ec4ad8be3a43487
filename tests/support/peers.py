"""Where the tests find the project and its real peers; shared by every suite."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shlex
import sys
from types import ModuleType

import pytest
import yaml

from function.api import policy

ROOT = pathlib.Path(__file__).resolve().parents[2]
# provider-kubernetes' and Crossplane's CRDs, as data for offline validation: those of the
# pinned modules (`make unit-tools`: crossplane-crds/, provider-crds/).
SHARED_CRDS = pathlib.Path(os.environ.get("CRDS_DIR") or ROOT / ".cache" / "crds")
EXAMPLES = ROOT / "examples"
CLAIMS = sorted((EXAMPLES / "claims").glob("*.yaml"))
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))
IN_CI = os.environ.get("CI", "").lower() == "true"


def need(condition: bool, what: str) -> None:  # noqa: FBT001 - reads as a sentence: need(crank exists, "crank")
    """Skip a real-peer test locally when the peer is missing; in CI that is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI (CI=true), and missing")
    pytest.skip(f"{what} is missing")


def load_all(path: pathlib.Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def expected_message(path: pathlib.Path) -> str:
    """The error an invalid example must draw: its first line, `# expect: <message>`."""
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path} must start with '# expect: <message>'"
    return first[len("# expect: ") :]


def tool(variable: str, what: str, fallback: str = "") -> str:
    """The executable a test needs, named by an environment variable (set by `make test`)."""
    path = os.environ.get(variable) or fallback
    need(bool(path) and os.access(path, os.X_OK), f"{what} ({variable}; `make test`)")
    return path


def _kubernetes_minors() -> list[str]:
    """The supported Kubernetes minors: one CRD validator each, from the module of a control
    plane the e2e runs (tools/kube-1.NN) or pinned alone (tools/crdcheck/go.1.NN.mod)."""
    planes = [p.name.removeprefix("kube-") for p in (ROOT / "tools").glob("kube-1.*")]
    older = [p.name[len("go.") : -len(".mod")] for p in (ROOT / "tools" / "crdcheck").glob("go.1.*.mod")]
    assert planes, "no control plane pinned under tools/kube-1.NN"
    return sorted({*planes, *older}, key=lambda m: int(m.split(".")[1]))


KUBERNETES_MINORS = _kubernetes_minors()


def crdcheck(minor: str) -> str:
    """The API server's CRD validation of one Kubernetes minor."""
    path = pathlib.Path(os.environ.get("CRDCHECK_DIR") or ROOT / ".cache" / "bin") / f"crdcheck-{minor}"
    need(os.access(path, os.X_OK), f"the CRD validation of Kubernetes {minor} ({path}; `make test`)")
    return str(path)


# The policy a platform that runs the examples needing more than the defaults gives.
PLATFORM_POLICY = EXAMPLES / "policy" / "gpu-platform.yaml"


def header_commands(example: pathlib.Path) -> list[list[str]]:
    """The arguments of each `function render` command an example's leading comment gives."""
    out = []
    for line in example.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("function render "):
            out.append(shlex.split(text)[2:])
    return out


def policy_path(example: pathlib.Path) -> pathlib.Path | None:
    """The policy file an example renders under, as its header's command gives it (None: the defaults)."""
    for args in header_commands(example):
        if "--policy" in args:
            return ROOT / args[args.index("--policy") + 1]
    return None


def policy_for(example: pathlib.Path) -> dict | None:
    """The policy an example renders under, as the Composition's step gives it (None: the defaults)."""
    path = policy_path(example)
    if path is None:
        return None
    # The platform's EnvironmentConfig, its rules given in the step as they would be without one.
    [doc] = load_all(path)
    if doc["kind"] != policy.ENVIRONMENT_CONFIG_KIND:
        return doc
    return {"apiVersion": policy.API_VERSION, "kind": policy.KIND, **doc["data"]}


def composition_for(example: pathlib.Path, tmp: pathlib.Path) -> pathlib.Path:
    """The package's Composition, with the example's platform policy as its step's input where it needs one."""
    source = ROOT / "apis" / "composition.yaml"
    policy = policy_for(example)
    if policy is None:
        return source
    composition = yaml.safe_load(source.read_text())
    composition["spec"]["pipeline"][0]["input"] = policy
    out = tmp / "composition.yaml"
    out.write_text(yaml.safe_dump(composition, sort_keys=False))
    return out


def hack_module(name: str) -> ModuleType:
    """A script under hack/, imported as a module (hack/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
