"""SuperLink persistence and SuperNode authentication."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import zipfile

import pytest

from function.api.refusals import SpecError, parse
from function.builders import identity
from function.composition import compose, resource_names
from function.federation import read
from support.helpers import BASE, container, manifests, pod, pool, spec, xr
from support.published_keys import observed_workloads, sts_ready

DURABLE = spec(BASE, superlink__persistence={"size": "5Gi", "storageClassName": "fast"})
TLS = spec(BASE, tls={"secretName": "superlink-tls"})
# Node authentication with identities the SuperNodes make, and with a key the user gives (one SuperNode).
AUTH = spec(TLS, nodeAuthentication={"enabled": True})
GIVEN_KEY = pool(spec(AUTH, supernodes__pools__0__replicas=1), authKeySecretRef={"name": "keys", "key": "default.key"})
AUTH_DS = spec(AUTH, mode="DaemonSet", supernodes__pools=[{"name": "edge"}])


def init_containers(s, workload="pool-default"):
    return {c["name"]: c for c in manifests(s)[workload]["spec"]["template"]["spec"].get("initContainers", [])}


def test_persistence_puts_database_and_storage_on_a_claim():
    sts = manifests(DURABLE)["superlink"]
    c = container(DURABLE, "superlink", "superlink")
    assert "--database=/app/state/state.db" in c["args"]
    assert "--storage-dir=/app/state/ffs" in c["args"]
    assert {"name": "state", "mountPath": "/app/state"} in c["volumeMounts"]
    assert sts["spec"]["volumeClaimTemplates"] == [
        {
            "metadata": {"name": "state"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "5Gi"}},
                "storageClassName": "fast",
            },
        }
    ]


def test_no_persistence_keeps_state_in_memory():
    c = container(BASE, "superlink", "superlink")
    assert not any(a.startswith(("--database", "--storage-dir")) for a in c["args"])
    assert "volumeClaimTemplates" not in manifests(BASE)["superlink"]["spec"]


@pytest.mark.parametrize(
    ("s", "field", "message", "reason"),
    [
        (
            spec(BASE, superlink__persistence={"size": "lots"}),
            "spec.superlink.persistence.size",
            "pattern",
            "a storage size that is no quantity",
        ),
        (
            spec(DURABLE, superlink__volumeClaimTemplates=[{"metadata": {"name": "state"}, "spec": {}}]),
            "spec.superlink.volumeClaimTemplates",
            "taken by spec.superlink.persistence",
            "a claim template named as persistence's own volume",
        ),
        (
            pool(AUTH, authKeySecretRef={"name": "keys", "key": "k"}),
            "spec.supernodes.pools[0].authKeySecretRef",
            "needs mode StatefulSet and replicas 1",
            "a given key is one SuperNode's: a StatefulSet pool of one",
        ),
        (
            spec(BASE, nodeAuthentication={"enabled": True}),
            "spec.nodeAuthentication.enabled",
            "needs spec.tls",
            "node authentication needs TLS",
        ),
        (
            pool(AUTH, volumes=[{"name": "supernode-identity", "emptyDir": {}}]),
            "spec.supernodes.pools[0].volumes",
            "taken by the SuperNodes' identities",
            "a volume named as the SuperNodes' identities' own",
        ),
        (
            spec(AUTH, nodeAuthentication__unregisterAfterSeconds=1),
            "spec.nodeAuthentication.unregisterAfterSeconds",
            "greater than or equal to 10",
            "a grace period under the floor of 10 s",
        ),
        (
            pool(GIVEN_KEY, authKeySecretRef={"name": "keys"}),
            "spec.supernodes.pools[0].authKeySecretRef.key",
            "Field required",
            "a Secret given without the key in it to read",
        ),
    ],
)
def test_bad_settings_name_the_field(s, field, message, reason):
    with pytest.raises(SpecError) as err:
        parse(s)
    assert any(f == field and message in m for f, m in err.value.errors), (reason, err.value.errors)


def test_a_given_key_is_mounted_and_not_registered():
    """authKeySecretRef: the user's key for the pool's one SuperNode, registered by the user."""
    assert "--enable-supernode-auth" in container(GIVEN_KEY, "superlink", "superlink")["args"]
    c = container(GIVEN_KEY)
    assert "--auth-supernode-private-key=/app/auth/supernode.key" in c["args"]
    assert {"name": "auth-key", "mountPath": "/app/auth", "readOnly": True} in c["volumeMounts"]
    assert {
        "name": "auth-key",
        "secret": {
            "secretName": "keys",
            "items": [{"key": "default.key", "path": "supernode.key"}],
            "defaultMode": 0o440,
        },
    } in pod(GIVEN_KEY)["volumes"]
    assert init_containers(GIVEN_KEY) == {}
    # No pool makes its own identity: nothing for a registrar to register.
    assert "supernode-registrar" not in init_containers(GIVEN_KEY, "superlink")


@pytest.mark.parametrize(
    ("s", "claim", "memory"),
    [
        (AUTH, True, False),
        (AUTH_DS, False, True),
    ],
    ids=["statefulset: a claim per ordinal keeps the key and node ID", "daemonset: in memory, per pod"],
)
def test_each_supernode_makes_and_publishes_its_own_key(s, claim, memory):
    workload = manifests(s)["pool-edge" if s is AUTH_DS else "pool-default"]
    template = workload["spec"]["template"]["spec"]
    # One init container makes and publishes the key, a native sidecar replaces it once retired;
    # nothing in the pod registers it or reaches Control.
    assert [c["name"] for c in template["initContainers"]] == ["supernode-identity", "supernode-rekey"]
    first, rekey = template["initContainers"]
    assert "restartPolicy" not in first
    assert rekey["restartPolicy"] == "Always"
    assert rekey["image"] == first["image"] and rekey["command"] == first["command"]
    assert rekey["args"][0] == "rekey" and rekey["args"][1:] == [
        *first["args"][1:],
        "--retired=/etc/flower-retired-keys/retired",
        "--interval=30",
    ], "it publishes a new key exactly as the publisher does"
    retired = {"name": "retired-keys", "mountPath": "/etc/flower-retired-keys", "readOnly": True}
    assert retired in rekey["volumeMounts"] and retired not in first["volumeMounts"]
    # Optional: the report is composed only while it names a key of the namespace.
    assert {"name": "retired-keys", "configMap": {"name": "fed-retired-keys", "optional": True}} in template["volumes"]
    # The pool's own image: a pool cluster pulls no SuperLink image.
    assert first["image"] == "flwr/supernode:1.25.0"
    # The program ships once per namespace (a ConfigMap), not inlined in the pod spec.
    assert first["command"] == ["python", "/etc/flower-identity/identity_program.pyz"]
    assert {"name": "identity-program", "mountPath": "/etc/flower-identity", "readOnly": True} in first["volumeMounts"]
    assert first["args"][:2] == ["publish", "--key-dir=/app/auth"]
    assert "--retry=5" in first["args"], "it returns only once Kubernetes holds the key"
    assert not any(a.startswith(("--address", "--root-certificates")) for a in first["args"])
    assert not any(m["name"].startswith("superlink-tls") for m in first["volumeMounts"]), "it dials no SuperLink"
    assert {"name": "supernode-identity", "mountPath": "/app/auth"} in first["volumeMounts"]
    node = next(c for c in template["containers"] if c["name"] == "supernode")
    assert "--auth-supernode-private-key=/app/auth/supernode.key" in node["args"]
    assert {"name": "supernode-identity", "mountPath": "/app/auth", "readOnly": True} in node["volumeMounts"]
    claims = [t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])]
    assert ("supernode-identity" in claims) == claim
    # The claims (and the keys' publications) go with the StatefulSet, not with a scale-down.
    retention = workload["spec"].get("persistentVolumeClaimRetentionPolicy")
    assert retention == ({"whenDeleted": "Delete", "whenScaled": "Retain"} if claim else None)
    volumes = {v["name"]: v for v in template["volumes"]}
    assert ("supernode-identity" in volumes) == memory
    if memory:
        assert volumes["supernode-identity"]["emptyDir"]["medium"] == "Memory"


def test_the_superlink_registers_published_keys_and_keeps_its_state():
    init = init_containers(AUTH, "superlink")
    assert list(init) == ["supernode-registrar"]
    registrar = init["supernode-registrar"]
    assert registrar["restartPolicy"] == "Always"
    assert registrar["image"] == "flwr/superlink:1.25.0", "the SuperLink's CLI speaks its Control API"
    assert registrar["args"][0] == "registrar"
    # Over the pod's loopback, which the SuperLink's certificate names: the only Control API client.
    assert "--address=127.0.0.1:9093" in registrar["args"]
    assert "--root-certificates=/app/tls/ca.crt" in registrar["args"]
    assert "--grace=600" in registrar["args"]
    assert "--authorized-keys=/etc/flower-authorized-keys/authorized-keys" in registrar["args"]
    # Its memory on the SuperLink's state volume, in a folder of its own: both survive a restart or neither.
    assert "--state=/var/lib/flower-registrar" in registrar["args"]
    state = {"name": "state", "mountPath": "/var/lib/flower-registrar", "subPath": "registrar"}
    assert state in registrar["volumeMounts"]
    # It reports retired keys with a token only it mounts, in a ConfigMap only its account may write.
    assert "--registrations=fed-superlink-registrations" in registrar["args"]
    assert "--kube-credentials=/var/run/flower-identity-api" in registrar["args"]
    assert {"name": "identity-kube-api", "mountPath": "/var/run/flower-identity-api", "readOnly": True} in registrar[
        "volumeMounts"
    ]
    others = pod(AUTH, "superlink")["containers"]
    assert not any(m["name"] == "identity-kube-api" for c in others for m in c.get("volumeMounts", []))
    c = container(AUTH, "superlink", "superlink")
    assert "--enable-supernode-auth" in c["args"]
    assert "--database=/app/state/state.db" in c["args"], "registrations must survive a restart"
    off = spec(AUTH, superlink__persistence={"enabled": False})
    assert not any(a.startswith("--database") for a in container(off, "superlink", "superlink")["args"])
    in_memory = init_containers(off, "superlink")["supernode-registrar"]
    assert "--state=/var/run/flower-registrar/registrar" in in_memory["args"]
    assert not any(m["name"] == "state" for m in in_memory["volumeMounts"])


def test_no_private_key_in_any_composed_resource():
    text = repr(manifests(AUTH)) + repr(manifests(AUTH_DS))
    assert "PRIVATE KEY" not in text
    assert "supernode.key" in text  # where the pods keep it, and nothing more


def test_without_node_authentication_nothing_is_added():
    assert "--enable-supernode-auth" not in container(BASE, "superlink", "superlink")["args"]
    assert not any("auth" in a for a in container(BASE)["args"])


def remote_auth(version: str, *, older_pool: str | None = None) -> dict:
    """Node authentication with a pool in another cluster, at a release; optionally a second, local, older pool."""
    # The CA comes from a Secret there, so the pool is not held back waiting for it.
    pools = [{"name": "edge", "replicas": 2, "providerConfigRef": {"name": "spoke"}, "caSecretRef": {"name": "ca"}}]
    if older_pool:
        pools.append({"name": "old", "replicas": 1, "images": {"supernode": f"flwr/supernode:{older_pool}"}})
    return spec(
        AUTH,
        superlink__image=f"flwr/superlink:{version}",
        superlink__externalAddress="flower.example.com:9092",
        supernodes__image=f"flwr/supernode:{version}",
        supernodes__pools=pools,
    )


@pytest.mark.parametrize(
    ("s", "reason"),
    [
        (remote_auth("1.41.0"), "from 1.40 the Fleet address leads to a proxy that passes Fleet alone"),
        (remote_auth("1.39.0"), "before 1.40 the Fleet port serves only Fleet"),
    ],
)
def test_a_pool_elsewhere_publishes_its_keys_and_never_reaches_control(s, reason):
    """Registration no longer travels the network: any release, any cluster (once refused before 1.40)."""
    built = manifests(s)
    init = {c["name"]: c for c in built["pool-edge"]["spec"]["template"]["spec"]["initContainers"]}
    node = next(c for c in built["pool-edge"]["spec"]["template"]["spec"]["containers"] if c["name"] == "supernode")
    assert "--superlink=flower.example.com:9092" in node["args"], reason
    assert init["supernode-identity"]["args"][0] == "publish", reason
    assert not any(a.startswith("--address") for a in init["supernode-identity"]["args"]), reason
    proxy = built.get("superlink-fleet-proxy")
    if proxy is not None:
        assert "/v1/control" not in proxy["data"]["nginx.conf"], reason
    service = built["superlink-service"]
    assert [p["name"] for p in service["spec"]["ports"]] in (["fleet"], ["fleet", "fleet-http"]), reason


@pytest.mark.parametrize(
    ("s", "reason"),
    [
        (AUTH, "the registrar dials the loopback: no pod, not even the SuperLink's own, reaches the Control port"),
        (TLS, "without node authentication the Control port stays closed to SuperNodes"),
    ],
)
def test_network_policies_admit_no_one_to_control(s, reason):
    built = manifests(s)
    superlink_rules = built["networkpolicy-superlink"]["spec"]["ingress"]
    assert not any({"port": 9093, "protocol": "TCP"} in r["ports"] for r in superlink_rules), reason
    egress = built["networkpolicy-supernode-default-team-a"]["spec"]["egress"]
    assert not any({"port": 9093, "protocol": "TCP"} in r.get("ports", []) for r in egress if "to" in r), reason


def test_the_identity_program_ships_once_per_cluster_and_namespace_not_in_every_pod():
    """Issue 31: the program was inlined into every pod spec (67 KB each). Now one immutable ConfigMap per place
    where identity containers run (the SuperLink's namespace for the registrar, each pool's), named by its content,
    and each pod mounts it by that name."""
    built = manifests(remote_auth("1.41.0"))
    programs = {name: m for name, m in built.items() if name.startswith("identity-program-")}
    digest = identity.PROGRAM_DIGEST
    assert sorted(programs) == [f"identity-program-{digest}-default-team-a", f"identity-program-{digest}-spoke-team-a"]
    for configmap in programs.values():
        assert configmap["kind"] == "ConfigMap"
        assert configmap["immutable"] is True
        assert configmap["metadata"]["name"] == f"fed-identity-program-{digest}"
        archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(configmap["binaryData"]["identity_program.pyz"])))
        assert {name: archive.read(name).decode() for name in archive.namelist()} == identity.PROGRAM
    for workload in ("superlink", "pool-edge"):
        pod_spec = built[workload]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        assert volumes["identity-program"]["configMap"]["name"] == f"fed-identity-program-{digest}"
        assert identity.PROGRAM["function/programs/identity_program.py"] not in str(pod_spec)
    # Without node authentication there is no program to ship.
    assert not [name for name in manifests(TLS) if name.startswith("identity-program-")]


def test_the_shipped_archive_runs_as_the_program(tmp_path):
    """What the pods run: `python identity_program.pyz`, the same bytes every time."""
    archive = tmp_path / identity.PROGRAM_FILE
    archive.write_bytes(base64.b64decode(identity.PROGRAM_ARCHIVE))
    assert identity.PROGRAM_ARCHIVE == base64.b64encode(identity._archive(identity.PROGRAM)).decode()
    keys = tmp_path / "keys"
    keys.mkdir()
    proc = subprocess.run(
        [sys.executable, str(archive), "publish", f"--key-dir={keys}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "no Kubernetes API in reach" in proc.stdout
    runner = subprocess.run(
        [sys.executable, str(archive), "runner", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert runner.returncode == 0, runner.stderr
    assert "--wanted" in runner.stdout, "mode runner is run_program's, through the archive's __main__.py"
    names = zipfile.ZipFile(archive).namelist()
    assert names == sorted(names), "entries sorted: the same modules always make the same bytes"
    assert "function/builders/identity.py" not in names, "only the programs' own modules ship"
    assert (keys / "supernode.pub").read_text().startswith("ecdsa-sha2-nistp384 ")


def _with_report(s, report, more=None):
    """The Federation composed with its registrar's report observed as it wrote it (and more observed)."""
    fed = read.federation(xr(s))
    live = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"retired": report}}
    observed = {resource_names.REGISTRATIONS: {"status": {"atProvider": {"manifest": live}}}, **(more or {})}
    return fed, compose.plan(fed, observed)


D1, D2, D3 = "0123456789abcdef", "fedcba9876543210", "00112233445566aa"


def test_the_registrar_reports_into_a_configmap_it_alone_may_write_and_crossplane_never_overwrites():
    fed, built = _with_report(AUTH, "")
    report = built.resources[resource_names.REGISTRATIONS]
    assert report.manifest["metadata"]["name"] == "fed-superlink-registrations"
    assert report.manifest["data"] == {"retired": ""}
    # Created once, then only read back: an update would undo what the registrar wrote.
    wrapped = compose.desired(fed, built)[resource_names.REGISTRATIONS]
    assert wrapped["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"]
    role = built.resources[resource_names.REGISTRATIONS_ROLE].manifest
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
         "resourceNames": ["fed-superlink-registrations"]}
    ]  # fmt: skip
    binding = built.resources[resource_names.REGISTRATIONS_BINDING].manifest
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # The SuperLink's own account, not the one SuperNode pods beside it run as.
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fed-superlink", "namespace": "team-a"}]
    superlink_pod = built.resources[resource_names.SUPERLINK].manifest["spec"]["template"]["spec"]
    assert superlink_pod["serviceAccountName"] == "fed-superlink"
    pool_pod = built.resources[read.pool_resource("default")].manifest["spec"]["template"]["spec"]
    assert pool_pod["serviceAccountName"] == "fed-flower"
    # Without node authentication there is no registrar, and nothing to report.
    plain = compose.plan(read.federation(xr(TLS)))
    assert (
        resource_names.REGISTRATIONS not in plain.resources and resource_names.REGISTRATIONS_ROLE not in plain.resources
    )


@pytest.mark.parametrize(
    ("report", "expected", "reason"),
    [
        ("", {}, "nothing retired: no report in any namespace"),
        (
            f"{D1} default/team-a/PersistentVolumeClaim/supernode-identity-fed-default-0\n",
            {"retired-keys-default-team-a": f"{D1}\n"},
            "a retired key goes back to its holder's cluster and namespace",
        ),
        (
            f"{D1} spoke/team-a/Pod/p\n{D2} default/team-a/Pod/q\n",
            {"retired-keys-default-team-a": f"{D2}\n"},
            "a holder in a place with no pool of the Federation gets nothing",
        ),
        (
            f"{D2} default/team-a/Pod/q\n{D1} default/team-a/Pod/p\nnot-a-digest default/team-a/Pod/r\n{D3}\n",
            {"retired-keys-default-team-a": f"{D1}\n{D2}\n"},
            "sorted; lines that are not `<digest> <holder>` are left out",
        ),
        (
            f"{D1} default/team-ab/Pod/p\n",
            {},
            "a namespace whose name starts like the pool's is another namespace",
        ),
    ],
)
def test_retired_keys_go_back_to_the_namespace_of_their_holders(report, expected, reason):
    _, built = _with_report(AUTH, report)
    got = {
        name: c.manifest["data"]["retired"] for name, c in built.resources.items() if name.startswith("retired-keys-")
    }
    assert got == expected, reason
    for name in got:
        manifest = built.resources[name].manifest
        assert manifest["metadata"] == {
            "name": "fed-retired-keys",
            "namespace": "team-a",
            "labels": manifest["metadata"]["labels"],
        }, reason


@pytest.mark.parametrize(
    ("report", "settled", "reason"),
    [
        ("", True, "nothing retired: the list is Ready once it holds a key each"),
        (f"{D1} default/team-a/Pod/q\n", False, "a holder there replaces a retired key: looked at every 30 s"),
        (f"{D1} spoke/team-a/Pod/q\n", True, "a retired key of another place is not this list's to wait for"),
    ],
)
def test_a_keys_list_is_looked_at_often_while_a_holder_there_replaces_a_retired_key(report, settled, reason):
    # The pool's StatefulSet observed ready: only the report decides.
    _, built = _with_report(AUTH, report, observed_workloads(default=sts_ready(2)))
    policy = built.resources[resource_names.key_gathered_resource("default", "team-a")].readiness
    assert policy is not None
    assert policy["celQuery"].startswith("false ") is not settled, reason
    if settled:
        assert policy["celQuery"].endswith(">= 2"), reason
