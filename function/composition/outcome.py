"""One call's outcome, decided here and only sent by function/serving: the layer's single entry point.

A call gives the composite as observed, its composed resources as observed,
the resources Crossplane answered (by requirement key) and the function's
input (the platform's policy, from the Composition's step). `decide` returns
an `Outcome`: the desired resources and whether each is ready, the
composite's status and readiness, conditions, warnings, what Crossplane
should read for the next call, how soon to call again, or a refusal (a fatal
result, with nothing desired). Every verdict is made below serving; serving
translates the outcome to the wire (function/serving/fn.py) or the CLI's
output (function/serving/render.py) and imports nothing below this layer.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from crossplane.function import logging
from crossplane.function.resource import Condition

from function.api import policy, refusals
from function.api.refusals import SpecError
from function.api.run_spec import MAX_FAB_BYTES
from function.builders import bundler, tls
from function.builders.runner import bundle as runner_bundle
from function.composition import admission, compose, groups, objects, runs, status
from function.federation import read
from function.federation import runs as read_runs
from function.federation.value import Federation
from function.topology import clusters

# How soon Crossplane composes a composite again when nothing it watches changed: it requeues after the
# response's TTL (with realtime compositions, its default, that and watch events alone; its
# --poll-interval does not apply to composites). A Federation reads what no watch tells it of (the
# ProviderConfigs its selectors match, the CA to copy, the keys its pools published) and keeps the SDK's
# minute, the time a cluster joining or a new SuperNode's key waits at most. A FederationCluster is told
# everything by watches (its spec by its Federation, its Objects by their status) but the platform's
# EnvironmentConfig, which rarely changes: again every few minutes is enough. Each minute, a thousand
# FederationClusters would apply their nine Objects again 17 times a second, changing nothing.
# A group is composed again each minute too: it lists its clusters' keys beside the SuperLink, and
# Crossplane's circuit breaker drops the watch events of a group its FederationClusters woke too often
# (while their pods start, every one of them writes its status): a key its FederationCluster reported
# then waited for this TTL before its SuperNode could join (five minutes, measured at 100 clusters).
# 32 groups each minute re-apply their clusters' FederationClusters, unchanged: at 1,000 clusters,
# about 17 applies a second on an idle hub.
FEDERATION_TTL = dt.timedelta(minutes=1)
# But sooner while a pool waits (compose.Hold) for the CA to copy, which no watch tells of (a required
# Secret), or for the SuperLink's external address: the events that would tell of them (the Certificate's
# or Service's Object) come as the Federation's first Objects are made, when Crossplane's circuit breaker
# drops most of its events, and every remote pool waited for this minute (measured at 100 clusters: the
# FederationClusters made 59 s after the apply in one run of three, 2 s in the others). While pools wait
# the Federation composes only what is beside the SuperLink, so looking every 10 s costs little, however
# long a missing Secret keeps them waiting.
HELD_TTL = dt.timedelta(seconds=10)
GROUP_TTL = dt.timedelta(minutes=1)
# But not once every FederationCluster of the group is Ready with every key it expects listed: what
# changes next (a pod, a key, a spec) changes a FederationCluster's status, whose event reaches the group
# (its circuit breaker, open while their pods start, has closed by then, as no events come). The groups'
# minute was most of a settled hub's writes: at 100 clusters, 59 writes in the minute after Ready with
# this TTL, 260 to 321 without.
SETTLED_GROUP_TTL = dt.timedelta(minutes=5)
FEDERATION_CLUSTER_TTL = dt.timedelta(minutes=5)
# But not while keys it expects are missing. Crossplane watches its Objects, the keys gatherer's list among
# them (read every 30 s while its place changes: readiness.keys_list), yet its circuit breaker drops the
# events of a FederationCluster whose Objects changed often, as they do while its pods start: a list
# written then woke nothing, and waited for this TTL (measured at 25 clusters, when keys came as Objects
# of their own: two FederationClusters' circuits open, their keys listed five minutes after the rest). So
# it looks each minute until every key is there. A key that never comes (a pod that cannot publish) keeps
# its cluster looking each minute, as a group does: bounded, and only for the clusters still waiting.
KEYS_AWAITED_TTL = dt.timedelta(minutes=1)
# And sooner while it is not Ready: the same circuit breaker drops the event of a StatefulSet whose last
# pods turned ready, and nothing else changes after it (measured at 100 clusters: one cluster's SuperNodes,
# ready in their spoke after 182 s, counted at 513 s, when this TTL's five minutes were up). The provider
# reads an Object that is not Ready every 30 s; a cluster not Ready looks at what it read as often.
STARTING_CLUSTER_TTL = dt.timedelta(seconds=30)
# A FederationRun composes nothing, so no watch wakes it: it reads its entry of the runner's report
# again this often while Flower works on it, and rarely once Flower is done with it.
RUN_TTL = dt.timedelta(seconds=15)
FINISHED_RUN_TTL = dt.timedelta(minutes=10)

# The names the CLI answers requirements and builds composites with, as Crossplane would.
TLS_REQUIREMENT = tls.REQUIREMENT
CLAIM_NAME_LABEL = read.CLAIM_NAME
CLAIM_NAMESPACE_LABEL = read.CLAIM_NAMESPACE
# How a refusal by the platform's policy introduces what would allow it (the CLI adds how to try one).
POLICY_ALLOWED_BY = admission.ALLOWED_BY


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A resource Crossplane should read for the next call: by name or by labels, of one kind."""

    key: str
    api_version: str
    kind: str
    match_name: str | None = None
    match_labels: Mapping[str, str] | None = None
    namespace: str | None = None


@dataclasses.dataclass
class Outcome:
    """What one call decided (see the module's docstring). A refusal carries nothing else."""

    # What was composed, for messages: "Federation" or "FederationClusterGroup".
    kind: str
    desired: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    ready: dict[str, bool] = dataclasses.field(default_factory=dict)
    # The composite's status, and its readiness where its resources do not decide it: False where it
    # is not ready however ready its resources are, True for a composite that composes nothing.
    status: dict[str, Any] | None = None
    composite_ready: bool | None = None
    conditions: list[Condition] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    requirements: list[Requirement] = dataclasses.field(default_factory=list)
    ttl: dt.timedelta | None = None
    refusal: str | None = None


def refused(kind: str, message: str) -> Outcome:
    """A fatal result: nothing desired, so nothing live is removed (Crossplane stops before applying)."""
    return Outcome(kind, refusal=message)


def decide(
    xr: dict[str, Any],
    observed: dict[str, dict[str, Any]],
    required: dict[str, list[dict[str, Any]]],
    given_input: dict[str, Any] | None,
) -> Outcome:
    """The outcome of one call. required: the answered requirements, a key present once asked (even empty)."""
    if read.is_group(xr):
        # A group only fans out FederationClusters, each judged under the policy by its own call.
        return _group(xr, observed)
    try:
        given = policy.load(given_input)
    except SpecError as err:
        return refused("Federation", f"invalid function input (the Composition's policy): {err}")
    if given.environmentConfig and policy.REQUIREMENT not in required:
        # First ask for the policy, then judge: Crossplane calls again with it at once, and
        # would not after a fatal result. Nothing desired here is applied.
        return Outcome("Federation", requirements=_policy_requirement(given))
    out = _run(xr, required, given) if read_runs.is_run(xr) else _judged(xr, observed, required, given)
    if out.refusal is None:
        out.requirements += _policy_requirement(given)
    return out


def _judged(
    xr: dict[str, Any],
    observed: dict[str, dict[str, Any]],
    required: dict[str, list[dict[str, Any]]],
    given: policy.Policy,
) -> Outcome:
    """A Federation composed under the policy the input gives (with its EnvironmentConfig), or a refusal."""
    try:
        platform = policy.effective(given, required.get(policy.REQUIREMENT) or [])
    except SpecError as err:
        return refused("Federation", f"invalid platform policy: {err}")
    try:
        return _federation(xr, observed, required, platform)
    except SpecError as err:
        return refused("Federation", f"invalid Federation: {err}")
    except Exception as err:  # a bug must not crash the server or drop resources
        logging.get_logger().exception("cannot compose Federation")
        return refused("Federation", f"cannot compose Federation: {type(err).__name__}: {err}")


def _federation(
    xr: dict[str, Any],
    observed: dict[str, dict[str, Any]],
    required: dict[str, list[dict[str, Any]]],
    platform: policy.Rules,
) -> Outcome:
    """A Federation (or FederationCluster) composed under the platform's policy."""
    fed = read.cluster(xr) if read.is_cluster(xr) else read.federation(xr, required, observed)
    remembered = ((xr.get("status") or {}).get("endpoints") or {}).get("external")
    secrets = required.get(tls.REQUIREMENT) or []
    given_runs = runs.read(fed, required, observed)
    built = compose.plan(fed, observed, remembered, secrets[0] if secrets else None,
                         runs.resources(fed, given_runs, required, platform),
                         (xr.get("status") or {}).get("publishedKeys"))  # fmt: skip
    # The platform's policy, from the Composition's step: what the Federation may have composed.
    admission.check(fed, platform, built)
    desired = compose.desired(fed, built)
    report = status.report(fed, built, observed, (xr.get("metadata") or {}).get("generation"))
    # Not only the fields set: those set to None (no generation, no external address) too.
    written = report.status.wire()
    summary = runs.summary(given_runs)
    if summary is not None:
        written["runs"] = summary.model_dump(mode="json", exclude_none=True)
    return Outcome(
        "Federation",
        desired,
        {name: bool(report.ready.get(name)) for name in desired},
        written,
        # Pools that wait are not desired resources, yet the Federation is not ready; nor is one
        # whose selectors stand for no cluster yet.
        # Nor is one whose SuperLink's cluster does not answer: nothing there can train.
        False if built.held or not fed.spec.supernodes.pools or report.hub_unreached else None,
        list(report.conditions),
        list(report.warnings),
        [*_requirements(fed, built), *_run_requirements(fed, given_runs)],
        _ttl(fed, report, held=bool(built.held)),
    )


def _ttl(fed: Federation, report: status.Report, *, held: bool) -> dt.timedelta:
    """How soon Crossplane composes it again with no event: sooner while pools wait, it starts or keys are awaited."""
    if fed.part is None:
        return HELD_TTL if held else FEDERATION_TTL
    if not all(report.ready.values()):
        return STARTING_CLUSTER_TTL
    return KEYS_AWAITED_TTL if report.keys_awaited else FEDERATION_CLUSTER_TTL


def _group(xr: dict[str, Any], observed: dict[str, dict[str, Any]]) -> Outcome:
    """A FederationClusterGroup's FederationClusters, or a refusal."""
    try:
        group = groups.compose(xr, observed)
    except SpecError as err:
        return refused("FederationClusterGroup", f"invalid FederationClusterGroup: {err}")
    except Exception as err:  # a bug must not crash the server or drop resources
        logging.get_logger().exception("cannot compose FederationClusterGroup")
        return refused("FederationClusterGroup", f"cannot compose FederationClusterGroup: {type(err).__name__}: {err}")
    return Outcome("FederationClusterGroup", group.desired, group.ready, group.status.wire(),
                   conditions=[group.condition], ttl=SETTLED_GROUP_TTL if group.settled else GROUP_TTL)  # fmt: skip


def _requirements(fed: Federation, built: compose.Plan) -> list[Requirement]:
    """What the next call needs: the selectors' ProviderConfigs and the CA to copy."""
    out: list[Requirement] = []
    if fed.part is None:
        # A FederationCluster is given what these would tell it. Asked for on every call:
        # Crossplane answers only what the last response asked.
        for need in clusters.requirements(fed.written, fed.namespace, namespaced=fed.namespaced):
            out.append(Requirement(need.key, need.api_version, need.kind, match_labels=need.labels,
                                   namespace=need.namespace))  # fmt: skip
        if built.needs_ca:
            # Copying the CA to other namespaces and clusters needs the SuperLink's Secret.
            out.append(Requirement(tls.REQUIREMENT, "v1", "Secret", match_name=tls.secret_name(fed.name, fed.spec),
                                   namespace=fed.namespace))  # fmt: skip
    return out


def _run_requirements(fed: Federation, given: runs.Runs) -> list[Requirement]:
    """With a runner, the Federation's runs and the bundle of each run Flower has not taken yet.

    All of its namespace's runs: each says which Federation it is for.
    """
    if not runs.takes_runs(fed):
        return []
    if fed.namespaced:
        out = [Requirement(runs.RUNS_REQUIREMENT, RUN_API, "FederationRun", match_labels={}, namespace=fed.namespace)]
    else:
        claimed = {read_runs.CLAIM_NAMESPACE: fed.namespace}
        out = [Requirement(runs.RUNS_REQUIREMENT, RUN_API, "XFederationRun", match_labels=claimed)]
    for run in given.waiting:
        source = run.spec.app.configMap
        if source is not None:
            out.append(Requirement(runs.bundle_requirement(run), "v1", "ConfigMap", match_name=source.name,
                                   namespace=run.namespace))  # fmt: skip
    return out


def _run(xr: dict[str, Any], required: dict[str, list[dict[str, Any]]], given: policy.Policy) -> Outcome:
    """A FederationRun's status from its Federation's runner's report, or a refusal."""
    try:
        platform = policy.effective(given, required.get(policy.REQUIREMENT) or [])
        run = read_runs.run(xr)
        admission.check_run(run, platform)
        return _run_status(run, required, (xr.get("metadata") or {}).get("generation"))
    except SpecError as err:
        return refused("FederationRun", f"invalid FederationRun: {err}")
    except Exception as err:  # a bug must not crash the server
        logging.get_logger().exception("cannot read FederationRun")
        return refused("FederationRun", f"cannot read FederationRun: {type(err).__name__}: {err}")


def _run_status(run: read_runs.Run, required: dict[str, list[dict[str, Any]]], generation: Any) -> Outcome:
    """What a run's call reports: Pending (and why) until its Federation's runner reports it, then its entry."""
    needs = [_federation_requirement(run), *_bundle_requirement(run)]
    found = required.get(runs.FEDERATION_REQUIREMENT)
    fed: Federation | None = None
    if found is None:
        waiting = f"looking for Federation {run.spec.federation!r}"
    elif not found:
        waiting = f"no Federation {run.spec.federation!r} in namespace {run.namespace!r}"
    else:
        try:
            fed = read.federation(found[0])
        except SpecError as err:
            waiting = f"Federation {run.spec.federation!r} is refused: {err}"
        else:
            refusals.run_release(fed.name, fed.flower.superlink, fed.superlink_dialect)
            needs.append(_report_requirement(fed, found[0]))
            waiting = _bundle_problem(run, required) or _waiting_for(fed, run)
    reported = required.get(runs.REPORT_REQUIREMENT) or []
    written = runs.status(run, fed, reported[0] if reported else None, generation, waiting)
    finished = written.phase in ("Completed", "Failed", "Stopped")
    return Outcome(
        "FederationRun",
        status=written.wire(),
        composite_ready=written.phase in ("Running", "Completed"),
        conditions=[_succeeded(written.phase, written.reason)],
        requirements=needs,
        ttl=FINISHED_RUN_TTL if finished else RUN_TTL,
    )


RUN_API = "flower.crossplane.io/v1alpha1"
# A run's call reads its bundle's ConfigMap only to say what is wrong with it.
RUN_BUNDLE = "run-bundle"


def _federation_requirement(run: read_runs.Run) -> Requirement:
    """The Federation a run names, in its own namespace only."""
    if run.namespaced:
        return Requirement(runs.FEDERATION_REQUIREMENT, RUN_API, "Federation", match_name=run.spec.federation,
                           namespace=run.namespace)  # fmt: skip
    claim = {read.CLAIM_NAME: run.spec.federation, read.CLAIM_NAMESPACE: run.namespace}
    return Requirement(runs.FEDERATION_REQUIREMENT, RUN_API, "XFederation", match_labels=claim)


def _bundle_requirement(run: read_runs.Run) -> list[Requirement]:
    """The ConfigMap holding the run's app, to tell its user what is wrong with it (an image's: none to read)."""
    source = run.spec.app.configMap
    if source is None:
        return []
    return [Requirement(RUN_BUNDLE, "v1", "ConfigMap", match_name=source.name, namespace=run.namespace)]


def _bundle_problem(run: read_runs.Run, required: dict[str, list[dict[str, Any]]]) -> str | None:
    """What keeps the runner from the run's app, if anything."""
    source = run.spec.app.configMap
    answered = required.get(RUN_BUNDLE)
    if source is None or answered is None:
        return None
    where = f"ConfigMap {run.namespace}/{source.name}"
    found = runner_bundle(answered[0] if answered else None, source.key)
    if isinstance(found, str):
        return f"{where} {found}"
    if len(found) > MAX_FAB_BYTES:
        return f"{where} holds a bundle of {len(found)} bytes; a run's may have at most {MAX_FAB_BYTES}"
    return None


def _waiting_for(fed: Federation, run: read_runs.Run) -> str:
    """Why a run is Pending before the runner reports it: the runner, or first the Job bundling its image."""
    image = run.spec.app.image
    if image is None:
        return "waiting for the SuperLink's runner to take the run"
    return f"waiting for Job {fed.namespace}/{bundler.name(fed.name, run)} to bundle the app of {image.reference}"


def _report_requirement(fed: Federation, federation_xr: dict[str, Any]) -> Requirement:
    """The Object of the runner's report, composed by this very Federation."""
    composite = (federation_xr.get("metadata") or {}).get("name") or ""
    labels = {runs.REPORT_LABEL: runs.report_label(fed), COMPOSITE_LABEL: composite}
    api = objects.NAMESPACED_OBJECT_API if fed.namespaced else objects.OBJECT_API
    return Requirement(runs.REPORT_REQUIREMENT, api, "Object", match_labels=labels,
                       namespace=fed.namespace if fed.namespaced else None)  # fmt: skip


# Crossplane labels each composed resource with its composite's name.
COMPOSITE_LABEL = "crossplane.io/composite"


def _succeeded(phase: str, reason: str | None) -> Condition:
    """The run's own condition: True once Flower completed it, False once it failed or stopped."""
    if phase == "Completed":
        return Condition("Succeeded", "True", "Completed", "Flower completed the run")
    if phase in ("Failed", "Stopped"):
        return Condition("Succeeded", "False", phase, reason or f"the run {phase.lower()}")
    return Condition("Succeeded", "Unknown", phase, reason or f"the run is {phase.lower()}")


def _policy_requirement(given: policy.Policy) -> list[Requirement]:
    """The EnvironmentConfig the input names, asked on every call (Crossplane answers only the last asks)."""
    if not given.environmentConfig:
        return []
    return [Requirement(policy.REQUIREMENT, policy.ENVIRONMENT_CONFIG_API, policy.ENVIRONMENT_CONFIG_KIND,
                        match_name=given.environmentConfig)]  # fmt: skip


def policy_given(doc: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A policy document as Crossplane would give it: (the step's input, the required resources it brings).

    A Policy is the input itself; an EnvironmentConfig is what the packages' Compositions read (their input
    names it, Crossplane answers with it), so a platform team's file is judged the way the cluster judges it.
    """
    if doc.get("kind") != policy.ENVIRONMENT_CONFIG_KIND:
        return doc, []
    named = policy.PLATFORM_ENVIRONMENT_CONFIG  # as the packages' Compositions name it
    return {"apiVersion": policy.API_VERSION, "kind": policy.KIND, "environmentConfig": named}, [doc]


def too_large(kind: str, resources: int, size: int) -> str:
    """The refusal of an outcome whose response Crossplane could not read (it would fail naming nothing)."""
    return refusals.too_large(kind, resources, size)


def too_deep(path: list[Any], depth: int) -> str:
    """The refusal of a request nested deeper than protobuf decodes, naming where (see serving/fn.undecodable)."""
    return refusals.too_deep(path, depth)
