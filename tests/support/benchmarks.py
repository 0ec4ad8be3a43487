"""A script of benchmarks/ loaded as a module, for the tests that call its functions."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.peers import ROOT


def load(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module named name, registered as it runs so that its dataclasses find it."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
