"""The SuperLink StatefulSet and Service builders."""

import pytest

from function.api.refusals import parse
from function.builders import pods, superlink
from support.helpers import BASE, PROCESS, container, manifests, pod, spec

MANAGED = {
    "app.kubernetes.io/component": "superlink",
    "app.kubernetes.io/instance": "fed",
    "app.kubernetes.io/managed-by": "flower-operator",
    "app.kubernetes.io/name": "superlink",
}


def test_statefulset_shape_names_and_labels():
    sts = manifests(BASE)["superlink"]
    assert sts["kind"] == "StatefulSet"
    assert sts["metadata"] == {"name": "fed-superlink", "namespace": "team-a", "labels": MANAGED}
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["selector"] == {"matchLabels": MANAGED}
    assert sts["spec"]["template"]["metadata"]["labels"] == MANAGED


DISABLE_INSTALL = "--disable-runtime-dependency-installation"
LOOPBACK_1_25 = [
    "--control-api-address=127.0.0.1:9093",
    "--serverappio-api-address=127.0.0.1:9091",
    "--simulationio-api-address=127.0.0.1:9096",
]


@pytest.mark.parametrize(
    ("base", "insecure", "changes", "args", "ports", "containers", "reason"),
    [
        (
            BASE,
            True,
            {},
            ["--isolation=subprocess", *LOOPBACK_1_25, "--insecure"],
            [9092],
            ["superlink"],
            "1.25 without TLS: Control, ServerAppIO and SimulationIO on the loopback, Fleet alone for other pods",
        ),
        (
            BASE,
            False,
            {},
            ["--isolation=subprocess", *LOOPBACK_1_25],
            [9092],
            ["superlink"],
            "insecure: false drops --insecure alone",
        ),
        (
            PROCESS,
            True,
            {},
            ["--isolation=process", *LOOPBACK_1_25, "--insecure"],
            [9092],
            ["superlink", "superexec-serverapp"],
            "process isolation: the ServerApp runs in a SuperExec sidecar",
        ),
        (
            BASE,
            True,
            {"superlink__inClusterControlAPI": True},
            [
                "--isolation=subprocess",
                "--control-api-address=0.0.0.0:9093",
                *LOOPBACK_1_25[1:],
                "--insecure",
            ],
            [9092, 9093],
            ["superlink"],
            "the Control API opened to the cluster: on every address, and on the Service",
        ),
        (
            BASE,
            True,
            {"superlink__image": "flwr/superlink:1.41.0", "supernodes__image": "flwr/supernode:1.41.0"},
            ["--isolation=subprocess", "--host=127.0.0.1", "--port=9093", "--insecure", DISABLE_INSTALL],
            None,
            ["superlink", "fleet-proxy"],
            "1.41: one HTTP listener on the loopback behind the Fleet API proxy; apps install nothing at run time",
        ),
    ],
)
def test_superlink_args_ports_and_sidecar(base, insecure, changes, args, ports, containers, reason):
    s = spec(base, insecure=insecure, **changes)
    c = container(s, "superlink", "superlink")
    assert c["args"] == args, reason
    assert [p["containerPort"] for p in c["ports"]] if ports else "ports" not in c, f"what other pods reach: {reason}"
    assert [c["name"] for c in pod(s, "superlink")["containers"]] == containers, reason


def test_superexec_serverapp_sidecar():
    s = spec(
        PROCESS,
        insecure=False,
        superlink__superexecResources={"limits": {"cpu": "1"}},
        superlink__env=[{"name": "A", "value": "1"}],
        superlink__volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    c = container(s, "superexec-serverapp", "superlink")
    assert c["image"] == "flwr/superexec:1.25.0"
    # The AppIO link stays plain gRPC inside the pod, even with insecure false.
    assert c["args"] == ["--plugin-type=serverapp", "--appio-api-address=localhost:9091", "--insecure"]
    assert c["resources"] == {"limits": {"cpu": "1"}}
    assert c["env"] == [{"name": "A", "value": "1"}, pods.TELEMETRY]
    assert c["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_superexec_volume_mounts_override_main_mounts():
    s = spec(
        PROCESS,
        superlink__volumeMounts=[{"name": "data", "mountPath": "/data"}],
        superlink__superexecVolumeMounts=[{"name": "data", "mountPath": "/app/data"}],
    )
    assert container(s, "superexec-serverapp", "superlink")["volumeMounts"] == [
        {"name": "data", "mountPath": "/app/data"}
    ]
    assert container(s, "superlink", "superlink")["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_superlink_resources_env_extra_args_volumes_and_claims():
    s = spec(
        BASE,
        superlink__resources={"requests": {"cpu": "100m"}},
        superlink__env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        superlink__extraArgs=["--database", "/state/db.sqlite"],
        superlink__volumes=[{"name": "cfg", "configMap": {"name": "c"}}],
        superlink__volumeClaimTemplates=[
            {"metadata": {"name": "state", "labels": {"a": "b"}}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        ],
    )
    sts = manifests(s)["superlink"]
    c = container(s, "superlink", "superlink")
    assert c["resources"] == {"requests": {"cpu": "100m"}}
    assert [e["name"] for e in c["env"]] == ["A", "B", pods.TELEMETRY["name"]]
    assert c["args"][-2:] == ["--database", "/state/db.sqlite"]
    assert pod(s, "superlink")["volumes"] == [{"name": "cfg", "configMap": {"name": "c"}}]
    assert sts["spec"]["volumeClaimTemplates"] == [
        {"metadata": {"name": "state", "labels": {"a": "b"}}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    ]


def test_superlink_pod_template_merge():
    s = spec(
        BASE,
        superlink__podTemplate={
            "metadata": {"labels": {"team": "ml", "app.kubernetes.io/name": "hijack"}, "annotations": {"x": "y"}},
            "spec": {"nodeSelector": {"role": "control"}, "priorityClassName": "high"},
        },
    )
    template = manifests(s)["superlink"]["spec"]["template"]
    assert template["metadata"]["labels"] == {**MANAGED, "team": "ml"}
    assert template["metadata"]["annotations"] == {"x": "y"}
    assert template["spec"]["nodeSelector"] == {"role": "control"}
    assert template["spec"]["priorityClassName"] == "high"


@pytest.mark.parametrize(
    ("reason", "base", "changes", "expected"),
    [
        ("the Fleet API alone", BASE, {}, [("fleet", 9092, 9092)]),
        ("process mode: ServerAppIO stays in the pod", PROCESS, {"ports": {"serverAppIO": 19091}},
         [("fleet", 9092, 9092)]),
        ("from 1.40 the Fleet port leads to the proxy", BASE,
         {"image": "flwr/superlink:1.41.0", "ports": {"grpc": 30092}}, [("fleet", 30092, 9099)]),
        ("Control opened in the cluster, on its own port", BASE,
         {"inClusterControlAPI": True, "ports": {"grpc": 30092, "extra": 30093}},
         [("fleet", 30092, 9092), ("control", 30093, 9093)]),
    ],
)  # fmt: skip
def test_service_ports_map_to_flower_ports(reason, base, changes, expected):
    link = {k: v for k, v in changes.items() if k != "ports"}
    s = spec(
        base, superlink__service={"ports": changes.get("ports", {})}, **{f"superlink__{k}": v for k, v in link.items()}
    )
    if "image" in link:
        s = spec(s, supernodes__image=link["image"].replace("superlink", "supernode"))
    svc = manifests(s)["superlink-service"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == expected, reason


@pytest.mark.parametrize(
    ("service_type", "reason"),
    [
        ("ClusterIP", "the default: reached from the cluster alone"),
        ("NodePort", "a port on every node, for pools that reach the nodes"),
        ("LoadBalancer", "an external address, for pools in other clusters"),
    ],
)
def test_service_type_labels_annotations_and_selector(service_type, reason):
    s = spec(
        BASE,
        superlink__service={
            "type": service_type,
            "labels": {"team": "ml", "app.kubernetes.io/instance": "hijack"},
            "annotations": {"a": "b"},
        },
    )
    svc = manifests(s)["superlink-service"]
    assert svc["metadata"]["name"] == "fed-superlink"
    assert svc["spec"]["type"] == service_type, reason
    # Managed labels win over user labels; the selector has managed labels only.
    assert svc["metadata"]["labels"] == {**MANAGED, "team": "ml"}
    assert svc["metadata"]["annotations"] == {"a": "b"}
    assert svc["spec"]["selector"] == MANAGED


V141 = {"superlink__image": "flwr/superlink:1.41.0", "supernodes__image": "flwr/supernode:1.41.0"}


@pytest.mark.parametrize(
    ("reason", "changes", "container_name", "want"),
    [
        ("1.25: the gRPC health server, which is all there is", {}, "superlink", {"grpc": {"port": 9095}}),
        ("1.37: the HTTP listener is on the loopback, where the kubelet cannot ask",
         {"superlink__image": "flwr/superlink:1.37.0", "supernodes__image": "flwr/supernode:1.37.0"},
         "superlink", {"grpc": {"port": 9095}}),
        ("1.41: the proxy passes GET /health on to the SuperLink", V141, "fleet-proxy",
         {"httpGet": {"path": "/health", "port": 9099, "scheme": "HTTP"}}),
        ("1.41 with TLS: over HTTPS", {**V141, "tls": {"secretName": "superlink-tls"}}, "fleet-proxy",
         {"httpGet": {"path": "/health", "port": 9099, "scheme": "HTTPS"}}),
        ("1.41, Control opened: the listener's own /health", {**V141, "superlink__inClusterControlAPI": True},
         "superlink", {"httpGet": {"path": "/health", "port": 9093, "scheme": "HTTP"}}),
    ],
)  # fmt: skip
def test_superlink_readiness(reason, changes, container_name, want):
    containers = manifests(spec(BASE, **changes))["superlink"]["spec"]["template"]["spec"]["containers"]
    c = next(c for c in containers if c["name"] == container_name)
    probe = {k: v for k, v in c["readinessProbe"].items() if k in ("grpc", "httpGet")}
    assert probe == want, reason
    # Liveness stays on the gRPC health server: a static SERVING says the process lives.
    link = next(c for c in containers if c["name"] == "superlink")
    assert link["livenessProbe"]["grpc"] == {"port": 9095}, reason


TLS = {"tls": {"secretName": "superlink-tls"}}


@pytest.mark.parametrize(
    ("reason", "changes", "policy", "ranges"),
    [
        ("ClusterIP: nothing external", {}, None, None),
        ("NodePort: Kubernetes' Cluster, as nodeAddress may name any node", {"type": "NodePort"}, None, None),
        ("NodePort, Local asked", {"type": "NodePort", "externalTrafficPolicy": "Local"}, "Local", None),
        ("LoadBalancer: sources kept for the NetworkPolicy", {"type": "LoadBalancer"}, "Local", None),
        (
            "LoadBalancer: admits what the NetworkPolicy admits",
            {"type": "LoadBalancer", "fleetCIDRs": ["192.0.2.0/24"]},
            "Local",
            ["192.0.2.0/24"],
        ),
        (
            "LoadBalancer: its own ranges win",
            {"type": "LoadBalancer", "fleetCIDRs": ["192.0.2.0/24"], "loadBalancerSourceRanges": ["198.51.100.0/24"]},
            "Local",
            ["198.51.100.0/24"],
        ),
        (
            "LoadBalancer: Cluster, asked for",
            {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster"},
            "Cluster",
            None,
        ),
    ],
)
def test_external_service_keeps_sources_and_admits_what_the_policy_admits(reason, changes, policy, ranges):
    fleet = changes.pop("fleetCIDRs", None)
    s = spec(BASE, superlink__service=changes)
    if fleet:
        s["networkPolicy"] = {"fleetCIDRs": fleet}
    svc = manifests(s)["superlink-service"]["spec"]
    assert svc.get("externalTrafficPolicy") == policy, reason
    assert svc.get("loadBalancerSourceRanges") == ranges, reason


@pytest.mark.parametrize(
    ("reason", "s", "warned"),
    [
        ("in-cluster only", spec(BASE, **TLS), []),
        ("NodePort without TLS", spec(BASE, superlink__service={"type": "NodePort"}), ["without TLS"]),
        (
            "LoadBalancer with TLS, open to all",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, **TLS),
            ["every address that reaches it"],
        ),
        (
            "LoadBalancer without TLS, open to all",
            spec(BASE, superlink__service={"type": "LoadBalancer"}),
            ["without TLS", "every address that reaches it"],
        ),
        (
            "LoadBalancer with TLS, narrowed",
            spec(
                BASE, superlink__service={"type": "LoadBalancer"}, networkPolicy={"fleetCIDRs": ["192.0.2.0/24"]}, **TLS
            ),
            [],
        ),
        (
            "fleetCIDRs of the whole internet",
            spec(BASE, superlink__service={"type": "LoadBalancer"}, networkPolicy={"fleetCIDRs": ["0.0.0.0/0"]}, **TLS),
            ["every address that reaches it", "fleetCIDRs admits every address"],
        ),
        (
            "source ranges of the whole internet",
            spec(BASE, superlink__service={"type": "LoadBalancer", "loadBalancerSourceRanges": ["::/0"]}, **TLS),
            ["every address that reaches it"],
        ),
    ],
)
def test_exposure_is_warned(reason, s, warned):
    warnings = superlink.exposure_warnings(parse(s))
    assert len(warnings) == len(warned), (reason, warnings)
    assert all(w in text for w, text in zip(warned, warnings, strict=True)), (reason, warnings)
