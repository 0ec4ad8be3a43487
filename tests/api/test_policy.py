"""The platform's policy (function/api/policy.py): what a Federation may ask for, refused where it asks more.

Through the function as Crossplane calls it, the policy in the request's input
as the Composition's step gives it: each escalation is refused under the
default policy, naming the Federation's field and the policy's, with no
desired resources; and allowed only by the policy field that names it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.api import policy
from function.composition import admission, pod_security
from function.serving import fn, render
from support.helpers import BASE, pool, spec, xr
from support.peers import EXAMPLES, ROOT

NAMESPACE = "team-a"


def run(s: dict[str, Any], given: dict[str, Any] | None = None, *, claim: bool = True) -> fnv1.RunFunctionResponse:
    """The function's answer to a Federation (a claim's, or a cluster-scoped XR's) under a policy."""
    composite = xr(s) if claim else {"apiVersion": "flower.crossplane.io/v1alpha1", "kind": "XFederation",
                                     "metadata": {"name": "fed"}, "spec": s}  # fmt: skip
    req = render.request(composite, [])
    if given is not None:
        req.input.update({"apiVersion": policy.API_VERSION, "kind": policy.KIND, **given})
    return fn.run(req)


def refused(rsp: fnv1.RunFunctionResponse) -> str:
    return "; ".join(r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL)


def template(**pod_spec: Any) -> dict[str, Any]:
    return {"spec": pod_spec}


RESTRICTED_INIT = {
    "name": "fetch",
    "image": "registry.example.com/tools/fetch:1",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    spec: dict[str, Any]
    field: str
    says: str
    # The policy that allows it (None: no policy may).
    allowed_by: dict[str, Any] | None
    claim: bool = True
    # The policy it is refused under (None: the defaults).
    given: dict[str, Any] | None = None


CASES = [
    Case("host PID namespace", pool(BASE, podTemplate=template(hostPID=True)),
         "spec.supernodes.pools[0].podTemplate.spec.hostPID", "podSecurity restricted", {"podSecurity": "privileged"}),
    Case("host network", pool(BASE, podTemplate=template(hostNetwork=True)),
         "spec.supernodes.pools[0].podTemplate.spec.hostNetwork", "host's namespaces", {"podSecurity": "privileged"}),
    Case("host IPC on the SuperLink", spec(BASE, superlink__podTemplate=template(hostIPC=True)),
         "spec.superlink.podTemplate.spec.hostIPC", "podSecurity restricted", {"podSecurity": "privileged"}),
    Case("a hostPath volume", pool(BASE, volumes=[{"name": "host", "hostPath": {"path": "/"}}]),
         "spec.supernodes.pools[0].volumes[0]", "hostPath", {"podSecurity": "privileged"}),
    Case("a pod security context that drops the function's (no seccomp, may run as root)",
         pool(BASE, podTemplate=template(securityContext={"fsGroup": 1000})),
         "spec.supernodes.pools[0].podTemplate.spec.securityContext", "restricted", {"podSecurity": "baseline"}),
    Case("seccomp Unconfined", pool(BASE, podTemplate=template(securityContext={
             "runAsNonRoot": True, "seccompProfile": {"type": "Unconfined"}})),
         "spec.supernodes.pools[0].podTemplate.spec.securityContext.seccompProfile", "Unconfined",
         {"podSecurity": "privileged"}),
    Case("an unsafe sysctl", pool(BASE, podTemplate=template(securityContext={
             "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
             "sysctls": [{"name": "kernel.msgmax", "value": "1"}]})),
         "spec.supernodes.pools[0].podTemplate.spec.securityContext.sysctls[0]", "kernel.msgmax",
         {"podSecurity": "privileged"}),
    Case("the ServiceAccount", pool(BASE, podTemplate=template(serviceAccountName="admin")),
         "spec.supernodes.pools[0].podTemplate.spec.serviceAccountName", "podFields",
         {"podFields": ["serviceAccountName"]}),
    Case("a token in every container", pool(BASE, podTemplate=template(automountServiceAccountToken=True)),
         "spec.supernodes.pools[0].podTemplate.spec.automountServiceAccountToken", "podFields",
         {"podFields": ["automountServiceAccountToken"]}),
    Case("a node of its choosing", pool(BASE, podTemplate=template(nodeName="control-plane-1")),
         "spec.supernodes.pools[0].podTemplate.spec.nodeName", "podFields", {"podFields": ["nodeName"]}),
    Case("a runtime class", pool(BASE, podTemplate=template(runtimeClassName="unconfined")),
         "spec.supernodes.pools[0].podTemplate.spec.runtimeClassName", "podFields",
         {"podFields": ["runtimeClassName"]}),
    Case("a priority class", pool(BASE, podTemplate=template(priorityClassName="system-node-critical")),
         "spec.supernodes.pools[0].podTemplate.spec.priorityClassName", "podFields",
         {"podFields": ["priorityClassName"]}),
    Case("an init container of any image", pool(BASE, podTemplate=template(initContainers=[RESTRICTED_INIT])),
         "spec.supernodes.pools[0].podTemplate.spec.initContainers[0].image", "initContainerImages: none",
         {"initContainerImages": ["registry.example.com/tools/"]}),
    Case("a privileged init container",
         pool(BASE, podTemplate=template(initContainers=[{**RESTRICTED_INIT,
                                                          "securityContext": {"privileged": True}}])),
         "spec.supernodes.pools[0].podTemplate.spec.initContainers[0].securityContext.privileged", "privileged",
         {"initContainerImages": ["registry.example.com/"], "podSecurity": "privileged"}),
    Case("an added capability", pool(BASE, podTemplate=template(initContainers=[{**RESTRICTED_INIT, "securityContext": {
             **RESTRICTED_INIT["securityContext"], "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}])),
         "spec.supernodes.pools[0].podTemplate.spec.initContainers[0].securityContext.capabilities.add", "SYS_ADMIN",
         {"initContainerImages": ["registry.example.com/"], "podSecurity": "privileged"}),
    Case("an unmasked /proc", pool(BASE, podTemplate=template(initContainers=[{**RESTRICTED_INIT, "securityContext": {
             **RESTRICTED_INIT["securityContext"], "procMount": "Unmasked"}}])),
         "spec.supernodes.pools[0].podTemplate.spec.initContainers[0].securityContext.procMount", "procMount Unmasked",
         {"initContainerImages": ["registry.example.com/"], "podSecurity": "privileged"}),
    Case("a host port", pool(BASE, podTemplate=template(initContainers=[
             {**RESTRICTED_INIT, "ports": [{"containerPort": 80, "hostPort": 80}]}])),
         "spec.supernodes.pools[0].podTemplate.spec.initContainers[0].ports[0].hostPort", "host port 80",
         {"initContainerImages": ["registry.example.com/"], "podSecurity": "privileged"}),
    Case("AMD's device files (a privileged container)",
         pool(BASE, gpu={"enabled": True, "vendor": "amd", "mountAll": True}),
         "spec.supernodes.pools[0].gpu.mountAll", "privileged container",
         {"exceptions": [{"namespaces": [NAMESPACE], "podSecurity": "privileged"}]}),
    Case("another namespace than the claim's, in another cluster",
         pool(spec(BASE, superlink__externalAddress="flower.example.com:9092"), providerConfigRef={"name": "spoke"},
              namespace="team-b"),
         "spec.supernodes.pools[0].namespace", "own namespace (team-a)", {"namespaces": ["team-*"]}),
    Case("a namespace the policy does not list, beside the claim's own",
         pool(spec(BASE, superlink__externalAddress="flower.example.com:9092"), providerConfigRef={"name": "spoke"},
              namespace="team-c"),
         "spec.supernodes.pools[0].namespace", "lists (team-b)", {"namespaces": ["team-b", "team-c"]},
         given={"namespaces": ["team-b"]}),
    Case("a cluster's own namespace, whatever the policy", spec(BASE, namespace="kube-system"),
         "spec.supernodes.pools[0]", "kube-system is a cluster's own", None, claim=False),
    Case("a namespace made by the Federation where the platform makes them",
         pool(BASE, createNamespace=True), "spec.supernodes.pools[0].createNamespace", "createNamespaces: false", None),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.reason for c in CASES])
def test_each_escalation_is_refused_by_default_and_allowed_only_by_the_field_that_names_it(case: Case):
    given = {"createNamespaces": False} if "createNamespace" in case.field else case.given
    rsp = run(case.spec, given, claim=case.claim)
    message = refused(rsp)
    assert f"{case.field}: " in message and case.says in message, (case.reason, message)
    assert not rsp.desired.resources, "a refused Federation composes nothing (and Crossplane removes nothing)"
    if case.allowed_by is not None:
        allowed = run(case.spec, case.allowed_by, claim=case.claim)
        assert refused(allowed) == "", (case.reason, refused(allowed))
        assert allowed.desired.resources


# A pool in another cluster (ProviderConfig gpu-east) than the SuperLink's (default).
REMOTE = spec(BASE, superlink__externalAddress="flower.example.com:9092")
MOUNT_ALL = {"enabled": True, "vendor": "amd", "mountAll": True}
PRIVILEGED_HERE = [{"namespaces": [NAMESPACE], "podSecurity": "privileged"}]


@pytest.mark.parametrize(
    ("s", "given", "refusal", "reason"),
    [
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, gpu=MOUNT_ALL),
         {"clusters": [{"providerConfigs": ["gpu-*"], "exceptions": PRIVILEGED_HERE}]}, None,
         "the GPU clusters' exception holds where the pool runs"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, gpu=MOUNT_ALL),
         {"clusters": [{"providerConfigs": ["default"], "exceptions": PRIVILEGED_HERE}]}, "gpu.mountAll",
         "an exception for another cluster grants nothing in this one"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, gpu=MOUNT_ALL),
         {"exceptions": PRIVILEGED_HERE, "clusters": [{"providerConfigs": ["gpu-east"], "exceptions": []}]},
         "gpu.mountAll", "a cluster's field replaces the policy's: an empty list there takes the exception away"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, gpu=MOUNT_ALL),
         {"clusters": [{"providerConfigs": ["gpu-east"], "namespaces": ["x"]},
                       {"providerConfigs": ["gpu-*"], "exceptions": PRIVILEGED_HERE}]}, "gpu.mountAll",
         "the first entry naming the cluster is its rules: the later one does not add to it"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, podTemplate=template(securityContext={"fsGroup": 1})),
         {"clusters": [{"providerConfigs": ["gpu-east"], "podSecurity": "baseline"}]}, None,
         "a cluster at baseline takes a pod that restricted refuses"),
        (spec(pool(REMOTE, providerConfigRef={"name": "gpu-east"}),
              superlink__podTemplate=template(securityContext={"fsGroup": 1})),
         {"clusters": [{"providerConfigs": ["gpu-east"], "podSecurity": "baseline"}]}, "spec.superlink.podTemplate",
         "the SuperLink's cluster (default) keeps the policy's level"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, namespace="team-b"),
         {"clusters": [{"providerConfigs": ["gpu-east"], "namespaces": ["team-b"]}]}, None,
         "a namespace the cluster's rules list"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-west"}, namespace="team-b"),
         {"clusters": [{"providerConfigs": ["gpu-east"], "namespaces": ["team-b"]}]}, "namespace team-b is refused",
         "listed for another cluster only"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-east"}, createNamespace=True),
         {"clusters": [{"providerConfigs": ["gpu-east"], "createNamespaces": False}]}, "createNamespaces: false",
         "the platform makes the namespaces of that cluster"),
        (pool(REMOTE, providerConfigRef={"name": "gpu-west"}, createNamespace=True),
         {"clusters": [{"providerConfigs": ["gpu-east"], "createNamespaces": False}]}, None,
         "and only of that cluster"),
    ],
)  # fmt: skip
def test_a_clusters_rules_replace_the_policys_there_and_nowhere_else(s, given, refusal, reason):
    rsp = run(s, given)
    if refusal is None:
        assert refused(rsp) == "", (reason, refused(rsp))
        assert rsp.desired.resources
    else:
        assert refusal in refused(rsp), (reason, refused(rsp))
        assert not rsp.desired.resources


def test_the_default_policy_refuses_nothing_the_function_composes_itself():
    for s in (BASE, spec(BASE, tls={"secretName": "tls"}, nodeAuthentication={"enabled": True})):
        assert refused(run(s)) == ""
        assert refused(run(s, {})) == "", "an empty input is the default policy"


@pytest.mark.parametrize(
    ("given", "field", "reason"),
    [
        ({"podSecurity": "lax"}, "input.podSecurity", "a level the standards do not have"),
        ({"podFields": ["hostNetwork"]}, "input.podFields[0]", "a field the platform does not own: podSecurity's"),
        ({"namespace": ["a"]}, "input.namespace", "a typo is an error, not a silent default"),
        ({"runImages": "registry.example.com/ml/"}, "input.runImages", "one prefix where a list is asked for"),
        (
            {"clusters": [{"providerConfigs": ["a"], "runImages": ["r/"]}]},
            "input.clusters[0].runImages",
            "run images per cluster: the bundler runs beside the SuperLink alone",
        ),
        ({"clusters": [{"namespaces": ["a"]}]}, "input.clusters[0].providerConfigs", "cluster rules for no cluster"),
        (
            {"clusters": [{"providerConfigs": ["a"], "podFields": ["nodeName"]}]},
            "input.clusters[0].podFields",
            "a field that is the same in every cluster",
        ),
    ],
)
def test_a_bad_policy_is_a_fatal_result_naming_the_input_field(given, field, reason):
    rsp = run(BASE, given)
    assert f"invalid function input (the Composition's policy): {field}" in refused(rsp), (reason, refused(rsp))
    assert not rsp.desired.resources


def _restricted_pod() -> dict[str, Any]:
    docs, _ = render.render(xr(BASE), [])
    manifests = [d["spec"]["forProvider"]["manifest"] for d in docs if d.get("kind") == "Object"]
    return next(m for m in manifests if m["kind"] == "StatefulSet" and "supernode" in m["metadata"]["name"])


MUTATIONS = {
    "as composed": lambda _: None,
    "hostNetwork": lambda p: p.update(hostNetwork=True),
    "runAsUser 0": lambda p: p["securityContext"].update(runAsUser=0),
    "seccomp Unconfined": lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}),
    "no seccomp": lambda p: p["securityContext"].pop("seccompProfile"),
    "privileged": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
    "escalation": lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
    "SYS_ADMIN": lambda p: p["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
    "CHOWN kept": lambda p: p["containers"][0]["securityContext"].update(capabilities={"add": ["CHOWN"]}),
    "hostPath": lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "nfs": lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
    "hostPort": lambda p: p["containers"][0].setdefault("ports", []).append({"containerPort": 1, "hostPort": 1}),
    "procMount": lambda p: p["containers"][0]["securityContext"].update(procMount="Unmasked"),
    "sysctl": lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "SELinux user": lambda p: p["securityContext"].update(seLinuxOptions={"user": "root"}),
}


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_pod_security_judge_agrees_with_the_api_servers(psscheck, level):
    """The function's judge and k8s.io/pod-security-admission give the same verdict on the same pods."""
    workloads = []
    for name, mutate in MUTATIONS.items():
        workload = copy.deepcopy(_restricted_pod())
        workload["metadata"]["name"] = name.lower().replace(" ", "-")
        mutate(workload["spec"]["template"]["spec"])
        workloads.append(workload)
    args = [psscheck, "-level", level]
    proc = subprocess.run(args, input=json.dumps(workloads), capture_output=True, text=True, check=True)
    theirs = {v["name"]: v["allowed"] for v in json.loads(proc.stdout)}
    ours = {w["metadata"]["name"]: not pod_security.failing(w["spec"]["template"]["spec"], level) for w in workloads}
    assert ours == theirs
    assert theirs["as-composed"] and not theirs["hostnetwork"]


def applied(given: dict[str, Any] | None, message: str) -> dict[str, Any]:
    """The policy given, with what the refusal says would admit it: its lists lengthened, the rest set."""
    remedy = message.split(admission.ALLOWED_BY, 1)[1].split("): ", 1)[1]
    out = copy.deepcopy(given or {})
    for part in remedy.split("; "):
        for key, value in yaml.safe_load(part).items():
            # An exception first: the first one naming a namespace is the one that holds.
            out[key] = value + out.get(key, []) if isinstance(value, list) else value
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.reason for c in CASES])
def test_a_refusal_says_which_fields_of_the_policy_would_allow_it_and_they_do(case: Case):
    """What a platform team reads in the refusal is enough: the fields it names, set so, admit the Federation.
    Nothing is offered for what no policy may allow (a cluster's own namespace)."""
    given = {"createNamespaces": False} if "createNamespace" in case.field else case.given
    message = refused(run(case.spec, given, claim=case.claim))
    if case.allowed_by is None and "createNamespace" not in case.field:
        assert admission.ALLOWED_BY not in message, (case.reason, message)
        return
    assert admission.ALLOWED_BY in message, (case.reason, message)
    remedied = run(case.spec, applied(given, message), claim=case.claim)
    assert refused(remedied) == "", (case.reason, message, refused(remedied))


@pytest.mark.parametrize(
    ("reason", "given", "says"),
    [
        ("a level for the namespace, the loosest the pod needs", None,
         "exceptions: [{namespaces: [team-a], podSecurity: privileged}]"),
        ("in the clusters entry that sets the field for the cluster, not the policy's own",
         {"clusters": [{"providerConfigs": ["default", "spoke-*"], "exceptions": [
             {"namespaces": ["other"], "podSecurity": "privileged"}]}]},
         "in its clusters entry for [default, spoke-*]: exceptions: [{namespaces: [team-a], podSecurity: privileged}]"),
        ("the policy's own field, where the cluster's entry does not set it",
         {"clusters": [{"providerConfigs": ["default"], "namespaces": ["x"]}]},
         "): exceptions: [{namespaces: [team-a], podSecurity: privileged}]"),
    ],
)  # fmt: skip
def test_the_remedy_names_where_in_the_policy_the_cluster_reads_the_field(reason, given, says):
    message = refused(run(pool(BASE, podTemplate=template(hostPID=True, hostNetwork=True)), given))
    assert says in message, (reason, message)


def test_function_render_takes_the_platforms_policy():
    """`function render --policy`: the examples that need more than the defaults render under a policy that
    admits them, and are refused, naming the field, under the defaults."""
    example = str(EXAMPLES / "claims" / "gpu-mountall.yaml")
    with pytest.raises(render.RenderError, match=r"spec\.supernodes\.pools\[1\]\.gpu\.mountAll: a privileged") as err:
        render.render_file(example)
    # Where its policy would allow it, and how to try one here.
    assert "exceptions: [{namespaces: [gpu-privileged], podSecurity: privileged}]" in str(err.value)
    assert str(err.value).endswith(render.TRY_A_POLICY)
    text, _ = render.render_file(example, policy_path=str(EXAMPLES / "policy" / "gpu-platform.yaml"))
    assert "privileged: true" in text


def test_function_render_takes_the_environmentconfig_a_platform_applies(tmp_path):
    """The file a platform team applies (the EnvironmentConfig the packages' Compositions read) and the same
    rules as a Policy in a Composition's step: `function render --policy` renders an example alike under both."""
    path = EXAMPLES / "policy" / "gpu-platform.yaml"
    [applied] = yaml.safe_load_all(path.read_text())
    assert applied["kind"] == policy.ENVIRONMENT_CONFIG_KIND, applied["kind"]
    assert applied["metadata"]["name"] == policy.PLATFORM_ENVIRONMENT_CONFIG
    in_a_step = tmp_path / "policy.yaml"
    in_a_step.write_text(yaml.safe_dump({"apiVersion": policy.API_VERSION, "kind": policy.KIND, **applied["data"]}))
    example = str(EXAMPLES / "claims" / "gpu-mountall.yaml")
    assert render.render_file(example, policy_path=str(path)) == render.render_file(example, policy_path=str(in_a_step))


# -- the policy in an EnvironmentConfig --------------------------------------------------------

NAMED = {"environmentConfig": policy.PLATFORM_ENVIRONMENT_CONFIG}
HOST_PID = pool(spec(BASE), podTemplate=template(hostPID=True))


def environment_config(data: Any) -> dict[str, Any]:
    return {
        "apiVersion": policy.ENVIRONMENT_CONFIG_API,
        "kind": policy.ENVIRONMENT_CONFIG_KIND,
        "metadata": {"name": policy.PLATFORM_ENVIRONMENT_CONFIG},
        "data": data,
    }


def run_found(s: dict[str, Any], found: list[dict[str, Any]] | None) -> fnv1.RunFunctionResponse:
    """The answer once Crossplane looked the EnvironmentConfig up (found: what it found; None: not asked yet)."""
    req = render.request(xr(s), [])
    req.input.update({"apiVersion": policy.API_VERSION, "kind": policy.KIND, **NAMED})
    if found is not None:
        req.required_resources[policy.REQUIREMENT].SetInParent()
        for item in found:
            req.required_resources[policy.REQUIREMENT].items.add().resource.update(item)
    return fn.run(req)


def test_a_named_environment_config_is_asked_for_before_anything_is_judged():
    # A fatal result would stop Crossplane from fetching it: the first answer only asks.
    rsp = run_found(HOST_PID, None)
    assert not rsp.results and not rsp.desired.resources
    selector = rsp.requirements.resources[policy.REQUIREMENT]
    assert (selector.api_version, selector.kind, selector.match_name) == (
        "apiextensions.crossplane.io/v1beta1",
        "EnvironmentConfig",
        "flower-platform-policy",
    )


@pytest.mark.parametrize(
    ("found", "allowed", "reason"),
    [
        ([], False, "no EnvironmentConfig: the input's rules, the defaults here"),
        ([environment_config({"podSecurity": "privileged"})], True, "its data's rules replace the input's"),
        ([environment_config({"podSecurity": "restricted"})], False, "its rules, as strict as the defaults"),
    ],
)
def test_the_environment_configs_rules_are_the_policy_once_it_exists(found, allowed, reason):
    rsp = run_found(HOST_PID, found)
    assert (not refused(rsp)) is allowed, (reason, refused(rsp))
    if not allowed:
        assert "spec.supernodes.pools[0].podTemplate.spec.hostPID" in refused(rsp), reason
        assert not rsp.desired.resources, reason
    # Asked for again on every answer: Crossplane passes only what the last one asked for.
    assert (policy.REQUIREMENT in rsp.requirements.resources) is allowed, reason


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"podSecurity": "root"}, "data.podSecurity", "an unknown level"),
        ({"namespace": ["x"]}, "data.namespace", "an unknown field, a typo of namespaces"),
        ("restricted", "data", "data that is no object"),
    ],
)
def test_a_bad_environment_config_is_a_fatal_result_naming_its_field(data, field, reason):
    rsp = run_found(spec(BASE), [environment_config(data)])
    assert f"invalid platform policy: EnvironmentConfig flower-platform-policy: {field}" in refused(rsp), reason
    assert not rsp.desired.resources, reason


def test_crank_render_reads_the_policy_from_the_environment_config(crank, functions_file, tmp_path):
    """The package's own Composition, as Crossplane runs it: the EnvironmentConfig it names decides."""
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(render.composite(xr(HOST_PID))))
    command = [crank, "render", str(xr_file), str(ROOT / "apis" / "composition.yaml"), str(functions_file)]
    refused_run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert refused_run.returncode != 0
    assert "spec.supernodes.pools[0].podTemplate.spec.hostPID" in refused_run.stderr, refused_run.stderr
    required = tmp_path / "required.yaml"
    required.write_text(yaml.safe_dump(environment_config({"podSecurity": "privileged"})))
    allowed = subprocess.run([*command, f"--required-resources={required}"],
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "hostPID: true" in allowed.stdout
