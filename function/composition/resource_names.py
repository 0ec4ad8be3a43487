"""Composition resource names: how each composed object is keyed in Crossplane's desired and observed state.

Names depend on the place (cluster, namespace) alone, never on which other
clusters or pools exist, so joining or leaving moves no other object; a
pool's workload is keyed by federation.read.pool_resource.
"""

from __future__ import annotations

from function.builders import identity

SUPERLINK = "superlink"
SERVICE = "superlink-service"
CERTIFICATE = "superlink-certificate"
FLEET_PROXY_CONFIG = "superlink-fleet-proxy"
AUTHORIZED_KEYS = "superlink-authorized-keys"
REGISTRATIONS = "superlink-registrations"
SUPERLINK_SERVICEACCOUNT = "superlink-serviceaccount"
REGISTRATIONS_ROLE = "superlink-registrations-role"
REGISTRATIONS_BINDING = "superlink-registrations-binding"


def serviceaccount_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the Federation's ServiceAccount in one cluster and namespace."""
    return f"serviceaccount-{cluster}-{namespace}"


def identity_program_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the identity program in one cluster and namespace.

    The program's digest is part of it: a new program is a new Object, and the
    old one, no longer desired, is deleted rather than left behind under its old name.
    """
    return f"identity-program-{identity.PROGRAM_DIGEST}-{cluster}-{namespace}"


def key_collection_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the earlier releases' collection of the keys published in one cluster and namespace.

    Their collections made one Object per key; the keys gatherer (key_gatherer_resources) replaced them.
    A held pool's cluster keeps what it has, under this name too.
    """
    return f"supernode-keys-{cluster}-{namespace}"


# The keys gatherer's objects in one cluster and namespace (function/builders/key_gatherer.py manifests), in its order.
KEY_GATHERER_PARTS = ("list", "account", "role", "binding", "workload")


def key_gatherer_resources(cluster: str, namespace: str) -> list[str]:
    """Composition resource names of the keys gatherer's objects in one cluster and namespace, its list first."""
    return [f"supernode-keys-gatherer-{part}-{cluster}-{namespace}" for part in KEY_GATHERER_PARTS]


def key_gathered_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the list the gatherer writes, whose observed keys the function reads."""
    return key_gatherer_resources(cluster, namespace)[0]


def api_endpoints_resource(cluster: str) -> str:
    """Composition resource name of the observed endpoints of one cluster's API server."""
    return f"kube-api-endpoints-{cluster}"


def retired_keys_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the retired keys of one cluster and pool namespace."""
    return f"retired-keys-{cluster}-{namespace}"


def key_role_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the Role that lets pods publish keys in one cluster and namespace.

    Not the earlier releases' (legacy_key_publisher_resources): their Role had one name in every cluster,
    this one's is the cluster's own (identity.publisher_name). provider-kubernetes leaves the old
    object in place when an Object's manifest is renamed; under a new resource name Crossplane
    deletes the old Object, and the provider the old Role with it.
    """
    return f"supernode-keys-publisher-role-{cluster}-{namespace}"


def key_binding_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of that Role's binding (renamed with it)."""
    return f"supernode-keys-publisher-binding-{cluster}-{namespace}"


def legacy_key_publisher_resources(cluster: str, namespace: str) -> list[str]:
    """The earlier releases' resource names of that Role and its binding: a held pool keeps them as they are."""
    return [f"supernode-keys-role-{cluster}-{namespace}", f"supernode-keys-binding-{cluster}-{namespace}"]


def key_policy_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the admission policy that narrows that Role to each pod's own key."""
    return f"supernode-keys-policy-{cluster}-{namespace}"


def key_policy_binding_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of that policy's binding."""
    return f"supernode-keys-policy-binding-{cluster}-{namespace}"


def ca_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the CA copy in one cluster and namespace."""
    return f"ca-{cluster}-{namespace}"


def networkpolicy_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of the SuperNodes' NetworkPolicy in one cluster and namespace."""
    return f"networkpolicy-supernode-{cluster}-{namespace}"


def namespace_resource(cluster: str, namespace: str) -> str:
    """Composition resource name of a pool's Namespace in one cluster."""
    return f"namespace-{cluster}-{namespace}"
