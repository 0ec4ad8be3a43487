"""SuperLink persistence and SuperNode authentication."""

from __future__ import annotations

import pytest

from function.validation import SpecError, parse
from helpers import BASE, container, manifests, pod, pool, spec

DURABLE = spec(BASE, superlink__persistence={"size": "5Gi", "storageClassName": "fast"})
AUTH = pool(spec(BASE, nodeAuthentication={"enabled": True}), authKeySecretRef={"name": "keys", "key": "default.key"})


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
            pool(AUTH, authKeySecretRef=None),
            "spec.supernodes.pools[0].authKeySecretRef",
            "required when nodeAuthentication.enabled=true",
        ),
        (
            pool(AUTH, authKeySecretRef={"name": "keys"}),
            "spec.supernodes.pools[0].authKeySecretRef.key",
            "Field required",
        ),
    ],
)
def test_bad_settings_name_the_field(s, field, message):
    with pytest.raises(SpecError) as err:
        parse(s)
    assert any(f == field and message in m for f, m in err.value.errors), err.value.errors


def test_node_authentication():
    assert "--enable-supernode-auth" in container(AUTH, "superlink", "superlink")["args"]
    c = container(AUTH)
    assert "--auth-supernode-private-key=/app/auth/supernode.key" in c["args"]
    assert {"name": "auth-key", "mountPath": "/app/auth", "readOnly": True} in c["volumeMounts"]
    assert {
        "name": "auth-key",
        "secret": {
            "secretName": "keys",
            "items": [{"key": "default.key", "path": "supernode.key"}],
            "defaultMode": 0o440,
        },
    } in pod(AUTH)["volumes"]


def test_without_node_authentication_nothing_is_added():
    assert "--enable-supernode-auth" not in container(BASE, "superlink", "superlink")["args"]
    assert not any("auth" in a for a in container(BASE)["args"])
