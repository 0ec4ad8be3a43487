"""FederationRuns in a composition: what a Federation composes for its runs, and what a run's status says.

A Federation's call reads its runs (a required resource) and the bundles of
those Flower has not taken yet (one required ConfigMap each, in the
Federation's namespace: a run names only its own namespace's), and composes
beside the SuperLink the wanted runs, the runner's report (created once,
written by the runner) and the runner's right to write it
(function/builders/runner.py); for each run whose app is an image the
platform's policy admits, a bundler Job and the ConfigMap it writes the
bundle into (function/builders/bundler.py). The report's Object carries a label by which
each run's own call finds it: a run composes nothing, and its status is its
entry in the report, read by uid, so a new run of an old name starts afresh.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from function.api import names
from function.api.policy import Rules
from function.api.run_spec import FINISHED, MAX_FAB_BYTES
from function.api.status_model import FederationRunStatus, RunsSummary
from function.builders import bundler, published_keys, runner
from function.composition.kept import live
from function.composition.objects import Composed
from function.federation import runs as read_runs
from function.federation.runs import Run
from function.federation.value import Federation

WANTED = "superlink-runs"
STATUS = "superlink-run-status"
ROLE = "superlink-runs-role"
BINDING = "superlink-runs-binding"
BUNDLER_ACCOUNT = "app-bundler-account"
BUNDLER_ROLE = "app-bundler-role"
BUNDLER_BINDING = "app-bundler-binding"
# Each bundler's Job and ConfigMap, by their name (which changes with the run's object, as they must).
BUNDLER_PREFIX = "app-bundler-job-"
APP_BUNDLE_PREFIX = "app-bundle-"
# The requirement keys: a Federation's runs, a run's bundle, a run's Federation and its report's Object.
RUNS_REQUIREMENT = "federation-runs"
BUNDLE_PREFIX = "run-bundle-"
FEDERATION_REQUIREMENT = "run-federation"
REPORT_REQUIREMENT = "run-status"
# The label the report's Object carries, whose value names its Federation (published_keys.carried_label).
REPORT_LABEL = "flower.crossplane.io/run-status"


def takes_runs(fed: Federation) -> bool:
    """Whether the Federation has a runner: its own SuperLink, bound to a namespace, at a release that can."""
    return fed.part is None and fed.bound and fed.superlink_dialect.runs


def report_label(fed: Federation) -> str:
    """The report's Object's label value: its Federation, wherever it lives."""
    return published_keys.carried_label(fed.name, fed.namespace)


def bundle_requirement(run: Run) -> str:
    """The requirement key of a run's bundle ConfigMap."""
    return f"{BUNDLE_PREFIX}{run.name}"


@dataclasses.dataclass(frozen=True)
class Runs:
    """A Federation's runs as its call reads them, with the runner's report of them."""

    runs: list[Run]
    report: dict[str, runner.Reported]

    def submitted(self, run: Run) -> bool:
        """Whether Flower has the run (or refused it): its bundle need not travel any more."""
        entry = runner.report_of(run, self.report)
        return entry is not None and (entry.run_id is not None or entry.finished)

    @property
    def waiting(self) -> list[Run]:
        """The runs whose bundles the runner still needs."""
        return [r for r in self.runs if not self.submitted(r)]


def read(fed: Federation, required: Mapping[str, list[dict[str, Any]]], observed: Mapping[str, Any]) -> Runs:
    """The Federation's runs Crossplane answered, and the runner's report as observed."""
    if not takes_runs(fed):
        return Runs([], {})
    found = read_runs.of_federation(fed.name, fed.namespace, required.get(RUNS_REQUIREMENT) or [])
    return Runs(found, runner.reported(live(observed, STATUS)))


def bundles(given: Runs, required: Mapping[str, list[dict[str, Any]]]) -> dict[str, bytes]:
    """The bundles to hand the runner: of runs not yet submitted, oldest first, as many as fit."""
    out: dict[str, bytes] = {}
    room = runner.MAX_BUNDLES_BYTES
    for run in given.waiting:
        source = run.spec.app.configMap
        if source is None:
            continue
        answered = required.get(bundle_requirement(run)) or []
        found = runner.bundle(answered[0] if answered else None, source.key)
        if isinstance(found, bytes) and len(found) <= min(room, MAX_FAB_BYTES):
            out[run.name] = found
            room -= len(found)
    return out


def imaged(given: Runs, platform: Rules) -> list[Run]:
    """The runs waiting for an app from an image the platform admits: each gets a bundler Job.

    A run whose image the policy refuses is refused by its own call (admission.check_run); here
    it is only left out, so that no tenant's run can break its Federation.
    """
    return [
        r
        for r in given.waiting
        if r.spec.app.image is not None and platform.admits_run_image(r.spec.app.image.reference)
    ]


def resources(
    fed: Federation, given: Runs, required: Mapping[str, list[dict[str, Any]]], platform: Rules
) -> dict[str, Composed]:
    """Beside the SuperLink: the wanted runs, the runner's report and its right to write that alone.

    For a run whose app is an image, its bundler (function/builders/bundler.py) and the runner's right to read
    its bundle.
    """
    if not takes_runs(fed):
        return {}
    labels = names.labels(fed.name, "superlink", "runs")
    hub = fed.hub
    from_images = imaged(given, platform)
    bundled = {r.name: bundler.name(fed.name, r) for r in from_images}
    wanted = runner.wanted(fed.name, fed.namespace, given.runs, bundles(given, required), labels, bundled)
    out = {
        WANTED: Composed(wanted, hub),
        STATUS: Composed(
            runner.status_configmap(fed.name, fed.namespace, labels),
            hub,
            create_only=True,
            labels={REPORT_LABEL: report_label(fed)},
        ),
        ROLE: Composed(runner.role(fed.name, fed.namespace, labels, list(bundled.values())), hub),
        BINDING: Composed(runner.binding(fed.name, fed.namespace, labels), hub),
    }
    if from_images:
        out[BUNDLER_ACCOUNT] = Composed(bundler.service_account(fed), hub)
        out[BUNDLER_ROLE] = Composed(bundler.role(fed, list(bundled.values())), hub)
        out[BUNDLER_BINDING] = Composed(bundler.binding(fed), hub)
    for run in from_images:
        target = bundled[run.name]
        # Its bundle belongs to the Job once made: created empty, never written again by Crossplane.
        out[f"{APP_BUNDLE_PREFIX}{target}"] = Composed(bundler.configmap(fed, run), hub, create_only=True)
        out[f"{BUNDLER_PREFIX}{target}"] = Composed(bundler.job(fed, run), hub)
    return out


def summary(given: Runs) -> RunsSummary | None:
    """What `kubectl get federation` shows of its runs: how many are in progress, and the newest."""
    if not given.runs:
        return None
    phases = {r.name: phase_of(r, given.report) for r in given.runs}
    newest = given.runs[-1].name
    in_progress = sum(1 for p in phases.values() if p not in FINISHED)
    return RunsSummary(inProgress=in_progress, total=len(given.runs), latest=f"{newest} ({phases[newest]})")


def phase_of(run: Run, report: dict[str, runner.Reported]) -> str:
    """A run's phase: the runner's word, Pending until it has one."""
    entry = runner.report_of(run, report)
    return entry.phase if entry is not None else "Pending"


def status(run: Run, fed: Federation | None, report_object: Any, generation: Any, waiting: str) -> FederationRunStatus:
    """A run's status: its entry in the runner's report; Pending, saying why (waiting), without one."""
    entry = runner.report_of(run, runner.reported(live({"o": report_object}, "o"))) if fed is not None else None
    logs = _logs(fed) if fed is not None else None
    observed = generation if isinstance(generation, int) else None
    if entry is None:
        return FederationRunStatus(observedGeneration=observed, phase="Pending", reason=waiting, logs=logs)
    return FederationRunStatus(
        observedGeneration=observed,
        phase=entry.phase,  # type: ignore[arg-type] # runner.reported keeps only the phases there are
        runId=entry.run_id,
        flowerStatus=entry.flower_status,
        startedAt=entry.started_at,
        finishedAt=entry.finished_at,
        reason=entry.reason,
        logs=logs,
    )


def _logs(fed: Federation) -> str:
    """Where a run's ServerApp writes: the SuperExec sidecar in process isolation, else the SuperLink itself."""
    container = "superexec-serverapp" if fed.spec.isolationMode == "process" else "superlink"
    return f"kubectl logs -n {fed.namespace} {names.superlink(fed.name)}-0 -c {container}"
