"""Published SuperNode keys as Crossplane observes them: a Federation's names, two keys, a gatherer's list.

Shared by the tests of the key publication (test_published_keys.py) and of remote clusters' keys (test_key_shards.py).
The lists are made by the gatherer's own code (gather_program.Publications), from publications made by the
publisher's (key_publications.key_configmap).
"""

from __future__ import annotations

from typing import Any

from function.builders import identity, published_keys
from function.composition import objects, resource_names
from function.federation import read
from function.programs import gather_program, key_publications
from support.helpers import BASE, spec

TLS = spec(BASE, tls={"secretName": "superlink-tls"})
AUTH = spec(TLS, nodeAuthentication={"enabled": True})
# The claim helper names the XR fed-x7k2p, claimed as fed in team-a.
FED, NAMESPACE = "fed", "team-a"
KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBP0="
OTHER_KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBQ1="
CLAIM_HOLDER = "supernode-identity-fed-default-0"


def publication(
    key: str = KEY,
    *,
    namespace: str = NAMESPACE,
    owner_kind: str = "PersistentVolumeClaim",
    uid: str = "2f1c",
    holder: str = CLAIM_HOLDER,
    created: str = "2026-12-01T10:00:00Z",
    pool: str = "default",
    **changes: Any,
) -> dict[str, Any]:
    """The ConfigMap a SuperNode pod of pool publishes its key as, with changes at `__`-joined paths."""
    configmap = key_publications.key_configmap(
        key_publications.Owner(owner_kind, holder, uid), namespace, identity.publication_labels(FED, pool), key
    )
    configmap["metadata"]["creationTimestamp"] = created
    for path, value in changes.items():
        node = configmap
        *parents, last = path.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return configmap


def gathered_list(
    *publications: dict[str, Any], namespace: str = NAMESPACE, pools: tuple[str, ...] = ("default",)
) -> dict[str, Any]:
    """The list a gatherer in namespace writes, having seen publications: the live ConfigMap its Object observes."""
    text = gather_program.listed(published_keys.expected(FED, published_keys.Place("", namespace, pools)),
                                 list(publications))  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "fed-keys-0123456789ab", "namespace": namespace},
        "data": gather_program.list_data(text),
    }


def observed_list(live: dict[str, Any], cluster: str = "default") -> dict[str, dict[str, Any]]:
    """Observed composed resources: the Object of the gatherer's list in cluster, as provider-kubernetes reports it."""
    name = resource_names.key_gathered_resource(cluster, live["metadata"]["namespace"])
    return {name: {"apiVersion": objects.OBJECT_API, "kind": "Object", "status": {"atProvider": {"manifest": live}}}}


def observed_workloads(**counts: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Pools' workloads as provider-kubernetes reports them, with the status counts given, by pool."""
    out = {}
    for pool, status in counts.items():
        live = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, **status}}
        if "readyReplicas" in status:
            live["spec"] = {"replicas": status["readyReplicas"]}
        out[read.pool_resource(pool)] = {"status": {"atProvider": {"manifest": live}}}
    return out


def sts_ready(replicas: int) -> dict[str, int]:
    return {"readyReplicas": replicas, "updatedReplicas": replicas}


def ds_ready(nodes: int) -> dict[str, int]:
    return {"desiredNumberScheduled": nodes, "numberReady": nodes, "updatedNumberScheduled": nodes}
