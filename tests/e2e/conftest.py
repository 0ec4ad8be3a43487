"""The real control plane, once per Kubernetes minor the e2e runs (oldest and newest)."""

from __future__ import annotations

import os
import pathlib
import re

import pytest

from controlplane import ControlPlane, Tools, pins
from support.peers import ROOT, need

TOOLS = pathlib.Path(os.environ.get("E2E_TOOLS") or ROOT / ".cache" / "e2e")
PACKAGES = ROOT / ".cache" / "package"
PACKAGE = pathlib.Path(os.environ.get("FUNCTION_XPKG") or PACKAGES / "function-flower.xpkg")
CONFIGURATION = pathlib.Path(os.environ.get("CONFIGURATION_XPKG") or PACKAGES / "configuration-flower.xpkg")
RUNS = pathlib.Path(os.environ.get("E2E_RUNS") or ROOT / ".cache" / "e2e-run")
# The control planes: one per pinned Kubernetes release in tools/kube-*.
MINORS = sorted(
    (re.sub(r"^kube-", "", p.name) for p in (ROOT / "tools").glob("kube-1.*")),
    key=lambda m: int(m.split(".")[1]),
)
NEWEST, OLDEST = MINORS[-1], MINORS[0]
# `make test` runs each control plane in a pytest of its own, side by side
# (hack/stages.py): E2E_MINOR picks one. Unset, every minor runs, in turn.
if os.environ.get("E2E_MINOR"):
    assert os.environ["E2E_MINOR"] in MINORS, f"E2E_MINOR={os.environ['E2E_MINOR']}: not one of {MINORS}"
    MINORS = [os.environ["E2E_MINOR"]]


def pytest_report_header():
    """What each control plane runs, first in the run's log: which provider-kubernetes on which minor."""
    return [
        f"control plane k8s-{m}: Kubernetes {pins.kubernetes(m)}, Crossplane {pins.crossplane()}, "
        f"provider-kubernetes {pins.provider_for(m).release} ({pins.provider_for(m).binary})"
        for m in MINORS
    ]


@pytest.fixture(scope="session", params=MINORS, ids=lambda m: f"k8s-{m}")
def plane(request):
    tools = Tools(TOOLS, request.param, os.environ.get("CRANK") or str(ROOT / ".cache" / "bin" / "crank"))
    built = [TOOLS / f"kube-{request.param}" / "kube-apiserver", TOOLS / "crossplane", TOOLS / tools.provider.binary]
    need(all(p.exists() for p in built), f"the e2e control plane binaries ({TOOLS}; `make e2e`)")
    need(os.access(tools.crank, os.X_OK), f"the Crossplane CLI ({tools.crank}; `make crank`)")
    need(PACKAGE.exists(), f"the function package ({PACKAGE}; `make package`)")
    need(CONFIGURATION.exists(), f"the Configuration package ({CONFIGURATION}; `make package`)")
    need(os.geteuid() == 0, "root (network namespaces, chroot)")
    control_plane = ControlPlane(
        tools=tools,
        workdir=RUNS / request.param,
        package=PACKAGE,
        configuration=CONFIGURATION,
        function_manifest=ROOT / "examples" / "install" / "function.yaml",
        configuration_manifest=ROOT / "examples" / "install" / "configuration.yaml",
    )
    try:
        control_plane.start()
    except BaseException:
        print(control_plane.logs())  # noqa: T201 - pytest shows a failed fixture's output
        control_plane.stop()
        raise
    yield control_plane
    control_plane.stop()


def pytest_collection_modifyitems(config, items):
    """A scenario marked `newest_minor` runs on the newest minor's control plane only.

    Those scenarios test Crossplane's and provider-kubernetes' behaviour (how an update, a
    restart, a label or an upgrade of the package moves through them), which no API server
    release changes; the API server's own part in them (admission, CEL, RBAC, Pod Security,
    defaulting, garbage collection) is what the unmarked ones check on every minor. They are
    deselected, not skipped: the run says how many, and a skip in CI would be a failure.
    A scenario marked `oldest_minor` (a fault that waits out the provider's and Crossplane's intervals) runs
    on the oldest minor's only, for the same reason, and because that plane's lane has room beside the others.
    """
    elsewhere = [
        i
        for i in items
        if (i.get_closest_marker("newest_minor") and i.callspec.params.get("plane") != NEWEST)
        or (i.get_closest_marker("oldest_minor") and i.callspec.params.get("plane") != OLDEST)
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "plane" in item.funcargs:
        report.sections.append(("control plane logs", item.funcargs["plane"].logs()))
