"""The cross-field rules: each rule's CEL (what admission runs) and check (what the function runs) agree.

Every rule has cases that break it and cases that keep it, each with its
reason. Each case goes through the function (refusals.parse: the paths and
messages users see) and through cel-go, as the API server would evaluate the
XRD's rules on it after defaulting; then every rule's two halves must give the
same verdict on every case.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
from typing import Any

import pydantic
import pytest

from function.api import rules
from function.api.refusals import SpecError, parse
from function.api.spec import FederationSpec
from support.api_schema import SPEC_SCHEMA, apply_defaults
from support.helpers import BASE, PROCESS, pool, spec

DS = spec(BASE, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])
TEMPLATE = {"metadata": {"name": "data"}, "spec": {}}
BY_NAME = {rule.name: rule for rule in rules.RULES}
# No image anywhere: the release names them all.
VERSIONED = {
    "mode": "StatefulSet",
    "isolationMode": "subprocess",
    "version": "1.41.0",
    "supernodes": {"pools": [{"name": "a", "replicas": 1}]},
}


@dataclasses.dataclass(frozen=True)
class Case:
    rule: str
    spec: dict[str, Any]
    # Where the function reports the broken rule; None: the case keeps the rule (and every other).
    path: str | None
    reason: str


def breaks(rule: str, s: dict[str, Any], path: str, reason: str) -> Case:
    return Case(rule, s, path, reason)


def keeps(rule: str, s: dict[str, Any], reason: str) -> Case:
    return Case(rule, s, None, reason)


CASES = [
    breaks(
        "traffic-policy-needs-external-service",
        spec(BASE, superlink__service={"externalTrafficPolicy": "Local"}),
        "spec.superlink.service.externalTrafficPolicy",
        "a ClusterIP Service takes no external traffic",
    ),
    keeps(
        "traffic-policy-needs-external-service",
        spec(BASE, superlink__service={"type": "NodePort", "externalTrafficPolicy": "Cluster"}),
        "a NodePort Service does",
    ),
    breaks(
        "source-ranges-need-load-balancer",
        spec(BASE, superlink__service={"type": "NodePort", "loadBalancerSourceRanges": ["192.0.2.0/24"]}),
        "spec.superlink.service.loadBalancerSourceRanges",
        "no load balancer to filter with them",
    ),
    keeps(
        "source-ranges-need-load-balancer",
        spec(BASE, superlink__service={"type": "LoadBalancer", "loadBalancerSourceRanges": []}),
        "[] on a LoadBalancer: every address, said out loud",
    ),
    breaks("pools-not-empty", spec(BASE, supernodes__pools=[]), "spec.supernodes.pools", "a federation needs a pool"),
    keeps("pools-not-empty", BASE, "one pool"),
    breaks("daemonset-no-replicas", pool(DS, replicas=2), "spec.supernodes.pools[0].replicas", "a node runs one"),
    keeps("daemonset-no-replicas", DS, "a DaemonSet's size is its nodes'"),
    breaks(
        "statefulset-replicas",
        spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "b"}]),
        "spec.supernodes.pools[1].replicas",
        "the second pool has no size",
    ),
    keeps("statefulset-replicas", BASE, "every pool sized"),
    breaks(
        "superlink-image-or-version", spec(BASE, superlink={}), "spec.superlink.image", "which image, which release?"
    ),
    keeps("superlink-image-or-version", VERSIONED, "spec.version names flwr/superlink:1.41.0"),
    # spec.version at admission as the function reads it (Release.parse, then supported).
    *[
        breaks("supported-version", spec(VERSIONED, version=version), "spec.version", reason)
        for version, reason in [
            ("9.9.9", "no Flower 9: refused, where 1.43 is not (the range the message gives)"),
            ("2.0.0", "another major version: its command lines are unknown"),
            ("0.24.0", "major 0, though minor 24"),
            ("1.23.9", "before the oldest release supported, 1.24"),
            ("1.2", "1.2, not 1.20 nor 1.24"),
            ("latest", "a tag that names no release"),
            ("1.41.0.1", "four numbers"),
            ("1.41.0\n", "a trailing newline (a block scalar's): both read to the end of the text"),
            ("\u0661.\u0664\u0661.\u0660", "Arabic-Indic digits: a release is written in ASCII"),
        ]
    ],
    *[
        keeps("supported-version", spec(VERSIONED, version=version), reason)
        for version, reason in [
            ("1.24.0", "the oldest release supported"),
            ("1.43.0", "newer than the newest tested: accepted, with a warning when composed"),
            ("1.100.0", "a minor of three digits"),
            ("1.41", "no patch: the function reads it as 1.41.0"),
            ("v1.41.0", "a v before it, as some tags have"),
            ("1.41.0-py3.11-ubuntu24.04", "a variant of the image, after the release"),
            ("01.024.0", "leading zeros, read as numbers"),
        ]
    ],
    breaks(
        "supernode-image-or-version",
        spec(BASE, supernodes__image=None),
        "spec.supernodes.image",
        "the pool names no image either",
    ),
    keeps(
        "supernode-image-or-version",
        pool(spec(BASE, supernodes={"pools": [{"name": "a", "replicas": 1}]}), images={"supernode": "n:1.25.0"}),
        "every pool names its own image",
    ),
    keeps("supernode-image-or-version", VERSIONED, "spec.version names flwr/supernode:1.41.0"),
    keeps("process-superlink-superexec", spec(VERSIONED, isolationMode="process"), "flwr/superexec:1.41.0 twice"),
    breaks(
        "process-superlink-superexec",
        spec(PROCESS, superlink__superexecImage=None),
        "spec.superlink.superexecImage",
        "the ServerApp sidecar has no image",
    ),
    breaks(
        "process-superlink-superexec",
        spec(PROCESS, superlink__superexecImage=""),
        "spec.superlink.superexecImage",
        "an empty image is no image",
    ),
    keeps("process-superlink-superexec", PROCESS, "both sidecars have images"),
    breaks(
        "process-pool-superexec",
        pool(PROCESS, images={}),
        "spec.supernodes.pools[0].images.superexecClientApp",
        "the ClientApp sidecar has no image",
    ),
    keeps("process-pool-superexec", PROCESS, "both sidecars have images"),
    breaks(
        "subprocess-superlink-superexec",
        spec(BASE, superlink__superexecImage="x:1"),
        "spec.superlink.superexecImage",
        "no sidecar runs in subprocess mode",
    ),
    keeps("subprocess-superlink-superexec", spec(BASE, superlink__superexecImage=""), "empty is unset"),
    breaks(
        "subprocess-pool-superexec",
        pool(BASE, images={"superexecClientApp": "x:1"}),
        "spec.supernodes.pools[0].images.superexecClientApp",
        "no sidecar runs in subprocess mode",
    ),
    keeps("subprocess-pool-superexec", pool(BASE, images={"supernode": "n:1"}), "a pool's own SuperNode image"),
    breaks(
        "gpu-mount-all-vendor",
        pool(DS, gpu={"enabled": True, "mountAll": True}),
        "spec.supernodes.pools[0].gpu.vendor",
        "every GPU of which vendor?",
    ),
    keeps("gpu-mount-all-vendor", pool(DS, gpu={"enabled": True, "mountAll": True, "vendor": "amd"}), "vendor named"),
    keeps("gpu-mount-all-vendor", pool(DS, gpu={"enabled": True}), "mountAll defaults to false"),
    breaks(
        "unique-pool-names",
        spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "a", "replicas": 1}]),
        "spec.supernodes.pools[1].name",
        "names make workload names",
    ),
    keeps(
        "unique-pool-names",
        spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "b", "replicas": 1}]),
        "two names",
    ),
    breaks(
        "daemonset-pool-placeholders",
        pool(DS, nodeConfig={"partition-id": "{index}"}),
        "spec.supernodes.pools[0].nodeConfig.partition-id",
        "DaemonSet pods have no index",
    ),
    breaks(
        "daemonset-pool-placeholders",
        pool(DS, nodeConfig={"n": "of-{replicas}"}),
        "spec.supernodes.pools[0].nodeConfig.n",
        "nor a count, even inside other text",
    ),
    keeps("daemonset-pool-placeholders", pool(DS, nodeConfig={"host": "{node}", "p": "{pool}"}), "node, pool known"),
    keeps(
        "daemonset-pool-placeholders",
        pool(BASE, nodeConfig={"partition-id": "{index}", "n": "{replicas}"}),
        "StatefulSet pods have both",
    ),
    breaks(
        "daemonset-federation-placeholders",
        pool(DS, nodeConfig={"id": "{globalIndex}"}),
        "spec.supernodes.pools[0].nodeConfig.id",
        "DaemonSet pods have no place in the federation",
    ),
    breaks(
        "daemonset-federation-placeholders",
        pool(DS, nodeConfig={"n": "{totalReplicas}"}),
        "spec.supernodes.pools[0].nodeConfig.n",
        "nor a federation-wide count",
    ),
    keeps(
        "daemonset-federation-placeholders",
        pool(BASE, nodeConfig={"id": "{globalIndex}", "n": "{totalReplicas}"}),
        "StatefulSet pods have both",
    ),
    breaks(
        "index-or-global-index",
        pool(BASE, nodeConfig={"local-id": "{index}", "partition-id": "{globalIndex}"}),
        "spec.supernodes.pools[0].nodeConfig",
        "with {globalIndex} ordinals start at the offset: {index} is lost",
    ),
    keeps(
        "index-or-global-index",
        spec(
            BASE,
            supernodes__pools=[
                {"name": "a", "replicas": 1, "nodeConfig": {"id": "{index}"}},
                {"name": "b", "replicas": 1, "nodeConfig": {"id": "{globalIndex}"}},
            ],
        ),
        "one of each per pool",
    ),
    breaks("tls-one-source", spec(BASE, tls={}), "spec.tls", "no certificate source"),
    breaks(
        "tls-one-source",
        spec(BASE, tls={"secretName": "s", "certManager": {"issuerRef": {"name": "ca"}}}),
        "spec.tls",
        "two certificate sources",
    ),
    keeps("tls-one-source", spec(BASE, tls={"secretName": "s"}), "a Secret"),
    keeps("tls-one-source", spec(BASE, tls={"certManager": {"issuerRef": {"name": "ca"}}}), "cert-manager"),
    breaks(
        "tls-not-insecure",
        spec(BASE, tls={"secretName": "s"}, insecure=True),
        "spec.insecure",
        "TLS and --insecure contradict",
    ),
    keeps("tls-not-insecure", spec(BASE, tls={"secretName": "s"}, insecure=False), "said explicitly"),
    keeps("tls-not-insecure", spec(BASE, insecure=True), "insecure without TLS, the operator's default"),
    breaks(
        "auth-needs-tls",
        spec(BASE, nodeAuthentication={"enabled": True}),
        "spec.nodeAuthentication.enabled",
        "the SuperLink refuses --enable-supernode-auth with --insecure",
    ),
    keeps(
        "auth-needs-tls",
        spec(BASE, tls={"secretName": "s"}, nodeAuthentication={"enabled": True}),
        "TLS on",
    ),
    keeps("auth-needs-tls", spec(BASE, nodeAuthentication={"enabled": False}), "authentication off"),
    breaks(
        "control-api-in-cluster-only",
        spec(BASE, superlink__inClusterControlAPI=True, superlink__service__type="LoadBalancer"),
        "spec.superlink.inClusterControlAPI",
        "a LoadBalancer would carry the unauthenticated Control API to every address outside the cluster",
    ),
    breaks(
        "control-api-in-cluster-only",
        spec(BASE, superlink__inClusterControlAPI=True, superlink__service__type="NodePort"),
        "spec.superlink.inClusterControlAPI",
        "a NodePort opens it on every node's address",
    ),
    keeps(
        "control-api-in-cluster-only",
        spec(BASE, superlink__inClusterControlAPI=True),
        "the default ClusterIP Service keeps it in the cluster",
    ),
    keeps(
        "control-api-in-cluster-only",
        spec(BASE, superlink__service__type="LoadBalancer"),
        "exposed Fleet API, Control API on the loopback",
    ),
    breaks(
        "auth-key-one-supernode",
        pool(spec(BASE, tls={"secretName": "s"}), authKeySecretRef={"name": "k", "key": "supernode.key"}),
        "spec.supernodes.pools[0].authKeySecretRef",
        "two replicas with one key: Flower refuses the second",
    ),
    breaks(
        "auth-key-one-supernode",
        pool(DS, authKeySecretRef={"name": "k", "key": "supernode.key"}),
        "spec.supernodes.pools[0].authKeySecretRef",
        "a DaemonSet runs one SuperNode per node, all with the one key",
    ),
    keeps(
        "auth-key-one-supernode",
        pool(spec(BASE, supernodes__pools__0__replicas=1), authKeySecretRef={"name": "k", "key": "supernode.key"}),
        "one SuperNode, one key",
    ),
    keeps(
        "auth-key-one-supernode",
        spec(BASE, tls={"secretName": "s"}, nodeAuthentication={"enabled": True}),
        "keys made per SuperNode",
    ),
    breaks(
        "selector-or-provider-config",
        pool(BASE, clusterSelector={"matchLabels": {"gpu": "true"}}, providerConfigRef={"name": "eu"}),
        "spec.supernodes.pools[0].clusterSelector",
        "a pool either names its cluster or follows labels; with both, which wins would be a guess",
    ),
    keeps(
        "selector-or-provider-config",
        pool(BASE, clusterSelector={"matchLabels": {"gpu": "true"}}),
        "clusters chosen by label alone",
    ),
    keeps("selector-or-provider-config", pool(BASE, providerConfigRef={"name": "eu"}), "one named cluster"),
    breaks(
        "selector-no-auth-key",
        pool(
            spec(BASE, supernodes__pools__0__replicas=1),
            clusterSelector={"matchLabels": {"gpu": "true"}},
            authKeySecretRef={"name": "k", "key": "supernode.key"},
        ),
        "spec.supernodes.pools[0].authKeySecretRef",
        "one SuperNode per cluster would all present the one key, and Flower refuses the second",
    ),
    keeps(
        "selector-no-auth-key",
        pool(
            spec(BASE, tls={"secretName": "s"}, nodeAuthentication={"enabled": True}),
            clusterSelector={"matchLabels": {"gpu": "true"}},
        ),
        "each SuperNode of each cluster makes its own key",
    ),
    breaks(
        "cluster-index-needs-selector",
        pool(BASE, nodeConfig={"site": "{clusterIndex}"}),
        "spec.supernodes.pools[0].nodeConfig.site",
        "a pool that names its cluster has no index among clusters",
    ),
    keeps(
        "cluster-index-needs-selector",
        pool(BASE, clusterSelector={"matchLabels": {"gpu": "true"}}, nodeConfig={"site": "{clusterIndex}"}),
        "each selected cluster has its index",
    ),
    keeps("cluster-index-needs-selector", pool(BASE, nodeConfig={"site": "{cluster}"}), "{cluster} is any pool's"),
    breaks(
        "claim-templates-need-statefulset",
        pool(DS, volumeClaimTemplates=[TEMPLATE]),
        "spec.supernodes.pools[0].volumeClaimTemplates",
        "a DaemonSet has no claim templates",
    ),
    keeps("claim-templates-need-statefulset", pool(BASE, volumeClaimTemplates=[TEMPLATE]), "a StatefulSet has"),
    breaks(
        "state-volume-name",
        spec(
            BASE,
            superlink__persistence={},
            superlink__volumeClaimTemplates=[{**TEMPLATE, "metadata": {"name": "state"}}],
        ),
        "spec.superlink.volumeClaimTemplates",
        "persistence claims that name",
    ),
    keeps(
        "state-volume-name",
        spec(BASE, superlink__persistence={}, superlink__volumeClaimTemplates=[TEMPLATE]),
        "another name",
    ),
    breaks(
        "state-volume-name",
        spec(
            BASE,
            tls={"secretName": "s"},
            nodeAuthentication={"enabled": True},
            superlink__volumeClaimTemplates=[{**TEMPLATE, "metadata": {"name": "state"}}],
        ),
        "spec.superlink.volumeClaimTemplates",
        "node authentication keeps the state on that claim",
    ),
    keeps(
        "state-volume-name",
        spec(
            BASE,
            superlink__persistence={"enabled": False},
            superlink__volumeClaimTemplates=[{**TEMPLATE, "metadata": {"name": "state"}}],
        ),
        "persistence off: the name is free",
    ),
    breaks(
        "identity-volume-name",
        pool(
            spec(BASE, tls={"secretName": "s"}, nodeAuthentication={"enabled": True}),
            volumeClaimTemplates=[{**TEMPLATE, "metadata": {"name": "supernode-identity"}}],
        ),
        "spec.supernodes.pools[0].volumes",
        "the identity claim takes that name",
    ),
    keeps(
        "identity-volume-name",
        pool(spec(BASE), volumes=[{"name": "supernode-identity", "emptyDir": {}}]),
        "authentication off: the name is free",
    ),
]


def case_id(case: Case) -> str:
    return f"{case.rule}-{'breaks' if case.path else 'keeps'}-{case.reason}"


def test_every_rule_has_cases_that_break_and_keep_it():
    assert [c.rule for c in CASES if c.rule not in BY_NAME] == []
    broken = {c.rule for c in CASES if c.path}
    kept = {c.rule for c in CASES if not c.path}
    assert [r.name for r in rules.RULES if r.name not in broken or r.name not in kept] == []


def test_rule_names_are_unique():
    assert len(BY_NAME) == len(rules.RULES)


def reported(rule: rules.Rule, errors: list[tuple[str, str]]) -> list[str]:
    """The paths of the errors carrying this rule's message (alone, or with a detail after it)."""
    return [f for f, m in errors if m == rule.message or m.startswith(rule.message + ": ")]


def field_pattern(rule: rules.Rule) -> re.Pattern[str]:
    """rule.field as a pattern: [*] is any pool's index, <key> a nodeConfig key."""
    return re.compile(re.escape(rule.field).replace(r"\[\*\]", r"\[\d+\]").replace("<key>", ".+"))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_function_reports_the_rule_on_the_field(case):
    rule = BY_NAME[case.rule]
    if case.path is None:
        parse(case.spec)  # kept: no rule broken at all
        return
    assert field_pattern(rule).fullmatch(case.path), (rule.field, case.path)
    with pytest.raises(SpecError) as err:
        parse(case.spec)
    if rule.check is None:
        # The model refuses it first, in its own words (rule.why).
        assert case.path in [f for f, _ in err.value.errors], err.value.errors
    else:
        assert reported(rule, err.value.errors) == [case.path], err.value.errors


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def admitted(case: Case) -> dict[str, Any]:
    """The spec as CEL sees it at admission: nulls pruned (no field is nullable), then the XRD's defaults."""
    return apply_defaults(SPEC_SCHEMA, without_nulls(copy.deepcopy(case.spec)))


@pytest.fixture(scope="module")
def cel_verdicts(celcheck) -> dict[tuple[int, str], bool]:
    """Whether each case keeps each rule, by cel-go.

    celcheck binds the document to `object` (as provider-kubernetes binds a
    readiness query's); the XRD's rules name it `self`.
    """
    with_cel = [r for r in rules.RULES if r.cel is not None]
    assert [r.name for r in with_cel if "object" in str(r.cel)] == []
    keys = [(i, r.name) for i in range(len(CASES)) for r in with_cel]
    checks = [
        {"query": re.sub(r"\bself\b", "object", str(BY_NAME[name].cel)), "object": admitted(CASES[i])}
        for i, name in keys
    ]
    proc = subprocess.run([celcheck], input=json.dumps(checks), capture_output=True, text=True, check=True)
    outcomes = json.loads(proc.stdout)
    assert [o for o in outcomes if "error" in o] == []
    return {key: o["result"] for key, o in zip(keys, outcomes, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_admission_and_the_function_agree_on_every_rule(case, cel_verdicts):
    i = CASES.index(case)
    own = BY_NAME[case.rule]
    if own.cel is not None:
        assert cel_verdicts[i, own.name] is (case.path is None), case.reason
    try:
        model = FederationSpec.model_validate(case.spec)
    except pydantic.ValidationError:
        # Only a rule the model enforces itself may stop a case here.
        assert own.check is None
        assert case.path is not None
        return
    for rule in rules.RULES:
        if rule.cel is not None and rule.check is not None:
            assert cel_verdicts[i, rule.name] is (rule.violations(model) == []), (rule.name, case.reason)


def test_function_only_rules_say_why():
    assert all(r.why for r in rules.RULES if r.cel is None or r.check is None)
    with pytest.raises(ValueError, match="say why"):
        rules.Rule(name="x", field="spec", message="m", cel=None, check=lambda _: iter(()))
