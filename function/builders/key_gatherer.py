"""The keys gatherer of a cluster's pool namespace: one pod that lists the key publications there in one ConfigMap.

A provider-kubernetes collection makes one Object on the control plane per key
it finds, and finds keys only at the provider's poll: half of a federation's
Objects, and most of a key's wait. The gatherer (function/programs/gather_program.py)
watches the namespace's publications instead and writes those that count into
one ConfigMap (gathered), which one Object can observe, and watch.

Per Federation, cluster and pool namespace, all named by name():

* gathered: the ConfigMap, made empty by the function, then written only by
  the gatherer. A pool's pod can neither write it (its Role: create only) nor
  make it first (the admission policy lets it create only its own `flwr-key-`
  publication), so every line is one the gatherer wrote.
* account, role, binding: the gatherer's own ServiceAccount, which may list
  and watch the namespace's ConfigMaps and patch that one, nothing else.
* deployment: one pod, the pool's SuperNode image running the programs'
  archive (mode gather), hardened as every pod of ours, with a token only it mounts.
"""

from __future__ import annotations

import hashlib
from typing import Any

from function.api import names
from function.api.spec import FederationSpec
from function.builders import identity, pods

CONTAINER = "supernode-keys-gatherer"
# Its pods' app.kubernetes.io/name: not a SuperNode's (nothing that selects SuperNodes selects it), but the
# SuperNodes' NetworkPolicy names it too (function/builders/netpol.py): no ingress, egress to its API server.
NAME = "keys-gatherer"
COMPONENT = "supernode-keys"
GATHERER_LABEL = "flower.flwr.ai/keys-gatherer"


def name(federation: str, namespace: str, cluster: str, pool_namespace: str) -> str:
    """The gatherer's objects' name, unique per Federation (namespace: its own), cluster and pool namespace.

    Two ProviderConfigs may name one cluster (a test fleet, a cluster reached two ways): each gathers its own pools.
    """
    digest = hashlib.sha256(f"{namespace}/{federation}/{cluster}/{pool_namespace}".encode()).hexdigest()[:12]
    return f"{federation[:30]}-keys-{digest}"


def labels(federation: str) -> dict[str, str]:
    """The gatherer's objects' labels."""
    return names.labels(federation, NAME, COMPONENT)


def gathered(gatherer: str, pool_namespace: str, federation: str) -> dict[str, Any]:
    """The ConfigMap the gatherer writes, made without its list: the function makes it, only the gatherer writes it.

    Without gather_program.GATHERED_FIELD until the gatherer's first write: a list not written yet
    says nothing (published_keys.gathered), where an empty one says there is no key.
    """
    return identity.configmap(gatherer, pool_namespace, labels(federation))


def account(gatherer: str, pool_namespace: str, federation: str) -> dict[str, Any]:
    """The gatherer's own ServiceAccount, whose token only its pod mounts."""
    return pods.service_account_manifest(gatherer, pool_namespace, labels(federation))


def role(gatherer: str, pool_namespace: str, federation: str) -> dict[str, Any]:
    """List and watch the namespace's ConfigMaps (RBAC cannot narrow a list by label), patch only the gathered one."""
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"], "resourceNames": [gatherer]},
    ]
    return identity.role(gatherer, pool_namespace, labels(federation), rules)


def binding(gatherer: str, pool_namespace: str, federation: str) -> dict[str, Any]:
    """The Role above, granted to the gatherer's account alone."""
    return identity.binding(gatherer, gatherer, pool_namespace, labels(federation))


def deployment(
    gatherer: str, pool_namespace: str, federation: str, image: str, pools: tuple[str, ...], spec: FederationSpec
) -> dict[str, Any]:
    """One pod gathering the publications of the Federation's pools in the namespace (pools: all when empty)."""
    args = [
        "gather",
        f"--kube-credentials={identity.KUBE_DIR}",
        f"--namespace={pool_namespace}",
        f"--configmap={gatherer}",
        f"--label={names.INSTANCE_LABEL}={federation}",
        f"--label={identity.KEY_LABEL}=true",
        f"--pool-label={names.POOL_LABEL}",
        *(f"--pool={p}" for p in sorted(pools)),
    ]
    mounts = [{"name": identity.KUBE_VOLUME, "mountPath": identity.KUBE_DIR, "readOnly": True}]
    container = identity.program(CONTAINER, image, args, mounts)
    pod = {"containers": [container], "volumes": [identity.program_volume(federation), identity.kube_api_volume()]}
    # Its own pods only: two gatherers of one Federation may share a namespace (two ProviderConfigs, one cluster).
    selector = {**labels(federation), GATHERER_LABEL: gatherer.rsplit("-", 1)[-1]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": gatherer, "namespace": pool_namespace, "labels": labels(federation)},
        "spec": {
            "replicas": 1,
            # One writer at a time: the old pod stops before the new one starts.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pods.harden(pod, gatherer, spec)},
        },
    }


def manifests(
    federation: str, namespace: str, cluster: str, pool_namespace: str, image: str, pools: tuple[str, ...],
    spec: FederationSpec,
) -> list[dict[str, Any]]:  # fmt: skip
    """Everything one cluster's pool namespace needs to gather its keys: the list first, then who writes it."""
    gatherer = name(federation, namespace, cluster, pool_namespace)
    return [
        gathered(gatherer, pool_namespace, federation),
        account(gatherer, pool_namespace, federation),
        role(gatherer, pool_namespace, federation),
        binding(gatherer, pool_namespace, federation),
        deployment(gatherer, pool_namespace, federation, image, pools, spec),
    ]
