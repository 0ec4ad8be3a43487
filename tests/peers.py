"""Where the tests find the project and its real peers; shared by every suite."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
from types import ModuleType

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


def hack_module(name: str) -> ModuleType:
    """A script under hack/, imported as a module (hack/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
