"""SuperLink persistence and SuperNode authentication."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import zipfile

import pytest

from function.api.validation import SpecError, parse
from function.builders import identity
from helpers import BASE, container, manifests, pod, pool, spec

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
    ("s", "field", "message"),
    [
        (spec(BASE, superlink__persistence={"size": "lots"}), "spec.superlink.persistence.size", "pattern"),
        (
            spec(DURABLE, superlink__volumeClaimTemplates=[{"metadata": {"name": "state"}, "spec": {}}]),
            "spec.superlink.volumeClaimTemplates",
            "taken by spec.superlink.persistence",
        ),
        (
            pool(AUTH, authKeySecretRef={"name": "keys", "key": "k"}),
            "spec.supernodes.pools[0].authKeySecretRef",
            "needs mode StatefulSet and replicas 1",
        ),
        (
            spec(BASE, nodeAuthentication={"enabled": True}),
            "spec.nodeAuthentication.enabled",
            "needs spec.tls",
        ),
        (
            pool(AUTH, volumes=[{"name": "supernode-identity", "emptyDir": {}}]),
            "spec.supernodes.pools[0].volumes",
            "taken by the SuperNodes' identities",
        ),
        (
            spec(AUTH, nodeAuthentication__unregisterAfterSeconds=1),
            "spec.nodeAuthentication.unregisterAfterSeconds",
            "greater than or equal to 10",
        ),
        (
            pool(GIVEN_KEY, authKeySecretRef={"name": "keys"}),
            "spec.supernodes.pools[0].authKeySecretRef.key",
            "Field required",
        ),
    ],
)
def test_bad_settings_name_the_field(s, field, message):
    with pytest.raises(SpecError) as err:
        parse(s)
    assert any(f == field and message in m for f, m in err.value.errors), err.value.errors


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
    # No pool makes its own identity: nothing for a reaper to clean up after.
    assert "supernode-reaper" not in init_containers(GIVEN_KEY, "superlink")


@pytest.mark.parametrize(
    ("s", "claim", "memory"),
    [
        (AUTH, True, False),
        (AUTH_DS, False, True),
    ],
    ids=["statefulset: a claim per ordinal keeps the key and node ID", "daemonset: in memory, per pod"],
)
def test_each_supernode_makes_and_registers_its_own_key(s, claim, memory):
    workload = manifests(s)["pool-edge" if s is AUTH_DS else "pool-default"]
    template = workload["spec"]["template"]["spec"]
    init = {c["name"]: c for c in template["initContainers"]}
    first, keep = init["supernode-identity"], init["supernode-registration"]
    # The key is made and registered before the SuperNode starts, then kept registered beside it.
    assert [c["name"] for c in template["initContainers"]] == ["supernode-identity", "supernode-registration"]
    assert "restartPolicy" not in first
    assert keep["restartPolicy"] == "Always"
    # The SuperLink's image: its flwr CLI speaks the SuperLink's Control API.
    assert first["image"] == keep["image"] == "flwr/superlink:1.25.0"
    # The program ships once per namespace (a ConfigMap), not inlined in the pod spec.
    assert first["command"] == keep["command"] == ["python", "/etc/flower-identity/identity_program.pyz"]
    assert {"name": "identity-program", "mountPath": "/etc/flower-identity", "readOnly": True} in first["volumeMounts"]
    assert first["args"][0] == "identity"
    assert keep["args"][0] == "keep"
    for c in (first, keep):
        assert "--address=fed-superlink.team-a.svc:9093" in c["args"]
        assert "--root-certificates=/app/tls/ca.crt" in c["args"]
        assert "--cli-config=pyproject" in c["args"]  # Flower 1.25 reads a Flower app's pyproject.toml
    # Both write: the first makes the key, the sidecar replaces one the SuperLink unregistered.
    assert {"name": "supernode-identity", "mountPath": "/app/auth"} in first["volumeMounts"]
    assert {"name": "supernode-identity", "mountPath": "/app/auth"} in keep["volumeMounts"]
    node = next(c for c in template["containers"] if c["name"] == "supernode")
    assert "--auth-supernode-private-key=/app/auth/supernode.key" in node["args"]
    assert {"name": "supernode-identity", "mountPath": "/app/auth", "readOnly": True} in node["volumeMounts"]
    claims = [t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])]
    assert ("supernode-identity" in claims) == claim
    volumes = {v["name"]: v for v in template["volumes"]}
    assert ("supernode-identity" in volumes) == memory
    if memory:
        assert volumes["supernode-identity"]["emptyDir"]["medium"] == "Memory"


def test_the_superlink_reaps_identities_and_keeps_its_state():
    init = init_containers(AUTH, "superlink")
    reaper = init["supernode-reaper"]
    assert reaper["restartPolicy"] == "Always"
    assert reaper["args"][0] == "reap"
    assert "--grace=600" in reaper["args"]
    # Through the Service, whose name the SuperLink's certificate holds.
    assert "--address=fed-superlink.team-a.svc:9093" in reaper["args"]
    c = container(AUTH, "superlink", "superlink")
    assert "--enable-supernode-auth" in c["args"]
    assert "--database=/app/state/state.db" in c["args"], "registrations must survive a restart"
    off = spec(AUTH, superlink__persistence={"enabled": False})
    assert not any(a.startswith("--database") for a in container(off, "superlink", "superlink")["args"])


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


def test_a_pool_elsewhere_registers_at_the_address_it_dials():
    """From 1.40 the Fleet address leads to the listener that serves the Control API too."""
    built = manifests(remote_auth("1.41.0"))
    init = {c["name"]: c for c in built["pool-edge"]["spec"]["template"]["spec"]["initContainers"]}
    node = next(c for c in built["pool-edge"]["spec"]["template"]["spec"]["containers"] if c["name"] == "supernode")
    assert "--superlink=flower.example.com:9092" in node["args"]
    assert "--address=flower.example.com:9092" in init["supernode-identity"]["args"]
    assert "--cli-config=config-toml" in init["supernode-identity"]["args"]  # 1.26+: $FLWR_HOME/config.toml
    assert init["supernode-identity"]["image"] == "flwr/superlink:1.41.0"


@pytest.mark.parametrize(
    ("s", "reason"),
    [
        (remote_auth("1.39.0"), "before 1.40 the Control API is not behind the Fleet address"),
        (remote_auth("1.41.0", older_pool="1.25.0"), "the Fleet port is held by the gRPC adapter for a 1.25 pool"),
    ],
)
def test_a_pool_elsewhere_that_could_not_register_is_refused(s, reason):
    with pytest.raises(SpecError) as err:
        manifests(s)
    assert any(
        f == "spec.supernodes.pools[0]" and "registers its SuperNodes' keys" in m for f, m in err.value.errors
    ), (reason, err.value.errors)


@pytest.mark.parametrize(
    ("s", "control_to_supernodes", "reason"),
    [
        (AUTH, True, "SuperNodes register at the Control port, apart from the Fleet port before 1.40"),
        (TLS, False, "without node authentication the Control port stays closed to SuperNodes"),
    ],
)
def test_network_policies_let_supernodes_register(s, control_to_supernodes, reason):
    built = manifests(s)
    superlink_rules = built["networkpolicy-superlink"]["spec"]["ingress"]
    fleet_rule = next(r for r in superlink_rules if any("podSelector" in p for p in r["from"]))
    assert ({"port": 9093, "protocol": "TCP"} in fleet_rule["ports"]) == control_to_supernodes, reason
    egress = built["networkpolicy-supernode-default-team-a"]["spec"]["egress"]
    to_superlink = next(r for r in egress if "to" in r)
    assert ({"port": 9093, "protocol": "TCP"} in to_superlink["ports"]) == control_to_supernodes, reason
    # The reaper dials the Service from the SuperLink's own pod.
    own = {"podSelector": {"matchLabels": built["superlink"]["spec"]["selector"]["matchLabels"]}}
    assert any(own in r["from"] and {"port": 9093, "protocol": "TCP"} in r["ports"] for r in superlink_rules) == (
        control_to_supernodes
    ), reason


def test_the_identity_program_ships_once_per_cluster_and_namespace_not_in_every_pod():
    """Issue 31: the program was inlined into every pod spec (67 KB each). Now one immutable ConfigMap per place
    where identity containers run (the SuperLink's namespace for the reaper, each pool's), named by its content,
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
        assert archive.read("__main__.py").decode() == identity.PROGRAM
    for workload in ("superlink", "pool-edge"):
        pod_spec = built[workload]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        assert volumes["identity-program"]["configMap"]["name"] == f"fed-identity-program-{digest}"
        assert identity.PROGRAM not in str(pod_spec)
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
        [sys.executable, str(archive), "publish", f"--work={tmp_path}", f"--key-dir={keys}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "no Kubernetes API in this pod" in proc.stdout
    assert (keys / "supernode.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
