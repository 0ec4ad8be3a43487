"""Pod hardening: the restricted Pod Security Standard, scratch space, probes,
ServiceAccounts and image pull settings."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from function.api.spec import HEALTH_PORTS
from function.builders import pods
from function.serving import render
from support.helpers import BASE, PROCESS, manifests, pool, spec
from support.peers import CLAIMS, EXAMPLES, KUBERNETES_MINORS, ROOT, load_all, policy_for

# What the API server's PodSecurity admission says of the documented exception:
# AMD's device files need a privileged container and hostPath volumes.
AMD_MOUNT_ALL = {
    "privileged",
    "allowPrivilegeEscalation != false",
    "unrestricted capabilities",
    "restricted volume types",
}


def judge(
    psscheck: str, workloads: list[dict[str, Any]], minors: list[str] = KUBERNETES_MINORS
) -> list[dict[str, Any]]:
    """k8s.io/pod-security-admission's "restricted" verdicts, one per workload and minor."""
    args = [psscheck, "-level", "restricted", *(f"-version=v{m}" for m in minors)]
    proc = subprocess.run(args, input=json.dumps(workloads), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def example_workloads():
    for example in [*CLAIMS, EXAMPLES / "xr.yaml", EXAMPLES / "v2" / "federation.yaml"]:
        docs, _ = render.render(load_all(example)[0], [], policy=policy_for(example))
        for doc in docs[1:]:
            if doc["kind"] == "Object":
                yield doc["spec"]["forProvider"]["manifest"]


def test_every_example_pod_is_restricted_at_every_minor(psscheck):
    workloads = [m for m in example_workloads() if m["kind"] in {"DaemonSet", "StatefulSet", "Deployment"}]
    assert len(workloads) > 20
    verdicts = judge(psscheck, list(example_workloads()))
    # Every workload judged at every minor, and nothing else (Services, policies... hold no pod).
    judged = sorted((v["name"], v["version"]) for v in verdicts)
    assert judged == sorted((m["metadata"]["name"], f"v{n}") for m in workloads for n in KUBERNETES_MINORS)
    for v in verdicts:
        reasons = {f["reason"] for f in v["forbidden"]}
        if v["name"] == "federation-all-gpus-supernode-amd-nodes":
            # The documented exception (docs/pods-and-nodeconfig.md#pod-security).
            assert not v["allowed"] and reasons == AMD_MOUNT_ALL, v
        else:
            assert v["allowed"] and not reasons, v


def _container_security(**changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda p: p["containers"][0].update(securityContext={**pods.CONTAINER_SECURITY, **changes})


@pytest.mark.parametrize(
    ("why", "change", "reason"),
    [
        ("the node's network namespace", lambda p: p.update(hostNetwork=True), "host namespaces"),
        ("a container that may run as root", _container_security(runAsNonRoot=False), "runAsNonRoot != true"),
        ("root as the pod's user", lambda p: p["securityContext"].update(runAsUser=0), "runAsUser=0"),
        (
            "no syscall filter",
            lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            "seccompProfile",
        ),
        (
            "setuid binaries may gain privileges",
            _container_security(allowPrivilegeEscalation=True),
            "allowPrivilegeEscalation != false",
        ),
        (
            "a capability beyond NET_BIND_SERVICE",
            _container_security(capabilities={"drop": ["ALL"], "add": ["NET_ADMIN"]}),
            "unrestricted capabilities",
        ),
        (
            "the node's file system",
            lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "restricted volume types",
        ),
        (
            "a port on the node",
            lambda p: p["containers"][0]["ports"].append({"containerPort": 80, "hostPort": 80}),
            "hostPort",
        ),
        (
            "a pod-level override that drops the seccomp profile (podTemplate replaces securityContext)",
            lambda p: p.update(securityContext={"runAsUser": 1000, "runAsNonRoot": True}),
            "seccompProfile",
        ),
    ],
)
def test_the_real_judge_refuses_each_weakening(psscheck, why, change, reason):
    """The judge can fail: each weakening of a rendered pool is refused at every minor, for its reason."""
    workload = copy.deepcopy(manifests(BASE)["pool-default"])
    assert all(v["allowed"] for v in judge(psscheck, [workload])), why
    change(workload["spec"]["template"]["spec"])
    for v in judge(psscheck, [workload]):
        assert not v["allowed"] and reason in {f["reason"] for f in v["forbidden"]}, (why, v)


def test_each_container_has_its_own_health_port_and_probes():
    for resource, names in (
        ("superlink", ["superlink", "superexec-serverapp"]),
        ("pool-default", ["supernode", "superexec-clientapp"]),
    ):
        pod = manifests(PROCESS)[resource]["spec"]["template"]["spec"]
        ports = []
        for c in pod["containers"]:
            port = HEALTH_PORTS[c["name"]]
            ports.append(port)
            assert f"--health-server-address=0.0.0.0:{port}" in c["args"]
            assert c["readinessProbe"]["grpc"] == {"port": port}
            assert c["livenessProbe"]["grpc"] == {"port": port}
            assert port not in {p["containerPort"] for p in c.get("ports", [])}
        assert [c["name"] for c in pod["containers"]] == names
        assert len(set(ports)) == len(ports)


def test_probes_can_be_turned_off():
    pod = manifests(spec(BASE, healthProbes=False))["pool-default"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert "readinessProbe" not in c and "livenessProbe" not in c
    assert not any(a.startswith("--health-server-address") for a in c["args"])


@pytest.mark.parametrize(
    ("reason", "changes", "want"),
    [
        ("off by default in every Flower container: no egress to report to", {}, "0"),
        ("the user's value wins", {"superlink__env": [{"name": "FLWR_TELEMETRY_ENABLED", "value": "1"}]}, "1"),
    ],
)
def test_telemetry(reason, changes, want):
    pod = manifests(spec(PROCESS, **changes))["superlink"]["spec"]["template"]["spec"]
    for c in pod["containers"]:
        values = [e["value"] for e in c["env"] if e["name"] == "FLWR_TELEMETRY_ENABLED"]
        assert values == [want], (reason, c["name"])


@pytest.mark.parametrize(
    ("reason", "allow", "want"),
    [
        ("uv caches on the container's scratch, the root being read-only", True, ["/tmp/uv-cache"]),
        ("nothing installs: no cache", False, []),
    ],
)
def test_uv_cache_only_where_apps_install_dependencies(reason, allow, want):
    s = spec(PROCESS, version="1.41.0", superlink__image=None, supernodes__image=None)
    s["allowRuntimeDependencyInstallation"] = allow
    for pod in (manifests(s)[k]["spec"]["template"]["spec"] for k in ("superlink", "pool-default")):
        for c in pod["containers"]:
            env = c.get("env", [])
            flower_process = c["name"] != "fleet-proxy"  # nginx installs nothing
            assert [e["value"] for e in env if e["name"] == "UV_CACHE_DIR"] == (want if flower_process else []), (
                reason,
                c["name"],
            )
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, (reason, c["name"])


# Node authentication and TLS at 1.41: every kind of container the function makes (Flower, the Fleet
# proxy, the SuperExec secret maker, the identity programs).
EVERY_CONTAINER = spec(
    PROCESS,
    version="1.41.0",
    superlink={"superexecImage": "flwr/superexec:1.41.0"},
    supernodes={"pools": [{"name": "default", "replicas": 1}]},
    tls={"secretName": "superlink-tls"},
    nodeAuthentication={"enabled": True},
)


def _containers(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    built = manifests(s)
    return {
        c["name"]: c
        for workload in ("superlink", "pool-default")
        for c in [*built[workload]["spec"]["template"]["spec"]["containers"],
                  *built[workload]["spec"]["template"]["spec"].get("initContainers", [])]
    }  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "container", "want"),
    [
        ("a Flower process: an interpreter with Flower loaded", "superlink", pods.FLOWER_REQUESTS),
        ("a Flower process", "supernode", pods.FLOWER_REQUESTS),
        ("the ServerApp's SuperExec", "superexec-serverapp", pods.FLOWER_REQUESTS),
        ("the ClientApp's SuperExec: training is the user's to size", "superexec-clientapp", pods.FLOWER_REQUESTS),
        ("nginx, passing Fleet requests on", "fleet-proxy", {"cpu": "10m", "memory": "16Mi"}),
        ("a one-shot secret maker", "superexec-auth", {"cpu": "10m", "memory": "32Mi"}),
        ("the identity program making and publishing the key", "supernode-identity", pods.PROGRAM_REQUESTS),
        ("the registrar, with Flower's CLI loaded", "supernode-registrar", pods.PROGRAM_REQUESTS),
    ],
)
def test_a_container_without_resources_gets_requests_and_no_limits(reason, container, want):
    """Not BestEffort, the first pods evicted under pressure; no limit guessed for work the function cannot size."""
    assert _containers(EVERY_CONTAINER)[container]["resources"] == {"requests": want}, reason


def test_the_users_resources_are_kept_as_they_are():
    # Requests of ours beside the user's limits could exceed them: Kubernetes would refuse the pod.
    limits = {"limits": {"cpu": "500m"}}
    s = pool(spec(EVERY_CONTAINER, superlink__resources=limits), supernodeResources=limits)
    containers = _containers(s)
    assert containers["superlink"]["resources"] == containers["supernode"]["resources"] == limits
    assert containers["superexec-clientapp"]["resources"] == {"requests": pods.FLOWER_REQUESTS}


def test_writable_scratch_for_flower_and_a_read_only_root():
    pod = manifests(BASE)["superlink"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {(m["mountPath"], m["subPath"]) for m in c["volumeMounts"]} == {("/app/.flwr", "flwr"), ("/tmp", "tmp")}
    assert {"name": "scratch-superlink", "emptyDir": {}} in pod["volumes"]


def test_a_user_mount_at_a_scratch_path_wins():
    s = pool(
        BASE,
        volumes=[{"name": "big", "emptyDir": {"sizeLimit": "10Gi"}}],
        volumeMounts=[{"name": "big", "mountPath": "/tmp"}],
    )
    c = manifests(s)["pool-default"]["spec"]["template"]["spec"]["containers"][0]
    assert [m["mountPath"] for m in c["volumeMounts"]].count("/tmp") == 1
    assert {"name": "big", "mountPath": "/tmp"} in c["volumeMounts"]


def test_service_account_without_token_per_cluster_and_namespace():
    s = spec(
        BASE,
        superlink__externalAddress="fleet.example.com",
        supernodes__pools=[
            {"name": "a", "replicas": 1},
            {"name": "b", "replicas": 1, "providerConfigRef": {"name": "spoke"}, "namespace": "fl"},
            {"name": "c", "replicas": 1, "providerConfigRef": {"name": "spoke"}, "namespace": "fl"},
        ],
    )
    out = manifests(s)
    accounts = {k: v for k, v in out.items() if k.startswith(("serviceaccount-", "superlink-serviceaccount"))}
    assert set(accounts) == {"superlink-serviceaccount", "serviceaccount-default-team-a", "serviceaccount-spoke-fl"}
    assert accounts["serviceaccount-spoke-fl"]["metadata"]["namespace"] == "fl"
    assert accounts["superlink-serviceaccount"]["metadata"]["name"] == "fed-superlink"
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    for name, account in (("superlink", "fed-superlink"), ("pool-a", "fed-flower"), ("pool-b", "fed-flower")):
        pod = out[name]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account
        assert pod["automountServiceAccountToken"] is False


def test_image_pull_secrets_and_policy():
    s = spec(BASE, imagePullSecrets=[{"name": "regcred"}], imagePullPolicy="Always")
    s = pool(s, podTemplate={"spec": {"imagePullSecrets": [{"name": "pool-cred"}]}})
    out = manifests(s)
    assert out["superlink"]["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    pod = out["pool-default"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "pool-cred"}]
    assert {c["imagePullPolicy"] for c in pod["containers"]} == {"Always"}


def test_pod_template_can_override_pod_security():
    s = pool(BASE, podTemplate={"spec": {"securityContext": {"runAsUser": 1000, "runAsNonRoot": True}}})
    pod = manifests(s)["pool-default"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True}


AMD_ALL = {"enabled": True, "vendor": "amd", "mountAll": True}


@pytest.mark.parametrize(
    ("reason", "pools", "want"),
    [
        ("a Namespace of ours enforces what its pods meet", [{"name": "a", "createNamespace": True}], "restricted"),
        (
            "AMD's device files need privilege: the namespace allows it",
            [{"name": "a", "createNamespace": True, "gpu": AMD_ALL}],
            "privileged",
        ),
        (
            "one privileged pool in the namespace decides, whichever pool asked for the Namespace",
            [{"name": "a", "createNamespace": True}, {"name": "b", "gpu": AMD_ALL}],
            "privileged",
        ),
        (
            "NVIDIA's mountAll goes through its runtime class, no privilege",
            [{"name": "a", "createNamespace": True, "gpu": {"enabled": True, "vendor": "nvidia", "mountAll": True}}],
            "restricted",
        ),
    ],
)
def test_created_namespaces_are_labelled_for_pod_security_admission(reason, pools, want):
    # Pools in the SuperLink's cluster stay in the claim's namespace: these are remote.
    remote = {"replicas": 1, "namespace": "fl", "providerConfigRef": {"name": "spoke"}}
    s = spec(BASE, superlink__externalAddress="fleet.example.com", supernodes__pools=[{**remote, **p} for p in pools])
    namespaces = [m for m in manifests(s).values() if m["kind"] == "Namespace"]
    assert len(namespaces) == 1, reason
    labels = namespaces[0]["metadata"]["labels"]
    assert labels == {f"pod-security.kubernetes.io/{m}": want for m in ("audit", "enforce", "warn")}, reason


def test_the_judge_knows_the_newest_minor():
    """The library clamps newer versions to the newest it knows: it must be the newest minor's.
    psscheck builds from the newest control plane's module (the Makefile), which pins it."""
    planes = sorted((p for p in (ROOT / "tools").glob("kube-1.*")), key=lambda p: int(p.name.split(".")[1]))
    go_mod = (planes[-1] / "go.mod").read_text()
    pinned = re.search(r"k8s.io/pod-security-admission => k8s.io/pod-security-admission v0\.(\d+)\.", go_mod)
    assert pinned and f"1.{pinned.group(1)}" == KUBERNETES_MINORS[-1], planes[-1]
