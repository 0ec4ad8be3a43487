"""The layered contract `make lint` checks (pyproject.toml): it holds today and catches what it is for."""

from __future__ import annotations

import ast
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from support.peers import ROOT, hack_module

LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    module: str  # the module given one more import, under function/
    line: str
    verdict: str  # what lint-imports says of it


CASES = [
    Case(
        "an import running up the layers: the API reading a builder",
        "api/names.py",
        "from function.builders import tls",
        "function.api is not allowed to import function.builders",
    ),
    Case(
        "the gRPC shell deciding for itself: serving reading a builder instead of the composition's outcome",
        "serving/fn.py",
        "from function.builders import tls",
        "function.serving is not allowed to import function.builders",
    ),
    Case(
        "the CLI judging input itself: serving reading the API's refusals",
        "serving/render.py",
        "from function.api import refusals",
        "function.serving is not allowed to import function.api",
    ),
    Case(
        "a cycle inside one layer: the model importing the rules that read it",
        "api/spec.py",
        "from function.api import rules",
        "No cycles are allowed in function.api",
    ),
    Case(
        "a pod program leaning on the function: the runner reading a builder the pods do not have",
        "programs/run_program.py",
        "from function.builders import identity",
        "Pod programs stand alone BROKEN",
    ),
    Case(
        "a pod program reaching into the other's modes instead of their shared plumbing",
        "programs/run_program.py",
        "from function.programs import identity_program",
        "Pod programs share only their plumbing BROKEN",
    ),
]


def lint_imports(tree: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of function/ and the project's contracts, at tree."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def copy_of_the_project(tmp_path: pathlib.Path) -> pathlib.Path:
    shutil.copytree(ROOT / "function", tmp_path / "function", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_function_keeps_its_layers(tmp_path):
    proc = lint_imports(copy_of_the_project(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 5 kept, 0 broken." in proc.stdout


@pytest.mark.parametrize("case", CASES, ids=[c.reason for c in CASES])
def test_the_contract_refuses(case: Case, tmp_path):
    tree = copy_of_the_project(tmp_path)
    module = tree / "function" / case.module
    module.write_text(module.read_text() + f"\n{case.line}  # noqa\n")
    proc = lint_imports(tree)
    assert proc.returncode != 0, proc.stdout
    assert case.verdict in proc.stdout, proc.stdout


# Where a refusal may be raised: the API layer's one place for a Federation's
# input, the function input's own reader, and the platform policy's judge of
# what was composed (function/api/refusals.py says why that one comes after).
REFUSERS = {"api/refusals.py", "api/policy.py", "composition/admission.py"}


def raisers(tree: pathlib.Path) -> dict[str, int]:
    """Modules under tree/function that raise SpecError, with how many times."""
    out: dict[str, int] = {}
    for path in sorted((tree / "function").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.exc if isinstance(node, ast.Raise) else None
            if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "SpecError":
                name = path.relative_to(tree / "function").as_posix()
                out[name] = out.get(name, 0) + 1
    return out


def test_every_refusal_is_raised_in_one_place():
    found = raisers(ROOT)
    assert set(found) == REFUSERS, found


# Where a fatal result's message may come from: the composition's outcome (its refusal, or its words for a
# response too large for Crossplane or a request too deep to decode); and two failures that are no verdict on
# any input: protobuf's own error for bytes that are no request at all, and a worker process that died.
FATAL_MESSAGES = {
    "decided.refusal",
    "outcome.too_large",
    "outcome.too_deep",
    "f'cannot read the request: {err}'",
    "f'cannot compose Federation: a worker process died: {why}'",
}


def fatal_sites(tree: pathlib.Path) -> dict[str, list[str]]:
    """By module under tree/function/serving, the message argument of every fatal(...) call, as source."""
    out: dict[str, list[str]] = {}
    for path in sorted((tree / "function" / "serving").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            # fatal() and fn.fatal(), not the SDK's response.fatal that fatal() itself calls.
            called = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
            if called in ("fatal", "fn.fatal"):
                message = ast.unparse(node.args[1])
                message = message.split("(")[0] if message.startswith("outcome.") else message
                out.setdefault(path.relative_to(tree / "function").as_posix(), []).append(message)
    return out


def test_every_fatal_result_says_what_the_composition_decided():
    found = fatal_sites(ROOT)
    assert found, "no fatal result found: the walk is broken"
    assert {m for messages in found.values() for m in messages} <= FATAL_MESSAGES, found


def test_a_fatal_result_of_serving_s_own_is_found(tmp_path):
    tree = copy_of_the_project(tmp_path)
    module = tree / "function" / "serving" / "fn.py"
    module.write_text(module.read_text() + "\n\ndef _late(rsp):\n    return fatal(rsp, 'too many pools')\n")
    assert "'too many pools'" in fatal_sites(tree)["serving/fn.py"]


def test_a_refusal_raised_elsewhere_is_found(tmp_path):
    tree = copy_of_the_project(tmp_path)
    module = tree / "function" / "topology" / "clusters.py"
    module.write_text(module.read_text() + "\n\ndef _late(x):\n    raise refusals.SpecError([(x, 'no')])\n")
    assert "topology/clusters.py" in raisers(tree)


# A function a reader takes in at once: its docstring and body, at most this many lines.
MAX_FUNCTION_LINES = 50


def long_functions(tree: pathlib.Path) -> list[str]:
    """Functions under tree/function longer than MAX_FUNCTION_LINES, as module:name (lines)."""
    out = []
    for path in sorted((tree / "function").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(tree).as_posix()}:{node.name} ({length})")
    return out


def test_every_function_fits_on_a_screen():
    assert long_functions(ROOT) == []


def test_a_long_function_is_found(tmp_path):
    tree = copy_of_the_project(tmp_path)
    module = tree / "function" / "caching.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    module.write_text(module.read_text() + f"\n\ndef _long():\n{body}")
    assert long_functions(tree) == [f"function/caching.py:_long ({MAX_FUNCTION_LINES + 1})"]


def test_one_request_leaves_serving_once():
    """At run time too (hack/layer_calls.py, docs/development.md's table): serving calls composition's
    outcome and nothing else below it, and no builder calls back into composition."""

    layer_calls = hack_module("layer_calls")
    manifest = next(d for d in yaml.safe_load_all((ROOT / "examples" / "claims" / "production.yaml").read_text()) if d)
    found = layer_calls.edges(manifest)
    from_serving = {
        below: calls for (above, below), calls in found.items() if above == "serving" and below != "caching"
    }
    assert set(from_serving) == {"composition"}, from_serving
    assert {callee for _, callee in from_serving["composition"]} == {"decide"}, from_serving
    assert ("builders", "composition") not in found, found[("builders", "composition")]
