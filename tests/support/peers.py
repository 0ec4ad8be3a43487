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
    return None if path is None else load_all(path)[0]


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
