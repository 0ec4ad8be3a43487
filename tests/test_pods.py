"""Pod hardening: the restricted Pod Security Standard, scratch space, probes,
ServiceAccounts and image pull settings."""

from __future__ import annotations

import pytest

from conftest import CLAIMS, EXAMPLES, load_all
from function import pods, render
from function.spec import HEALTH_PORTS
from helpers import BASE, PROCESS, manifests, pool, spec
from pss import violations

AMD_MOUNT_ALL = {"privileged", "hostPath", "volumeTypes", "allowPrivilegeEscalation", "capabilities"}


def example_pods():
    for example in [*CLAIMS, EXAMPLES / "xr.yaml", EXAMPLES / "v2" / "federation.yaml"]:
        docs, _ = render.render(load_all(example)[0], [])
        for doc in docs[1:]:
            manifest = doc["spec"]["forProvider"]["manifest"]
            template = (manifest.get("spec") or {}).get("template")
            if template:
                yield example.stem, manifest["metadata"]["name"], template["spec"]


def test_every_default_pod_is_restricted():
    found = list(example_pods())
    assert len(found) > 20
    for example, workload, pod in found:
        broken = violations(pod)
        if workload == "federation-all-gpus-supernode-amd-nodes":
            # The documented exception: AMD's device files need a privileged container.
            assert broken == AMD_MOUNT_ALL, workload
        else:
            assert broken == set(), f"{example}/{workload}: {broken}"


@pytest.mark.parametrize(
    ("change", "control"),
    [
        (lambda p: p.update(hostNetwork=True), "hostNamespaces"),
        (
            lambda p: p["containers"][0].update(securityContext={**pods.CONTAINER_SECURITY, "runAsNonRoot": False}),
            "runAsNonRoot",
        ),
        (lambda p: p["securityContext"].update(runAsUser=0), "runAsUser"),
        (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccomp"),
        (
            lambda p: p["containers"][0].update(
                securityContext={**pods.CONTAINER_SECURITY, "allowPrivilegeEscalation": True}
            ),
            "allowPrivilegeEscalation",
        ),
        (
            lambda p: p["containers"][0].update(
                securityContext={**pods.CONTAINER_SECURITY, "capabilities": {"add": ["NET_ADMIN"]}}
            ),
            "capabilities",
        ),
        (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
        (lambda p: p["containers"][0]["ports"].append({"containerPort": 80, "hostPort": 80}), "hostPorts"),
    ],
)
def test_the_checker_catches_each_control(change, control):
    pod = manifests(BASE)["pool-default"]["spec"]["template"]["spec"]
    pod = {
        **pod,
        "securityContext": dict(pod["securityContext"]),
        "volumes": list(pod["volumes"]),
        "containers": [dict(c, ports=list(c.get("ports", []))) for c in pod["containers"]],
    }
    assert violations(pod) == set()
    change(pod)
    assert control in violations(pod)


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
            assert [e["value"] for e in c["env"] if e["name"] == "UV_CACHE_DIR"] == want, (reason, c["name"])
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, (reason, c["name"])


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
    accounts = {k: v for k, v in out.items() if k.startswith("serviceaccount-")}
    assert set(accounts) == {"serviceaccount-default-team-a", "serviceaccount-spoke-fl"}
    assert accounts["serviceaccount-spoke-fl"]["metadata"]["namespace"] == "fl"
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    for name in ("superlink", "pool-a", "pool-b"):
        pod = out[name]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "fed-flower"
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
