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
    ("s", "field", "message", "reason"),
    [
        (
            spec(BASE, mode="Deployment"),
            "spec.mode",
            "'DaemonSet' or 'StatefulSet'",
            "Deployment is no mode: SuperNodes run as a DaemonSet or a StatefulSet",
        ),
        (
            spec(BASE, isolationMode="thread"),
            "spec.isolationMode",
            "'process' or 'subprocess'",
            "an isolation Flower does not run",
        ),
        (
            spec(BASE, superlink={}),
            "spec.superlink.image",
            "required unless spec.version is set",
            "neither an image nor spec.version names the SuperLink's release",
        ),
        (
            spec(BASE, superlink__image=""),
            "spec.superlink.image",
            "at least 1 character",
            "an empty image: a container no kubelet can pull",
        ),
        (
            spec(BASE, supernodes__pools=[]),
            "spec.supernodes.pools",
            "at least 1 item",
            "a Federation without a pool has no SuperNode",
        ),
        (
            spec(BASE, supernodes__pools=[{"name": f"p{i}", "replicas": 1} for i in range(129)]),
            "spec.supernodes.pools",
            "at most 128",
            "one pool over the cap the XRD publishes (MAX_POOLS)",
        ),
        (
            pool(BASE, name="Bad_Name"),
            "spec.supernodes.pools[0].name",
            "pattern",
            "a pool's name goes into object names: a DNS label only",
        ),
        (
            pool(BASE, replicas=0),
            "spec.supernodes.pools[0].replicas",
            "greater than or equal to 1",
            "a StatefulSet pool of no SuperNode",
        ),
        (
            pool(BASE, gpu={"count": 0}),
            "spec.supernodes.pools[0].gpu.count",
            "greater than or equal to 1",
            "a GPU pool that asks for no GPU",
        ),
        (
            pool(BASE, gpu={"vendor": "intel"}),
            "spec.supernodes.pools[0].gpu.vendor",
            "'nvidia' or 'amd'",
            "a vendor with no known resource name: other GPUs are named by gpu.resourceName",
        ),
        (
            spec(BASE, superlink__service={"type": "ExternalName"}),
            "spec.superlink.service.type",
            "'ClusterIP'",
            "an ExternalName Service is a DNS alias: it would not lead to the SuperLink",
        ),
        (
            spec(BASE, superlink__service={"ports": {"grpc": 70000}}),
            "spec.superlink.service.ports.grpc",
            "65535",
            "a port past 65535",
        ),
        (
            spec(BASE, superlink__imagee="typo"),
            "spec.superlink.imagee",
            "Extra inputs are not permitted",
            "a misspelt field is refused, not ignored",
        ),
        # Strict types, as the XRD: lax pydantic took "3" for 3 (tests/product/test_properties.py found it).
        (
            pool(BASE, replicas="3"),
            "spec.supernodes.pools[0].replicas",
            "valid integer",
            "an integer written as a string, which the XRD refuses",
        ),
        (
            spec(BASE, insecure="true"),
            "spec.insecure",
            "valid boolean",
            "a boolean written as a string, which the XRD refuses",
        ),
        # Label syntax: Crossplane cannot list ProviderConfigs by a bad selector, and says so in no field of ours.
        (
            pool(BASE, clusterSelector={"matchLabels": {"site": "eu west"}}),
            "spec.supernodes.pools[0].clusterSelector.matchLabels.site",
            "pattern",
            "a selector's label value with a space",
        ),
        (
            pool(BASE, clusterSelector={"matchLabels": {"bad key": "eu"}}),
            "spec.supernodes.pools[0].clusterSelector.matchLabels",
            "the key 'bad key' is not a Kubernetes label or annotation key",
            "a selector's label key with a space",
        ),
        # Names and keys the API server checks only when an Object is applied, where the error
        # shows in the Object's status, not the Federation's.
        (
            pool(BASE, caSecretRef={"name": "Flower_CA"}),
            "spec.supernodes.pools[0].caSecretRef.name",
            "pattern",
            "a CA Secret's name with an upper-case letter and '_'",
        ),
        (
            pool(BASE, authKeySecretRef={"name": "key", "key": "private key"}),
            "spec.supernodes.pools[0].authKeySecretRef.key",
            "pattern",
            "a Secret key with a space",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "data.v1"}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].metadata.name",
            "pattern",
            "a claim template's name is a volume's name in the pod: a DNS label, no dot",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "d", "annotations": {"a b": "x"}}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].metadata.annotations",
            "the key 'a b' is not a Kubernetes label or annotation key",
            "a claim template's annotation key with a space",
        ),
        (
            pool(BASE, images={"supernode": "flwr/ supernode"}),
            "spec.supernodes.pools[0].images.supernode",
            "pattern",
            "a pool's image with a space in it",
        ),
        (
            spec(BASE, superlink__image="flwr/superlink:1.25.0 "),
            "spec.superlink.image",
            "pattern",
            "a trailing space, unseen in YAML, after the SuperLink's image",
        ),
        (
            spec(BASE, superlink__service={"labels": {"team": "a b"}}),
            "spec.superlink.service.labels.team",
            "pattern",
            "a Service label value with a space",
        ),
        (
            spec(BASE, superlink__service={"labels": {"-team": "a"}}),
            "spec.superlink.service.labels",
            "the key '-team' is not a Kubernetes label or annotation key",
            "a Service label key that starts with '-'",
        ),
        (
            spec(BASE, providerConfigRef={"name": "Hub"}),
            "spec.providerConfigRef.name",
            "pattern",
            "a ProviderConfig's name with an upper-case letter",
        ),
        (
            spec(BASE, imagePullSecrets=[{"name": "reg cred"}]),
            "spec.imagePullSecrets[0].name",
            "pattern",
            "a pull Secret's name with a space",
        ),
        (
            pool(BASE, gpu={"resourceName": "gpus please"}),
            "spec.supernodes.pools[0].gpu.resourceName",
            "pattern",
            "a GPU resource name with a space",
        ),
        (
            pool(BASE, nodeConfig={"a": [1]}),
            "spec.supernodes.pools[0].nodeConfig.a",
            "must be a string, integer, number or boolean, not list",
            "a list where Flower's node config takes one value",
        ),
        # The operator's rules, with its messages.
        (
            pool(DS, replicas=2),
            "spec.supernodes.pools[0].replicas",
            "replicas must not be set for pools when mode is DaemonSet",
            "a DaemonSet runs one pod per node: no replica count",
        ),
        (
            pool(BASE, replicas=None),
            "spec.supernodes.pools[0].replicas",
            "replicas must be set (>=1) for every pool when mode is StatefulSet",
            "a StatefulSet pool must say how many SuperNodes",
        ),
        (
            spec(PROCESS, superlink__superexecImage=None),
            "spec.superlink.superexecImage",
            "spec.superlink.superexecImage is required when isolationMode=process",
            "process isolation runs the ServerApp in a SuperExec sidecar: its image is needed",
        ),
        (
            spec(BASE, superlink__superexecImage="x:1"),
            "spec.superlink.superexecImage",
            "spec.superlink.superexecImage must be empty when isolationMode=subprocess",
            "a SuperExec image that subprocess isolation would never run",
        ),
        (
            pool(PROCESS, images={}),
            "spec.supernodes.pools[0].images.superexecClientApp",
            "images.superexecClientApp is required when isolationMode=process",
            "process isolation runs each pool's ClientApp in a SuperExec sidecar: its image is needed",
        ),
        (
            pool(BASE, images={"superexecClientApp": "x:1"}),
            "spec.supernodes.pools[0].images.superexecClientApp",
            "images.superexecClientApp must be empty when isolationMode=subprocess",
            "a ClientApp image that subprocess isolation would never run",
        ),
        (
            pool(DS, gpu={"enabled": True, "mountAll": True}),
            "spec.supernodes.pools[0].gpu.vendor",
            "gpu.vendor is required when gpu.mountAll=true",
            "mounting every GPU of a node needs the vendor whose devices they are",
        ),
        # Ours.
        (
            spec(BASE, supernodes__pools=[{"name": "a", "replicas": 1}, {"name": "a", "replicas": 1}]),
            "spec.supernodes.pools[1].name",
            "must be unique",
            "two pools of one name would compose one workload twice",
        ),
        (
            pool(DS, nodeConfig={"partition-id": "{index}"}),
            "spec.supernodes.pools[0].nodeConfig.partition-id",
            "must not use {index} or {replicas} when mode is DaemonSet",
            "a DaemonSet's pods have no index to fill {index} with",
        ),
        (
            pool(DS, nodeConfig={"n": "of-{replicas}"}),
            "spec.supernodes.pools[0].nodeConfig.n",
            "must not use {index} or {replicas} when mode is DaemonSet",
            "nor a replica count for {replicas}, even inside a value",
        ),
        (
            pool(BASE, nodeConfig={"bad key": 1}),
            "spec.supernodes.pools[0].nodeConfig.bad key",
            "keys are letters",
            "Flower reads node config keys as TOML keys: no space",
        ),
        (
            pool(BASE, nodeConfig={"q": 'it\'s "quoted"'}),
            "spec.supernodes.pools[0].nodeConfig.q",
            "cannot hold both",
            "a value with both quotes: Flower's parser splits on them",
        ),
        (
            pool(BASE, nodeConfig={"a": 1, "a.b": 2}),
            "spec.supernodes.pools[0].nodeConfig.a.b",
            "clashes with key 'a'",
            "a dotted key under a key that holds a value: TOML cannot make 'a' both",
        ),
        (
            pool(BASE, nodeConfig={"x": float("inf")}),
            "spec.supernodes.pools[0].nodeConfig.x",
            "finite",
            "a float that is not finite (infinity) is refused, not written",
        ),
        (
            pool(DS, volumeClaimTemplates=[{"metadata": {"name": "v"}, "spec": {}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates",
            "need mode StatefulSet",
            "claim templates are a StatefulSet's: a DaemonSet has none",
        ),
        # Kubernetes-typed fields, against the official schema.
        (
            pool(BASE, supernodeResources={"limit": {"cpu": "1"}}),
            "spec.supernodes.pools[0].supernodeResources",
            "unknown field",
            "a misspelt key (limit) in a Kubernetes type, by its official schema",
        ),
        (
            spec(BASE, superlink__resources={"limits": {"cpu": True}}),
            "spec.superlink.resources.limits.cpu",
            "True",
            "a boolean where Kubernetes wants a quantity",
        ),
        (
            pool(BASE, supernodeResources={"requests": {"cpu": "lots"}}),
            "spec.supernodes.pools[0].supernodeResources.requests.cpu",
            "'lots' is not a Kubernetes quantity",
            "any string passes the published schema; Kubernetes would refuse the workload later",
        ),
        (
            spec(BASE, superlink__resources={"limits": {"memory": "1.5GB"}}),
            "spec.superlink.resources.limits.memory",
            "'1.5GB' is not a Kubernetes quantity",
            "GB is no suffix Kubernetes knows (G or Gi are)",
        ),
        (
            spec(BASE, supernodes__env=[{"value": "x"}]),
            "spec.supernodes.env[0]",
            "'name' is a required property",
            "an env var without a name",
        ),
        (
            pool(BASE, env=[{"name": "A", "valueFrom": {"fieldRef": {}}}]),
            "spec.supernodes.pools[0].env[0].valueFrom.fieldRef",
            "'fieldPath' is a required property",
            "a fieldRef without the field it refers to",
        ),
        (
            pool(BASE, volumes=[{"name": "v", "hostPath": {}}]),
            "spec.supernodes.pools[0].volumes[0].hostPath",
            "'path' is a required property",
            "a hostPath volume without a path",
        ),
        (
            pool(BASE, volumeMounts=[{"name": "v"}]),
            "spec.supernodes.pools[0].volumeMounts[0]",
            "'mountPath' is a required property",
            "a volume mount without a mount path",
        ),
        (
            spec(BASE, superlink__superexecVolumeMounts=[{"name": "v", "mountPath": 3}]),
            "spec.superlink.superexecVolumeMounts[0].mountPath",
            "3",
            "a number where Kubernetes wants a path",
        ),
        (
            pool(BASE, podTemplate={"spec": {"nodeSelector": "gpu"}}),
            "spec.supernodes.pools[0].podTemplate.spec.nodeSelector",
            "'gpu'",
            "a string where Kubernetes wants a map of labels",
        ),
        (
            pool(BASE, podTemplate={"spec": {"containers": [{"name": "x", "image": "y"}]}}),
            "spec.supernodes.pools[0].podTemplate.spec.containers",
            "built by the function",
            "a template may not add containers: the function builds them",
        ),
        (
            pool(BASE, volumeClaimTemplates=[{"metadata": {"name": "v"}, "spec": {"accessModes": "RWO"}}]),
            "spec.supernodes.pools[0].volumeClaimTemplates[0].spec.accessModes",
            "'RWO'",
            "a string where Kubernetes wants a list of access modes",
        ),
    ],
)
def test_bad_spec_names_the_field(s, field, message, reason):
    errors = errors_of(s)
    assert any(f == field and message in m for f, m in errors), (reason, errors)


@pytest.mark.parametrize(
    ("quantity", "reason"),
    [
        ("500m", "milli, the usual form of a CPU request"),
        ("2", "a whole number, quoted in YAML"),
        (2, "a whole number as YAML reads it: an int, not a string"),
        (0.5, "a fraction as YAML reads it: a float"),
        ("1.5Gi", "a fraction with a binary suffix"),
        ("100Ki", "kibi, the smallest binary suffix"),
        ("1e3", "a decimal exponent"),
        ("+1", "a leading sign"),
        (".5", "no digit before the point"),
        ("1E", "exa, a suffix that reads like an exponent"),
        ("250M", "mega: an upper-case M, where m is milli"),
    ],
)
def test_every_form_of_a_kubernetes_quantity_is_accepted(quantity, reason):
    """The quantity check refuses only what Kubernetes' grammar does not parse."""
    try:
        parse(pool(BASE, supernodeResources={"requests": {"cpu": quantity}}))
    except SpecError as err:
        pytest.fail(f"{reason}: {err.errors}")


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
    ("name", "s", "field", "message", "reason"),
    [
        (
            "f" * 45,
            BASE,
            "metadata.name",
            "at most 52",
            "the SuperLink's StatefulSet, named after the Federation, would pass 52 characters",
        ),
        (
            "fed",
            pool(BASE, name="p" * 40),
            "spec.supernodes.pools[0].name",
            "at most 52",
            "a StatefulSet pool's name whose workload would pass 52 characters",
        ),
        (
            "fed",
            pool(DS, name="p" * 50),
            "spec.supernodes.pools[0].name",
            "at most 63",
            "a DaemonSet's name may be 63 long, a StatefulSet's 52: 64 is too long",
        ),
        (
            "1fed",
            BASE,
            "metadata.name",
            "DNS-1035",
            "a Service's name must start with a letter (DNS-1035), and the SuperLink's is the Federation's",
        ),
    ],
)
def test_generated_names_are_checked(name, s, field, message, reason):
    with pytest.raises(SpecError) as err:
        read.federation(xr(s, name=name))
    assert any(f == field and message in m for f, m in err.value.errors), (reason, err.value.errors)


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
