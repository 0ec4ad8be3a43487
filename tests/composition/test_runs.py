"""FederationRuns (function/composition/runs.py, function/builders/runner.py), through outcome.decide.

A Federation's call lists its runs beside the SuperLink for the runner, with
the bundles Flower has not taken; a run's call reads its entry of the
runner's report back, by uid, and says why it waits when it has none.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
from typing import Any

import pytest

from function.api import names
from function.api.run_spec import MAX_FAB_BYTES, ONE_SOURCE
from function.builders import bundler, identity, pods, runner
from function.composition import admission, outcome, pod_security, runs
from function.federation import read
from function.federation import runs as read_runs
from function.serving import render, wire
from support.helpers import BASE, spec, xr

RELEASE = "1.42.0"
CURRENT = spec(BASE, superlink__image=f"flwr/superlink:{RELEASE}", supernodes__image=f"flwr/supernode:{RELEASE}")
BUNDLE = b"PK\x03\x04 a Flower App Bundle"


def run_xr(name: str = "mnist", federation: str = "fed", namespace: str = "team-a", **fields: Any) -> dict[str, Any]:
    """A claim's composite FederationRun, as Crossplane passes it."""
    given: dict[str, Any] = {"federation": federation, "app": {"configMap": {"name": f"{name}-app"}}, **fields}
    return {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "XFederationRun",
        "metadata": {
            "name": f"{name}-q8w4z",
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-12-02T05:00:0{len(name) % 10}Z",
            "labels": {read.CLAIM_NAME: name, read.CLAIM_NAMESPACE: namespace},
            "generation": 1,
        },
        "spec": {**given, "claimRef": {"name": name, "namespace": namespace}},
    }


def bundle_configmap(name: str, content: bytes = BUNDLE, key: str = "app.fab") -> dict[str, Any]:
    data = {"binaryData": {key: base64.b64encode(content).decode()}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}, **data}


def report_object(**entries: dict[str, Any]) -> dict[str, Any]:
    """The report's Object as observed: the runner's text in its live manifest."""
    text = json.dumps(entries)
    return {"status": {"atProvider": {"manifest": {"data": {runner.REPORT_FIELD: text}}}}}


def entry(uid: str = "uid-mnist", phase: str = "Running", **fields: Any) -> dict[str, Any]:
    return {"uid": uid, "phase": phase, "runId": "4242", "flowerStatus": "running", **fields}


def manifest(out: outcome.Outcome, name: str) -> dict[str, Any]:
    return out.desired[name]["spec"]["forProvider"]["manifest"]


def wanted(out: outcome.Outcome) -> dict[str, Any]:
    return json.loads(manifest(out, runs.WANTED)["data"][runner.WANTED_FILE])


@dataclasses.dataclass(frozen=True)
class Listed:
    reason: str
    runs: list[dict[str, Any]]
    listed: list[str]
    bundles: list[str]
    report: dict[str, Any] | None = None
    required: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)


LISTED = [
    Listed("no runs: an empty list, so the runner stops nothing it did not start", [], [], []),
    Listed("a new run is listed with its bundle", [run_xr()], ["mnist"], ["mnist"],
           required={"run-bundle-mnist": [bundle_configmap("mnist-app")]}),
    Listed("runs of another Federation or namespace are not this one's",
           [run_xr("a", federation="other"), run_xr("b", namespace="team-b"), run_xr("c")], ["c"], []),
    Listed("a run Flower took carries its bundle no more", [run_xr()], ["mnist"], [],
           report={"superlink-run-status": report_object(mnist=entry())},
           required={"run-bundle-mnist": [bundle_configmap("mnist-app")]}),
    Listed("a report of an older run of the same name does not stand for this one", [run_xr()], ["mnist"], ["mnist"],
           report={"superlink-run-status": report_object(mnist=entry(uid="uid-old"))},
           required={"run-bundle-mnist": [bundle_configmap("mnist-app")]}),
    Listed("a bundle over the bound is not carried", [run_xr()], ["mnist"], [],
           required={"run-bundle-mnist": [bundle_configmap("mnist-app", b"x" * (MAX_FAB_BYTES + 1))]}),
    Listed("bundles together over what the runs' ConfigMap may hold: the older first, the newer waits",
           [run_xr("aa"), run_xr("bb")], ["aa", "bb"], ["aa"],
           required={"run-bundle-aa": [bundle_configmap("aa-app", BUNDLE + b"x" * 450_000)],
                     "run-bundle-bb": [bundle_configmap("bb-app", BUNDLE + b"x" * 450_000)]}),
    Listed("a bundle kept as text is not carried", [run_xr()], ["mnist"], [],
           required={"run-bundle-mnist": [{"apiVersion": "v1", "kind": "ConfigMap", "data": {"app.fab": "PK"}}]}),
    Listed("a run whose own call refuses it is not listed", [run_xr(runConfig={"lr": [1]}), run_xr("ok")], ["ok"], []),
]  # fmt: skip


@pytest.mark.parametrize("case", LISTED, ids=lambda c: c.reason)
def test_a_federation_lists_its_runs_and_the_bundles_flower_has_not_taken(case: Listed):
    out = outcome.decide(xr(CURRENT), case.report or {}, {runs.RUNS_REQUIREMENT: case.runs, **case.required}, None)
    assert out.refusal is None, out.refusal
    listed = wanted(out)["runs"]
    assert [r["name"] for r in listed] == case.listed, case.reason
    binary = manifest(out, runs.WANTED).get("binaryData", {})
    # A key for every listed run, empty but for the bundles that travel: emptied, not dropped, once taken.
    assert sorted(binary) == [runner.bundle_key(n) for n in sorted(case.listed)], case.reason
    assert sorted(k for k, v in binary.items() if v) == [runner.bundle_key(n) for n in case.bundles], case.reason
    assert [r["name"] for r in listed if r["app"]] == case.bundles, case.reason
    for name in case.bundles:
        assert base64.b64decode(binary[runner.bundle_key(name)]).startswith(BUNDLE)


def test_the_runner_is_told_each_runs_config_and_deadline_and_asked_for_bundles_only_until_taken():
    given = [run_xr(runConfig={"num-server-rounds": "3", "lr": 0.1}, deadlineSeconds=600), run_xr("taken")]
    report = {"superlink-run-status": report_object(taken=entry("uid-taken"))}
    out = outcome.decide(xr(CURRENT), report, {runs.RUNS_REQUIREMENT: given}, None)
    listed = {r["name"]: r for r in wanted(out)["runs"]}
    assert listed["mnist"]["runConfig"] == {"lr": 0.1, "num-server-rounds": 3}, "typed as Flower reads it"
    assert listed["mnist"]["deadlineSeconds"] == 600
    asked = {r.key: r for r in out.requirements}
    assert asked[runs.RUNS_REQUIREMENT].kind == "XFederationRun"
    assert asked[runs.RUNS_REQUIREMENT].match_labels == {read.CLAIM_NAMESPACE: "team-a"}
    assert asked["run-bundle-mnist"].match_name == "mnist-app"
    assert asked["run-bundle-mnist"].namespace == "team-a"
    assert "run-bundle-taken" not in asked
    assert out.status is not None
    assert out.status["runs"] == {"inProgress": 2, "total": 2, "latest": "taken (Running)"}


def test_only_the_superlinks_own_account_may_write_the_report_and_nothing_else():
    out = outcome.decide(xr(CURRENT), {}, {runs.RUNS_REQUIREMENT: []}, None)
    role, binding = manifest(out, runs.ROLE), manifest(out, runs.BINDING)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "patch"],
            "resourceNames": [runner.status_name("fed")],
        }
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # The SuperLink's account, not the Federation's that SuperNode pods run as.
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pods.superlink_service_account("fed"), "namespace": "team-a"}
    ]
    report = out.desired[runs.STATUS]
    assert report["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"], "the runner writes it, not us"
    assert report["metadata"]["labels"] == {runs.REPORT_LABEL: runs.report_label(read.federation(xr(CURRENT)))}


def test_the_runner_sidecar_reaches_only_the_loopback_and_mounts_what_it_uses():
    out = outcome.decide(xr(CURRENT), {}, {runs.RUNS_REQUIREMENT: []}, None)
    pod = manifest(out, "superlink")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == runner.CONTAINER)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == f"flwr/superlink:{RELEASE}"
    assert "--address=127.0.0.1:9093" in sidecar["args"]
    assert not sidecar.get("ports"), "no listener of its own"
    mounted = {m["name"] for m in sidecar["volumeMounts"]}
    assert mounted == {runner.WANTED_VOLUME, runner.WORK_VOLUME, "identity-kube-api", "identity-program"}
    others = [c for c in [*pod["containers"], *pod["initContainers"]] if c["name"] != runner.CONTAINER]
    assert not any(m["name"] == runner.WANTED_VOLUME for c in others for m in c.get("volumeMounts", []))


@pytest.mark.parametrize(
    ("reason", "federation"),
    [
        ("Flower 1.25 reads connections from the app's own pyproject.toml: no runner",
         spec(BASE, superlink__image="flwr/superlink:1.25.0")),
        ("an XFederation of no claim is bound to no namespace, whose tenants could run on it", None),
    ],
)  # fmt: skip
def test_a_federation_that_cannot_take_runs_has_no_runner_and_asks_for_none(reason: str, federation: Any):
    given = xr(federation) if federation is not None else {**xr(CURRENT), "metadata": {"name": "fed"}}
    if federation is None:
        given["spec"] = {**CURRENT, "namespace": "team-a"}
    out = outcome.decide(given, {}, {runs.RUNS_REQUIREMENT: [run_xr()]}, None)
    assert out.refusal is None, out.refusal
    assert runs.WANTED not in out.desired, reason
    assert runs.RUNS_REQUIREMENT not in {r.key for r in out.requirements}, reason
    pod = manifest(out, "superlink")["spec"]["template"]["spec"]
    assert runner.CONTAINER not in {c["name"] for c in pod.get("initContainers", [])}, reason


@dataclasses.dataclass(frozen=True)
class Status:
    reason: str
    required: dict[str, list[dict[str, Any]]]
    phase: str
    said: str | None = None
    ready: bool = False
    succeeded: str = "Unknown"


FED = xr(CURRENT)
REPORTED = [report_object(mnist=entry())]
STATUSES = [
    Status("nothing answered yet", {}, "Pending", "looking for Federation 'fed'"),
    Status("no such Federation in the run's namespace", {runs.FEDERATION_REQUIREMENT: []}, "Pending",
           "no Federation 'fed' in namespace 'team-a'"),
    Status("the bundle's ConfigMap is missing", {runs.FEDERATION_REQUIREMENT: [FED], outcome.RUN_BUNDLE: []},
           "Pending", "ConfigMap team-a/mnist-app not found"),
    Status("the bundle is text", {runs.FEDERATION_REQUIREMENT: [FED], outcome.RUN_BUNDLE: [
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"app.fab": "x"}}]}, "Pending", "as text"),
    Status("the bundle is too large", {runs.FEDERATION_REQUIREMENT: [FED], outcome.RUN_BUNDLE: [
        bundle_configmap("mnist-app", b"x" * (MAX_FAB_BYTES + 1))]}, "Pending", "at most"),
    Status("all there, the runner has not reported it", {runs.FEDERATION_REQUIREMENT: [FED],
           outcome.RUN_BUNDLE: [bundle_configmap("mnist-app")]}, "Pending", "runner to take the run"),
    Status("running", {runs.FEDERATION_REQUIREMENT: [FED], runs.REPORT_REQUIREMENT: REPORTED}, "Running",
           ready=True),
    Status("completed, from Flower's record", {runs.FEDERATION_REQUIREMENT: [FED], runs.REPORT_REQUIREMENT: [
        report_object(mnist=entry(phase="Completed", flowerStatus="finished:completed"))]}, "Completed",
           ready=True, succeeded="True"),
    Status("failed, with the runner's words", {runs.FEDERATION_REQUIREMENT: [FED], runs.REPORT_REQUIREMENT: [
        report_object(mnist=entry(phase="Failed", reason="the ServerApp exited: boom"))]}, "Failed",
           "the ServerApp exited: boom", succeeded="False"),
    Status("a report of another run of the same name", {runs.FEDERATION_REQUIREMENT: [FED],
           runs.REPORT_REQUIREMENT: [report_object(mnist=entry(uid="uid-old", phase="Completed"))]}, "Pending"),
    Status("refused by Flower before it had an ID: the runner writes the ID empty", {
        runs.FEDERATION_REQUIREMENT: [FED], runs.REPORT_REQUIREMENT: [report_object(mnist=entry(
            phase="Failed", runId="", reason="the app was refused: not a Flower App Bundle"))]}, "Failed",
           "the app was refused", succeeded="False"),
    Status("an entry not well formed is no entry", {runs.FEDERATION_REQUIREMENT: [FED],
           runs.REPORT_REQUIREMENT: [report_object(mnist=entry(phase="Done"))]}, "Pending"),
]  # fmt: skip


@pytest.mark.parametrize("case", STATUSES, ids=lambda c: c.reason)
def test_a_runs_status_is_its_entry_in_the_runners_report(case: Status):
    out = outcome.decide(run_xr(), {}, case.required, None)
    assert out.refusal is None, out.refusal
    assert out.status is not None
    assert out.status["phase"] == case.phase, case.reason
    if case.said is not None:
        assert case.said in out.status.get("reason", ""), out.status
    assert out.composite_ready is case.ready, case.reason
    assert [(c.typ, c.status) for c in out.conditions] == [("Succeeded", case.succeeded)], case.reason
    if case.phase == "Running":
        assert out.status["runId"] == "4242"
        assert out.ttl == outcome.RUN_TTL


def test_a_run_asks_for_its_federation_in_its_own_namespace_only_then_for_that_federations_report():
    first = outcome.decide(run_xr(), {}, {}, None)
    (federation,) = [r for r in first.requirements if r.key == runs.FEDERATION_REQUIREMENT]
    assert (federation.kind, federation.match_labels) == (
        "XFederation",
        {read.CLAIM_NAME: "fed", read.CLAIM_NAMESPACE: "team-a"},
    )
    then = outcome.decide(run_xr(), {}, {runs.FEDERATION_REQUIREMENT: [FED]}, None)
    (report,) = [r for r in then.requirements if r.key == runs.REPORT_REQUIREMENT]
    assert report.match_labels == {
        runs.REPORT_LABEL: runs.report_label(read.federation(FED)),
        outcome.COMPOSITE_LABEL: FED["metadata"]["name"],
    }
    namespaced = {**run_xr(), "kind": "FederationRun", "metadata": {"name": "mnist", "namespace": "team-b", "uid": "u"}}
    (federation,) = [r for r in outcome.decide(namespaced, {}, {}, None).requirements if r.key == "run-federation"]
    assert (federation.kind, federation.match_name, federation.namespace) == ("Federation", "fed", "team-b")


@pytest.mark.parametrize(
    ("reason", "given", "field"),
    [
        ("a Federation whose Flower cannot start runs from its runner",
         {runs.FEDERATION_REQUIREMENT: [xr(spec(BASE))]}, "spec.federation: Federation 'fed' runs Flower 1.25.0"),
        ("an XFederationRun of no claim belongs to no namespace", {"unclaimed": []}, "metadata: an XFederationRun"),
        ("a run config value of no scalar type", {"config": []}, "spec.runConfig.lr"),
        ("a run config value Flower's parser would not read back", {"quotes": []}, "spec.runConfig.lr: value"),
    ],
)  # fmt: skip
def test_a_run_that_cannot_be_is_refused_naming_the_field(reason: str, given: dict[str, Any], field: str):
    given_run = run_xr(runConfig={"lr": {"a": 1}}) if "config" in given else run_xr()
    if "quotes" in given:
        given_run = run_xr(runConfig={"lr": "both ' and \""})
    if "unclaimed" in given:
        given_run["metadata"] = {"name": "mnist", "uid": "u"}
    required = {k: v for k, v in given.items() if k not in ("config", "unclaimed", "quotes")}
    out = outcome.decide(given_run, {}, required, None)
    assert out.refusal is not None, reason
    assert field in out.refusal, out.refusal
    assert not out.desired


def test_a_namespaced_federation_lists_its_namespaces_runs_as_crossplane_answers_an_empty_selector():
    """A v2 Federation asks for its namespace's FederationRuns by no label at all: on the wire a selector
    naming neither name nor labels, which Crossplane 2 answers with every one of the kind in the namespace.
    The local render answers it alike, and the Federation keeps only the runs that name it."""
    federation = {"apiVersion": "flower.crossplane.io/v1alpha1", "kind": "Federation",
                  "metadata": {"name": "fed", "namespace": "team-a"}, "spec": CURRENT}  # fmt: skip

    def namespaced_run(name: str, namespace: str = "team-a", federation: str = "fed") -> dict[str, Any]:
        given = run_xr(name, federation)
        return {**given, "kind": "FederationRun", "metadata": {**given["metadata"], "name": name,
                                                                "namespace": namespace, "labels": {}}}  # fmt: skip

    given = [namespaced_run("mnist"), namespaced_run("other", federation="another"), namespaced_run("away", "team-b"),
             bundle_configmap("mnist-app")]  # fmt: skip
    _, rsp = render.satisfied(federation, [], given)
    selector = rsp.requirements.resources[runs.RUNS_REQUIREMENT]
    assert (selector.kind, selector.namespace, selector.WhichOneof("match")) == ("FederationRun", "team-a", None)
    desired = wire.to_dict(rsp.desired.resources[runs.WANTED].resource)
    listed = json.loads(desired["spec"]["forProvider"]["manifest"]["data"][runner.WANTED_FILE])["runs"]
    assert [r["name"] for r in listed] == ["mnist"]


# Runs whose app is an image (function/builders/bundler.py): the platform's policy decides which images a
# run may use (runImages, none by default); a Federation bundles each admitted one in a Job beside the
# SuperLink whose account may write that run's ConfigMap alone, and tells the runner where to read the
# bundle; once Flower has the run, all of it goes.

IMAGE = "registry.example.com/ml/serverapp:1.0"
ALLOWED = {"runImages": ["registry.example.com/ml/"]}


def image_run(name: str = "mnist", reference: str = IMAGE, **app: Any) -> dict[str, Any]:
    """A run whose app is an image."""
    given = run_xr(name)
    given["spec"]["app"] = {"image": {"reference": reference, **app}}
    return given


def job_name(given: dict[str, Any]) -> str:
    return bundler.name("fed", read_run(given))


def read_run(given: dict[str, Any]) -> read_runs.Run:
    return read_runs.run(given)


def federation(given_runs: list[dict[str, Any]], policy: dict[str, Any] | None = ALLOWED, **observed: Any):
    out = outcome.decide(FED, observed, {runs.RUNS_REQUIREMENT: given_runs}, policy)
    assert out.refusal is None, out.refusal
    return out


@pytest.mark.parametrize(
    ("reason", "policy", "verdict"),
    [
        ("the default policy admits no image: an image runs with a token beside the SuperLink", None, "refused"),
        ("a prefix of another registry", {"runImages": ["ghcr.io/team/"]}, "refused"),
        ("the platform's registry", ALLOWED, "admitted"),
    ],
)
def test_the_platforms_policy_decides_which_images_a_run_may_use(reason: str, policy: Any, verdict: str):
    out = outcome.decide(image_run(), {}, {runs.FEDERATION_REQUIREMENT: [FED]}, policy)
    if verdict == "refused":
        assert out.refusal is not None, reason
        assert "spec.app.image.reference" in out.refusal and "runImages" in out.refusal, out.refusal
        # Where a platform team would admit it, and how: the repository, every tag of it.
        assert admission.ALLOWED_BY in out.refusal and "runImages: [registry.example.com/ml/serverapp]" in out.refusal
        assert not out.desired
        return
    assert out.refusal is None, (reason, out.refusal)
    assert out.status is not None
    assert out.status["phase"] == "Pending"
    assert out.status["reason"] == f"waiting for Job team-a/{job_name(image_run())} to bundle the app of {IMAGE}"
    assert outcome.RUN_BUNDLE not in {r.key for r in out.requirements}, "an image run has no ConfigMap to read"


@pytest.mark.parametrize(
    ("reason", "app"),
    [
        ("both sources", {"configMap": {"name": "x"}, "image": {"reference": IMAGE}}),
        ("neither", {}),
    ],
)
def test_a_run_names_exactly_one_source_of_its_app(reason: str, app: dict[str, Any]):
    given = run_xr()
    given["spec"]["app"] = app
    out = outcome.decide(given, {}, {}, ALLOWED)
    assert out.refusal is not None, reason
    assert f"spec.app: {ONE_SOURCE}" in out.refusal, out.refusal
    assert not out.desired


@pytest.mark.parametrize(
    ("reason", "image", "field"),
    [
        ("a path in the image must be absolute", {"reference": IMAGE, "path": "app"}, "spec.app.image.path"),
        ("an image reference with a space cannot be pulled", {"reference": "a b:1"}, "spec.app.image.reference"),
        ("no reference at all", {"path": "/app"}, "spec.app.image.reference"),
        ("a field the API does not have", {"reference": IMAGE, "tag": "1"}, "spec.app.image.tag"),
    ],
)
def test_a_bad_image_source_is_refused_naming_its_field(reason: str, image: dict[str, Any], field: str):
    given = run_xr()
    given["spec"]["app"] = {"image": image}
    out = outcome.decide(given, {}, {runs.FEDERATION_REQUIREMENT: [FED]}, ALLOWED)
    assert out.refusal is not None and field in out.refusal, (reason, out.refusal)
    assert not out.desired


def test_a_federation_bundles_an_admitted_image_in_a_job_whose_account_writes_that_runs_configmap_alone():
    given = [image_run(), run_xr("plain")]
    out = federation(given)
    target = job_name(given[0])
    job = manifest(out, f"{runs.BUNDLER_PREFIX}{target}")
    bundle = out.desired[f"{runs.APP_BUNDLE_PREFIX}{target}"]
    assert bundle["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"], "the Job writes it, not us"
    assert bundle["spec"]["forProvider"]["manifest"]["metadata"]["name"] == target
    assert job["metadata"]["name"] == target
    assert job["metadata"]["labels"][bundler.RUN_LABEL] == "mnist"
    # Its account: get and patch of its ConfigMaps by name, bound to it alone.
    role, binding = manifest(out, runs.BUNDLER_ROLE), manifest(out, runs.BUNDLER_BINDING)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
                              "resourceNames": [target]}]  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": bundler.account("fed"), "namespace": "team-a"}]
    assert manifest(out, runs.BUNDLER_ACCOUNT)["automountServiceAccountToken"] is False
    # The runner reads that bundle, and only that one beside its report.
    assert manifest(out, runs.ROLE)["rules"][1] == {"apiGroups": [""], "resources": ["configmaps"],
                                                    "verbs": ["get"], "resourceNames": [target]}  # fmt: skip
    listed = {r["name"]: r for r in wanted(out)["runs"]}
    assert listed["mnist"]["appConfigMap"] == target and listed["mnist"]["app"] is None
    assert "appConfigMap" not in listed["plain"]
    asked = {r.key for r in out.requirements}
    assert runs.bundle_requirement(read_run(given[1])) in asked
    assert runs.bundle_requirement(read_run(given[0])) not in asked, "an image run has no tenant ConfigMap"


def test_the_bundler_runs_the_image_restricted_with_its_own_token_and_nothing_else():
    out = federation([image_run(path="/opt/app")])
    job = manifest(out, f"{runs.BUNDLER_PREFIX}{job_name(image_run())}")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == bundler.BACKOFF_LIMIT
    assert job["spec"]["activeDeadlineSeconds"] == bundler.DEADLINE_SECONDS
    assert pod["serviceAccountName"] == bundler.account("fed") != pods.superlink_service_account("fed")
    assert pod["automountServiceAccountToken"] is False
    assert not pod_security.failing(pod, "restricted")
    (container,) = pod["containers"]
    assert "initContainers" not in pod
    assert container["image"] == IMAGE
    assert container["command"] == ["python", f"{identity.PROGRAM_DIR}/{identity.PROGRAM_FILE}"]
    assert container["args"][:2] == ["bundle", "--app=/opt/app"]
    assert f"--configmap={job['metadata']['name']}" in container["args"]
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert mounted == {identity.KUBE_VOLUME, identity.PROGRAM_VOLUME, "scratch-app-bundler"}, mounted
    assert {v["name"] for v in pod["volumes"]} == mounted


def test_the_bundlers_pod_passes_the_api_servers_restricted_pod_security(psscheck):
    job = manifest(federation([image_run()]), f"{runs.BUNDLER_PREFIX}{job_name(image_run())}")
    proc = subprocess.run([psscheck, "-level", "restricted"], input=json.dumps([job]), capture_output=True,
                          text=True, check=True)  # fmt: skip
    (verdict,) = json.loads(proc.stdout)
    assert (verdict["kind"], verdict["allowed"], verdict["forbidden"]) == ("Job", True, []), verdict


def test_the_bundler_pulls_with_the_federations_pull_secrets():
    with_secrets = xr(spec(CURRENT, imagePullSecrets=[{"name": "registry"}]))
    out = outcome.decide(with_secrets, {}, {runs.RUNS_REQUIREMENT: [image_run()]}, ALLOWED)
    pod = manifest(out, f"{runs.BUNDLER_PREFIX}{job_name(image_run())}")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


@pytest.mark.parametrize(
    ("reason", "policy", "report"),
    [
        ("refused by the policy: listed for the runner (which says it waits), bundled by nothing", None, None),
        ("Flower has the run: its bundle need not be made or read any more", ALLOWED,
         report_object(mnist=entry())),
    ],
)  # fmt: skip
def test_no_bundler_and_no_right_to_a_bundle_without_an_image_to_bundle(reason: str, policy: Any, report: Any):
    observed = {"superlink-run-status": report} if report else {}
    out = federation([image_run()], policy, **observed)
    assert not [n for n in out.desired if n.startswith(("app-bundle", runs.BUNDLER_PREFIX))], reason
    assert len(manifest(out, runs.ROLE)["rules"]) == 1, reason
    assert "appConfigMap" not in wanted(out)["runs"][0], reason


def test_a_run_applied_again_gets_a_new_job_and_configmap():
    first, again = image_run(), image_run()
    again["metadata"]["uid"] = "uid-mnist-2"
    assert job_name(first) != job_name(again)
    # The Object's resource name too: else the Object would be rewritten to a new Job, leaving the old one.
    composed = [sorted(federation([given]).desired) for given in (first, again)]
    assert composed[0] != composed[1]


def test_a_federation_name_as_long_as_allowed_leaves_room_for_the_bundlers_name():
    """A Job's name becomes a label value of its pods (job-name): 63 characters at most."""
    longest = "f" * (names.MAX_STATEFULSET_NAME - len("-superlink"))
    given = image_run()
    given["spec"]["federation"] = longest
    assert len(bundler.name(longest, read_run(given))) <= names.MAX_NAME


def test_the_runners_role_has_no_second_rule_without_bundles():
    """An empty resourceNames would give the SuperLink's account every ConfigMap of the namespace."""
    role = runner.role("fed", "team-a", {}, [])
    assert len(role["rules"]) == 1
    with pytest.raises(ValueError, match="every ConfigMap"):
        bundler.role(read.federation(FED), [])


def test_a_cluster_without_runs_composes_no_bundler():
    out = outcome.decide(xr(spec(BASE, superlink__image="flwr/superlink:1.25.0")), {},
                         {runs.RUNS_REQUIREMENT: [image_run()]}, ALLOWED)  # fmt: skip
    assert not [n for n in out.desired if "bundle" in n]
