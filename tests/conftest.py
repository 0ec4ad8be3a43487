"""Shared fixtures: the real peers (crank, Flower, a served function)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Callable, Sequence

import pytest
import yaml

from support import served
from support.peers import EXAMPLES, SHARED_CRDS, hack_module, need, tool

pins = hack_module("pins")


@pytest.fixture(scope="session")
def crank() -> str:
    return tool("CRANK", "the Crossplane CLI", shutil.which("crank") or "")


@pytest.fixture(scope="session")
def celcheck() -> str:
    return tool("CELCHECK", "cel-go's evaluator")


@pytest.fixture(scope="session")
def xrd2crd() -> str:
    return tool("XRD2CRD", "Crossplane's XRD-to-CRD conversion")


@pytest.fixture(scope="session")
def psscheck() -> str:
    return tool("PSSCHECK", "the API server's Pod Security admission checks")


@pytest.fixture(scope="session")
def netpolicy() -> str:
    return tool("NETPOLICY", "np-guard's NetworkPolicy analyzer")


@pytest.fixture(scope="session")
def flwr_python() -> str:
    return tool("FLWR_PYTHON", "a Python with Flower 1.25")


@pytest.fixture(scope="session")
def shared_crds() -> pathlib.Path:
    need(SHARED_CRDS.is_dir(), f"the provider and Crossplane CRDs ({SHARED_CRDS})")
    return SHARED_CRDS


@pytest.fixture(scope="session", params=pins.providers(), ids=lambda p: f"provider-kubernetes-{p.release}")
def provider_crds(request, shared_crds) -> pathlib.Path:
    """The CRDs of one provider-kubernetes release the e2e runs (hack/pins.py): what is composed passes each."""
    path = shared_crds / request.param.crds
    need(path.is_dir(), f"provider-kubernetes {request.param.release}'s CRDs ({path}; `make unit-tools`)")
    return path


@pytest.fixture(scope="session")
def validate_cache(tmp_path_factory, shared_crds) -> list[str]:
    """crank beta validate flags that keep it offline.

    Validate loads Crossplane's own CRDs from a package cache; seeding that
    cache with the CRDs on disk means nothing is downloaded.
    """
    cache = tmp_path_factory.mktemp("crank-cache")
    image_dir = cache / "local" / "crossplane@offline"
    image_dir.mkdir(parents=True)
    docs = [p.read_text() for p in sorted((shared_crds / "crossplane-crds").glob("*.yaml"))]
    (image_dir / "package.yaml").write_text("\n---\n".join(docs) + "\n---\n")
    return [f"--cache-dir={cache}", "--crossplane-image=local/crossplane:offline"]


Paths = pathlib.Path | str | Sequence[pathlib.Path | str]
Validate = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def crank_validate(crank, validate_cache) -> Validate:
    """`crank beta validate SCHEMAS RESOURCES`, offline: validate(schemas, resources, strict=True).

    Each of schemas and resources is a path or several (crank reads them comma-separated).
    strict adds --error-on-missing-schemas: a resource with no schema fails.
    """

    def joined(paths: Paths) -> str:
        return str(paths) if isinstance(paths, (str, pathlib.Path)) else ",".join(str(p) for p in paths)

    def validate(schemas: Paths, resources: Paths, *, strict: bool = True) -> subprocess.CompletedProcess[str]:
        flags = ["--error-on-missing-schemas"] if strict else []
        argv = [crank, "beta", "validate", *validate_cache, *flags, joined(schemas), joined(resources)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    return validate


@pytest.fixture(scope="session")
def function_address(tmp_path_factory):
    """The function served over real gRPC, as `crossplane render` dials it: as published, its workers by default."""
    port = served.free_port()
    proc = served.serve("--insecure", port=port, log=tmp_path_factory.mktemp("function") / "function.log")
    yield f"127.0.0.1:{port}"
    proc.terminate()
    # A liveness bound, not a figure: it stops its workers first, on a machine running control planes beside it.
    proc.wait(timeout=60)


@pytest.fixture(scope="session")
def functions_file(tmp_path_factory, function_address) -> pathlib.Path:
    """examples/functions.yaml, pointed at the served function's port."""
    fn = yaml.safe_load((EXAMPLES / "functions.yaml").read_text())
    fn["metadata"]["annotations"]["render.crossplane.io/runtime-development-target"] = function_address
    path = tmp_path_factory.mktemp("functions") / "functions.yaml"
    path.write_text(yaml.safe_dump(fn))
    return path


# The modules of tests/real/, whose tests start real pods with tests/support/podrunner.py,
# marked `podrunner`: they need no Go tool, so `make test` runs them in a stage of their own
# (hack/stages.py). Under xdist each runner takes a lane of its own
# (tests/support/podrunner.py). Listed longest first: xdist hands tests out in this
# order, and the node-authentication runs (minutes each) started last would
# leave one worker running them alone at the end.
REAL = pathlib.Path(__file__).parent / "real"
PODRUNNER_MODULES = (
    "test_real_node_auth",
    "test_real_upgrade",
    "test_real_runs_as_objects",
    "test_real_runs",
    "test_real_strangers",
    "test_real_flower",
    "test_real_fleet_edge",
    "test_podrunner",
)
# Modules whose tests share one runner or one real SuperLink (a module-scoped fixture): one worker runs them all.
SHARED_RUNNER_MODULES = ("test_real_fleet_edge", "test_podrunner", "test_real_runs")


# The fixtures that give a test a real peer (a Go tool, Flower's virtualenv, the peers' CRDs), and
# the modules whose every test runs Flower's own CLI: their tests are marked `peers`, which
# `make unit-py` (the newest Python's lane) leaves out, as it builds no peer.
PEER_FIXTURES = frozenset({"crank", "celcheck", "xrd2crd", "psscheck", "netpolicy", "flwr_python", "shared_crds"})
PEER_MODULES = ("test_flower_cli",)
# The modules that test the repository's tooling (the scripts under hack/ and benchmarks/, the e2e
# harness, the image and package builds, the docs, the lint contract), not the function: marked
# `tooling`, which `make unit-py` leaves out too. They run on the project venv's Python.
TOOLING_MODULES = (
    "test_benchmarks",
    "test_docs",
    "test_e2e_harness",
    "test_image",
    "test_layers",
    "test_package",
    "test_stages",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def module(item: pytest.Item) -> str:
        return item.module.__name__ if item.module is not None else ""

    for item in items:
        if item.path.parent == REAL and module(item) not in PODRUNNER_MODULES:
            # Unmarked, its pods would run in the `unit` stage beside every other test.
            unmarked = f"{item.path.name} is in tests/real/ but not in PODRUNNER_MODULES (conftest.py)"
            raise pytest.UsageError(unmarked)
        if module(item) in PODRUNNER_MODULES:
            item.add_marker(pytest.mark.podrunner)
        if module(item) in PEER_MODULES or PEER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.peers)
        if module(item) in TOOLING_MODULES:
            item.add_marker(pytest.mark.tooling)
        if module(item) in SHARED_RUNNER_MODULES:
            item.add_marker(pytest.mark.xdist_group(module(item)))
    rank = {name: i for i, name in enumerate(PODRUNNER_MODULES)}
    items.sort(key=lambda item: rank.get(module(item), -1))  # stable: other modules first, as collected
