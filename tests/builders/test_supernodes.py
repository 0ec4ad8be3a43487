"""SuperNode pool builders: workloads, args, env, GPUs, pod templates, volumes."""

import random

import pytest
import yaml

from function.builders import pods
from support.helpers import BASE, PROCESS, container, manifests, pod, pool, spec, without_hardening
from support.properties import shuffled

DS = spec(BASE, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])

# Every SuperNode gives up after a while without its SuperLink, so the kubelet restarts it (supernodes.py).
GIVE_UP = "--max-wait-time=300"


def pool_labels(name):
    return {
        "app.kubernetes.io/component": f"pool-{name}",
        "app.kubernetes.io/instance": "fed",
        "app.kubernetes.io/managed-by": "flower-operator",
        "app.kubernetes.io/name": "supernode",
        "flower.flwr.ai/pool": name,
    }


@pytest.mark.parametrize(("s", "kind", "pool_name"), [(BASE, "StatefulSet", "default"), (DS, "DaemonSet", "edge")])
def test_workload_kind_name_labels(s, kind, pool_name):
    w = manifests(s)[f"pool-{pool_name}"]
    assert w["kind"] == kind
    assert w["metadata"] == {
        "name": f"fed-supernode-{pool_name}",
        "namespace": "team-a",
        "labels": pool_labels(pool_name),
    }
    assert w["spec"]["selector"] == {"matchLabels": pool_labels(pool_name)}
    assert w["spec"]["template"]["metadata"]["labels"] == pool_labels(pool_name)
    assert ("replicas" in w["spec"]) == (kind == "StatefulSet")


def test_one_workload_per_pool():
    s = spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "b", "replicas": 3}])
    out = manifests(s)
    assert sorted(k for k in out if k.startswith("pool-")) == ["pool-a", "pool-b"]
    assert out["pool-b"]["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("s", "expected", "reason"),
    [
        (
            BASE,
            ["--superlink=fed-superlink.team-a.svc:9092", "--isolation=subprocess", "--insecure", GIVE_UP],
            "the defaults: the SuperLink's Service, subprocess isolation, --insecure without TLS, a bound on waiting",
        ),
        (
            spec(BASE, insecure=False),
            ["--superlink=fed-superlink.team-a.svc:9092", "--isolation=subprocess", GIVE_UP],
            "insecure: false drops --insecure alone",
        ),
        (
            spec(BASE, superlink__service={"ports": {"grpc": 30092}}),
            ["--superlink=fed-superlink.team-a.svc:30092", "--isolation=subprocess", "--insecure", GIVE_UP],
            "the operator dialled 9092 whatever the Service said; we dial the configured port",
        ),
        (
            PROCESS,
            [
                "--superlink=fed-superlink.team-a.svc:9092",
                "--isolation=process",
                "--insecure",
                "--clientappio-api-address=0.0.0.0:9094",
                GIVE_UP,
            ],
            "process isolation: the SuperNode serves the ClientApp's SuperExec sidecar",
        ),
        (
            pool(BASE, extraArgs=["--max-retries", "5"]),
            [
                "--superlink=fed-superlink.team-a.svc:9092",
                "--isolation=subprocess",
                "--insecure",
                GIVE_UP,
                "--max-retries",
                "5",
            ],
            "the user's arguments come last: theirs win over ours (--max-wait-time too)",
        ),
    ],
)
def test_supernode_args(s, expected, reason):
    assert container(s)["args"] == expected, reason


def test_supernode_has_no_shell():
    s = pool(BASE, nodeConfig={"partition-id": "{index}", "name": "c_{node}"})
    c = container(s)
    assert "command" not in c
    assert c["args"][-2] == "--node-config"


def test_image_override_and_default():
    s = spec(
        BASE,
        supernodes__pools=[
            {"name": "a", "replicas": 1, "images": {"supernode": "mine:1"}},
            {"name": "b", "replicas": 1},
        ],
    )
    assert container(s, resource="pool-a")["image"] == "mine:1"
    assert container(s, resource="pool-b")["image"] == "flwr/supernode:1.25.0"


def test_superexec_clientapp_sidecar():
    s = pool(
        PROCESS,
        superexecResources={"limits": {"memory": "1Gi"}},
        env=[{"name": "A", "value": "1"}],
    )
    c = container(s, "superexec-clientapp")
    assert c["image"] == "flwr/superexec:1.25.0"
    assert c["args"] == ["--plugin-type=clientapp", "--appio-api-address=localhost:9094", "--insecure"]
    assert c["resources"] == {"limits": {"memory": "1Gi"}}
    assert c["env"] == [{"name": "A", "value": "1"}, pods.TELEMETRY]
    assert [c["name"] for c in pod(s)["containers"]] == ["supernode", "superexec-clientapp"]
    assert [c["name"] for c in pod(BASE)["containers"]] == ["supernode"]


def test_env_merge_pool_wins_and_order_is_stable():
    s = spec(
        BASE,
        supernodes__env=[
            {"name": "A", "value": "base"},
            {"name": "B", "value": "base"},
            {"name": "C", "value": "base"},
        ],
    )
    s = pool(s, env=[{"name": "D", "value": "pool"}, {"name": "B", "value": "pool"}])
    assert container(s)["env"] == [
        {"name": "A", "value": "base"},
        {"name": "B", "value": "pool"},
        {"name": "C", "value": "base"},
        {"name": "D", "value": "pool"},
        pods.TELEMETRY,
    ]


@pytest.mark.parametrize(
    ("s", "where", "resource", "count", "reason"),
    [
        (
            pool(BASE, gpu={"enabled": True, "vendor": "nvidia"}),
            "supernode",
            "nvidia.com/gpu",
            "1",
            "NVIDIA's device plugin resource, one GPU by default",
        ),
        (
            pool(BASE, gpu={"enabled": True, "vendor": "amd", "count": 2}),
            "supernode",
            "amd.com/gpu",
            "2",
            "AMD's device plugin resource, and a count of two",
        ),
        (
            pool(BASE, gpu={"enabled": True}),
            "supernode",
            "nvidia.com/gpu",
            "1",
            "no vendor named: NVIDIA's resource, the default",
        ),
        (
            pool(BASE, gpu={"enabled": True, "resourceName": "gpu.intel.com/i915"}),
            "supernode",
            "gpu.intel.com/i915",
            "1",
            "a resource name given: any other device plugin's",
        ),
        (
            pool(PROCESS, gpu={"enabled": True, "vendor": "nvidia"}),
            "superexec-clientapp",
            "nvidia.com/gpu",
            "1",
            "in process mode the ClientApp runs in the sidecar, so the GPU goes there",
        ),
    ],
)
def test_gpu_requests_on_the_right_container(s, where, resource, count, reason):
    c = container(s, where)
    assert c["resources"]["limits"][resource] == count, reason
    assert c["resources"]["requests"][resource] == count, reason
    others = [x for x in pod(s)["containers"] if x["name"] != where]
    assert all(resource not in (x.get("resources") or {}).get("limits", {}) for x in others), reason


def test_gpu_disabled_requests_no_gpu():
    # Only the default requests every Flower container gets (function/builders/pods.py).
    assert container(pool(BASE, gpu={"enabled": False, "vendor": "nvidia"}))["resources"] == {
        "requests": pods.FLOWER_REQUESTS
    }


def test_gpu_keeps_user_resources():
    s = pool(BASE, supernodeResources={"limits": {"cpu": "2"}}, gpu={"enabled": True})
    assert container(s)["resources"] == {
        "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }


def test_mount_all_nvidia():
    s = pool(DS, gpu={"enabled": True, "vendor": "nvidia", "mountAll": True})
    p = pod(s, "pool-edge")
    c = container(s, resource="pool-edge")
    assert p["runtimeClassName"] == "nvidia"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    # Every GPU of the node through the runtime, none requested from the scheduler.
    assert c["resources"] == {"requests": pods.FLOWER_REQUESTS}


def test_mount_all_amd_process_mode():
    base = spec(
        PROCESS, mode="DaemonSet", supernodes__pools=[{"name": "edge", "images": {"superexecClientApp": "x:1"}}]
    )
    s = pool(
        base,
        gpu={"enabled": True, "vendor": "amd", "mountAll": True},
        volumeMounts=[{"name": "data", "mountPath": "/d"}],
    )
    p = pod(s, "pool-edge")
    assert [v["name"] for v in p["volumes"]] == ["dev-kfd", "dev-dri"]
    assert p["volumes"][0]["hostPath"] == {"path": "/dev/kfd", "type": "CharDevice"}
    for name in ("supernode", "superexec-clientapp"):
        c = container(s, name, "pool-edge")
        assert c["securityContext"] == {"privileged": True}
        assert {"name": "ROCR_VISIBLE_DEVICES", "value": "all"} in c["env"]
        assert [m["name"] for m in c["volumeMounts"]] == ["dev-kfd", "dev-dri", "data"]


def test_pod_template_merge_precedence():
    s = pool(
        BASE,
        volumes=[{"name": "data", "emptyDir": {}}],
        podTemplate={
            "metadata": {"labels": {"flower.flwr.ai/pool": "hijack", "team": "ml"}},
            "spec": {
                "nodeSelector": {"gpu": "yes"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {}},
                "serviceAccountName": "runner",
                "volumes": [{"name": "data", "hostPath": {"path": "/x"}}, {"name": "extra", "emptyDir": {}}],
                "imagePullSecrets": [{"name": "regcred"}],
                "terminationGracePeriodSeconds": 5,
            },
        },
    )
    w = manifests(s)["pool-default"]["spec"]["template"]
    assert w["metadata"]["labels"] == {**pool_labels("default"), "team": "ml"}
    assert w["spec"]["serviceAccountName"] == "runner"
    p = without_hardening(w["spec"])
    assert p["nodeSelector"] == {"gpu": "yes"}
    assert p["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert p["terminationGracePeriodSeconds"] == 5
    assert p["imagePullSecrets"] == [{"name": "regcred"}]
    # The spec's own volume wins over a podTemplate volume of the same name.
    assert p["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "extra", "emptyDir": {}}]
    assert [c["name"] for c in p["containers"]] == ["supernode"]


def test_pool_pod_template_runtime_class_overrides_gpu():
    s = pool(
        DS,
        gpu={"enabled": True, "vendor": "nvidia", "mountAll": True},
        podTemplate={"spec": {"runtimeClassName": "nvidia-cdi"}},
    )
    assert pod(s, "pool-edge")["runtimeClassName"] == "nvidia-cdi"


def test_volumes_mounts_and_claim_templates():
    s = pool(
        PROCESS,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        superexecVolumeMounts=[{"name": "scratch", "mountPath": "/app/scratch"}],
        volumeClaimTemplates=[{"metadata": {"name": "scratch"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
    )
    w = manifests(s)["pool-default"]
    assert w["spec"]["volumeClaimTemplates"] == [
        {"metadata": {"name": "scratch"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    ]
    assert container(s)["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert container(s, "superexec-clientapp")["volumeMounts"] == [{"name": "scratch", "mountPath": "/app/scratch"}]
    assert pod(s)["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]


def test_output_does_not_depend_on_map_order():
    s = pool(
        PROCESS,
        nodeConfig={"b": "{index}", "a": "x_{pool}", "c": 3, "d": "true", "e": "{node}"},
        env=[{"name": "Z", "value": "1"}, {"name": "A", "value": "2"}],
        supernodeResources={"limits": {"memory": "1Gi", "cpu": "1"}, "requests": {"cpu": "1"}},
        podTemplate={"metadata": {"labels": {"z": "1", "a": "2"}}, "spec": {"nodeSelector": {"z": "1", "a": "2"}}},
        gpu={"enabled": True, "vendor": "amd"},
    )
    s["superlink"]["service"] = {"labels": {"y": "1", "b": "2"}, "annotations": {"q": "1", "c": "2"}}
    reference = yaml.safe_dump(manifests(s), sort_keys=True)
    rng = random.Random(7)  # noqa: S311 - a fixed shuffle order, not a secret
    for _ in range(20):
        assert yaml.safe_dump(manifests(shuffled(s, rng)), sort_keys=True) == reference
