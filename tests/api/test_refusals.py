"""Bad input: every error names the field, and the rules match the XRD's."""

import pytest

from function.api.refusals import SpecError, parse
from function.composition import compose
from function.federation import read
from support.helpers import BASE, PROCESS, pool, spec, xr

DS = spec(BASE, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])


def errors_of(s):
    with pytest.raises(SpecError) as err:
        parse(s)
    return err.value.errors


@pytest.mark.parametrize(
    ("s", "field", "message"),
    [
        (spec(BASE, mode="Deployment"), "spec.mode", "'DaemonSet' or 'StatefulSet'"),
        (spec(BASE, isolationMode="thread"), "spec.isolationMode", "'process' or 'subprocess'"),
        (spec(BASE, superlink={}), "spec.superlink.image", "required unless spec.version is set"),
        (spec(BASE, superlink__image=""), "spec.superlink.image", "at least 1 character"),
        (spec(BASE, supernodes__pools=[]), "spec.supernodes.pools", "at least 1 item"),
        (
            spec(BASE, supernodes__pools=[{"name": f"p{i}", "replicas": 1} for i in range(129)]),
            "spec.supernodes.pools",
            "at most 128",
        ),
        (pool(BASE, name="Bad_Name"), "spec.supernodes.pools[0].name", "pattern"),
        (pool(BASE, replicas=0), "spec.supernodes.pools[0].replicas", "greater than or equal to 1"),
        (pool(BASE, gpu={"count": 0}), "spec.supernodes.pools[0].gpu.count", "greater than or equal to 1"),
        (pool(BASE, gpu={"vendor": "intel"}), "spec.supernodes.pools[0].gpu.vendor", "'nvidia' or 'amd'"),
        (spec(BASE, superlink__service={"type": "ExternalName"}), "spec.superlink.service.type", "'ClusterIP'"),
        (spec(BASE, superlink__service={"ports": {"grpc": 70000}}), "spec.superlink.service.ports.grpc", "65535"),
        (spec(BASE, superlink__imagee="typo"), "spec.superlink.imagee", "Extra inputs are not permitted"),
        # Strict types, as the XRD: lax pydantic took "3" for 3 (tests/product/test_properties.py found it).
        (pool(BASE, replicas="3"), "spec.supernodes.pools[0].replicas", "valid integer"),
        (spec(BASE, insecure="true"), "spec.insecure", "valid boolean"),
        # Label syntax: Crossplane cannot list ProviderConfigs by a bad selector, and says so in no field of ours.
        (
            pool(BASE, clusterSelector={"matchLabels": {"site": "eu west"}}),
            "spec.supernodes.pools[0].clusterSelector.matchLabels.site",
            "pattern",
        ),
        (
            pool(BASE, clusterSelector={"matchLabels": {"bad key": "eu"}}),
            "spec.supernodes.pools[0].clusterSelector.matchLabels",
            "the key 'bad key' is not a Kubernetes label or annotation key",
        ),
        # Names and keys the API server checks only when an Object is applied, where the error
        # shows in the Object's status, not the Federation's.
        (
            pool(BASE, caSecretRef={"name": "Flower_CA"}),
            "spec.supernodes.pools[0].caSecretRef.name",
            "pattern",
        ),
        (
            pool(BASE, authKeySecretRef={"name": "key", "key": "private key"}),
            "spec.supernodes.pools[0].authKeySecretRef.key",
            "pattern",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "data.v1"}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].metadata.name",
            "pattern",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "d", "annotations": {"a b": "x"}}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].metadata.annotations",
            "the key 'a b' is not a Kubernetes label or annotation key",
        ),
        (pool(BASE, images={"supernode": "flwr/ supernode"}), "spec.supernodes.pools[0].images.supernode", "pattern"),
        (spec(BASE, superlink__image="flwr/superlink:1.25.0 "), "spec.superlink.image", "pattern"),
        (
            spec(BASE, superlink__service={"labels": {"team": "a b"}}),
            "spec.superlink.service.labels.team",
            "pattern",
        ),
        (
            spec(BASE, superlink__service={"labels": {"-team": "a"}}),
            "spec.superlink.service.labels",
            "the key '-team' is not a Kubernetes label or annotation key",
        ),
        (spec(BASE, providerConfigRef={"name": "Hub"}), "spec.providerConfigRef.name", "pattern"),
        (spec(BASE, imagePullSecrets=[{"name": "reg cred"}]), "spec.imagePullSecrets[0].name", "pattern"),
        (pool(BASE, gpu={"resourceName": "gpus please"}), "spec.supernodes.pools[0].gpu.resourceName", "pattern"),
        (
            pool(BASE, nodeConfig={"a": [1]}),
            "spec.supernodes.pools[0].nodeConfig.a",
            "must be a string, integer, number or boolean, not list",
        ),
        # The operator's rules, with its messages.
        (
            pool(DS, replicas=2),
            "spec.supernodes.pools[0].replicas",
            "replicas must not be set for pools when mode is DaemonSet",
        ),
        (
            pool(BASE, replicas=None),
            "spec.supernodes.pools[0].replicas",
            "replicas must be set (>=1) for every pool when mode is StatefulSet",
        ),
        (
            spec(PROCESS, superlink__superexecImage=None),
            "spec.superlink.superexecImage",
            "spec.superlink.superexecImage is required when isolationMode=process",
        ),
        (
            spec(BASE, superlink__superexecImage="x:1"),
            "spec.superlink.superexecImage",
            "spec.superlink.superexecImage must be empty when isolationMode=subprocess",
        ),
        (
            pool(PROCESS, images={}),
            "spec.supernodes.pools[0].images.superexecClientApp",
            "images.superexecClientApp is required when isolationMode=process",
        ),
        (
            pool(BASE, images={"superexecClientApp": "x:1"}),
            "spec.supernodes.pools[0].images.superexecClientApp",
            "images.superexecClientApp must be empty when isolationMode=subprocess",
        ),
        (
            pool(DS, gpu={"enabled": True, "mountAll": True}),
            "spec.supernodes.pools[0].gpu.vendor",
            "gpu.vendor is required when gpu.mountAll=true",
        ),
        # Ours.
        (
            spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "a", "replicas": 1}]),
            "spec.supernodes.pools[1].name",
            "must be unique",
        ),
        (
            pool(DS, nodeConfig={"partition-id": "{index}"}),
            "spec.supernodes.pools[0].nodeConfig.partition-id",
            "must not use {index} or {replicas} when mode is DaemonSet",
        ),
        (
            pool(DS, nodeConfig={"n": "of-{replicas}"}),
            "spec.supernodes.pools[0].nodeConfig.n",
            "must not use {index} or {replicas} when mode is DaemonSet",
        ),
        (pool(BASE, nodeConfig={"bad key": 1}), "spec.supernodes.pools[0].nodeConfig.bad key", "keys are letters"),
        (pool(BASE, nodeConfig={"q": 'it\'s "quoted"'}), "spec.supernodes.pools[0].nodeConfig.q", "cannot hold both"),
        (pool(BASE, nodeConfig={"a": 1, "a.b": 2}), "spec.supernodes.pools[0].nodeConfig.a.b", "clashes with key 'a'"),
        (pool(BASE, nodeConfig={"x": float("inf")}), "spec.supernodes.pools[0].nodeConfig.x", "finite"),
        (
            pool(DS, volumeClaimTemplates=[{"metadata": {"name": "v"}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates",
            "need mode StatefulSet",
        ),
        # Kubernetes-typed fields, against the official schema.
        (
            pool(BASE, supernodeResources={"limit": {"cpu": "1"}}),
            "spec.supernodes.pools[0].supernodeResources",
            "unknown field",
        ),
        (spec(BASE, superlink__resources={"limits": {"cpu": True}}), "spec.superlink.resources.limits.cpu", "True"),
        # Any string passes the published schema; Kubernetes refuses the workload later.
        (
            pool(BASE, supernodeResources={"requests": {"cpu": "lots"}}),
            "spec.supernodes.pools[0].supernodeResources.requests.cpu",
            "'lots' is not a Kubernetes quantity",
        ),
        # GB is no suffix Kubernetes knows (G or Gi are).
        (
            spec(BASE, superlink__resources={"limits": {"memory": "1.5GB"}}),
            "spec.superlink.resources.limits.memory",
            "'1.5GB' is not a Kubernetes quantity",
        ),
        (spec(BASE, supernodes__env=[{"value": "x"}]), "spec.supernodes.env[0]", "'name' is a required property"),
        (
            pool(BASE, env=[{"name": "A", "valueFrom": {"fieldRef": {}}}]),
            "spec.supernodes.pools[0].env[0].valueFrom.fieldRef",
            "'fieldPath' is a required property",
        ),
        (
            pool(BASE, volumes=[{"name": "v", "hostPath": {}}]),
            "spec.supernodes.pools[0].volumes[0].hostPath",
            "'path' is a required property",
        ),
        (
            pool(BASE, volumeMounts=[{"name": "v"}]),
            "spec.supernodes.pools[0].volumeMounts[0]",
            "'mountPath' is a required property",
        ),
        (
            spec(BASE, superlink__superexecVolumeMounts=[{"name": "v", "mountPath": 3}]),
            "spec.superlink.superexecVolumeMounts[0].mountPath",
            "3",
        ),
        (
            pool(BASE, podTemplate={"spec": {"nodeSelector": "gpu"}}),
            "spec.supernodes.pools[0].podTemplate.spec.nodeSelector",
            "'gpu'",
        ),
        (
            pool(BASE, podTemplate={"spec": {"containers": [{"name": "x", "image": "y"}]}}),
            "spec.supernodes.pools[0].podTemplate.spec.containers",
            "built by the function",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "v"}, "spec": {"accessModes": "RWO"}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].spec.accessModes",
            "'RWO'",
        ),
    ],
)
def test_bad_spec_names_the_field(s, field, message):
    errors = errors_of(s)
    assert any(f == field and message in m for f, m in errors), errors


@pytest.mark.parametrize("quantity", ["500m", "2", 2, 0.5, "1.5Gi", "100Ki", "1e3", "+1", ".5", "1E", "250M"])
def test_every_form_of_a_kubernetes_quantity_is_accepted(quantity):
    """The quantity check refuses only what Kubernetes' grammar does not parse."""
    parse(pool(BASE, supernodeResources={"requests": {"cpu": quantity}}))


def test_all_errors_are_reported_at_once():
    s = spec(PROCESS, superlink__superexecImage=None)
    s = pool(s, images={}, replicas=None)
    fields = {f for f, _ in errors_of(s)}
    assert fields == {
        "spec.superlink.superexecImage",
        "spec.supernodes.pools[0].images.superexecClientApp",
        "spec.supernodes.pools[0].replicas",
    }


def test_operator_podtemplate_with_empty_containers_is_accepted():
    # The operator's CRD made users write `containers: []`; such manifests still work.
    parse(pool(BASE, podTemplate={"spec": {"containers": [], "nodeSelector": {"a": "b"}}}))


@pytest.mark.parametrize(
    ("name", "s", "field", "message"),
    [
        ("f" * 45, BASE, "metadata.name", "at most 52"),
        ("fed", pool(BASE, name="p" * 40), "spec.supernodes.pools[0].name", "at most 52"),
        ("fed", pool(DS, name="p" * 50), "spec.supernodes.pools[0].name", "at most 63"),
        ("1fed", BASE, "metadata.name", "DNS-1035"),
    ],
)
def test_generated_names_are_checked(name, s, field, message):
    with pytest.raises(SpecError) as err:
        read.federation(xr(s, name=name))
    assert any(f == field and message in m for f, m in err.value.errors), err.value.errors


def test_name_at_the_statefulset_limit_is_accepted():
    fed = read.federation(xr(pool(BASE, name="p" * (52 - len("fed-supernode-")))))
    assert len(compose.manifests(fed)["pool-" + "p" * 38]["metadata"]["name"]) == 52


def test_claim_cannot_deploy_elsewhere():
    with pytest.raises(SpecError) as err:
        read.federation(xr(spec(BASE, namespace="kube-system"), namespace="team-a"))
    assert err.value.errors[0][0] == "spec.namespace"


def test_claim_namespace_and_bare_xr_namespace():
    assert read.federation(xr(BASE, namespace="team-b")).namespace == "team-b"
    bare = {"metadata": {"name": "solo"}, "spec": spec(BASE, namespace="flower")}
    assert (read.federation(bare).name, read.federation(bare).namespace) == ("solo", "flower")
    bare["spec"].pop("namespace")
    assert read.federation(bare).namespace == "default"


def test_crossplane_fields_in_the_xr_spec_are_ignored():
    s = spec(BASE, compositionRef={"name": "x"}, resourceRefs=[], claimRef={"name": "fed", "namespace": "team-a"})
    fed = read.federation({"metadata": {"name": "fed-abcde"}, "spec": s})
    assert (fed.name, fed.namespace) == ("fed", "team-a")


def test_node_config_bounds():
    errors = errors_of(pool(BASE, nodeConfig={f"k{i}": i for i in range(33)}))
    assert any(f == "spec.supernodes.pools[0].nodeConfig" and "at most 32" in m for f, m in errors), errors
    errors = errors_of(pool(BASE, nodeConfig={"long": "x" * 1025}))
    assert any(f == "spec.supernodes.pools[0].nodeConfig.long" and "at most 1024" in m for f, m in errors), errors
