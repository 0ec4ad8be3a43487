"""SuperNode identities: a key pair per SuperNode, made in its pod, proven by Kubernetes, registered by the SuperLink.

Flower binds a node ID to a key: two SuperNodes cannot share one. So each
SuperNode pod makes its own key pair, on a volume of its own, and its private
key never leaves that volume: no Secret, Object or XR ever holds it.

* StatefulSet pools keep it on a claim per ordinal (volumeClaimTemplates), so a
  pod that is replaced keeps its key and its node ID; the claims go with the
  StatefulSet (not with a scale-down), and the key's publication with them.
* DaemonSet pools keep it in memory (an emptyDir), for as long as the pod runs
  on its node; a replaced pod is a new identity.

Nothing a SuperNode pod does reaches the Control API. Its init container
publishes the public key through its own cluster's API
(identity_program.publish), with a projected ServiceAccount token that only
that container mounts and a Role that lets the pool's ServiceAccount create
ConfigMaps in its namespace (publisher_role); Crossplane brings the published
keys back (function/builders/published_keys.py) into a ConfigMap beside the
SuperLink. The registrar, a sidecar of the SuperLink, is the only Control API
client: over the pod's loopback it registers each listed key and unregisters a
key only once it has left the list for good (identity_program.registrar). It
runs the SuperLink's image, so the CLI always speaks the SuperLink's release;
the publisher runs the pool's SuperNode image. Both run
function/programs/identity_program.py with that image's Python (no shell, no user text),
from one archive of the pods' programs (the SuperLink's run sidecar, run_program, too).
The archive ships once per namespace, in a ConfigMap named by its content
(program_configmap), not inlined into every pod spec: a new program is a new
name, so pods that run it roll, and a Federation's size grows by a reference
per pod, not by the program.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import inspect
import io
import posixpath
import re
import zipfile
from typing import Any

import function
from function import programs
from function.api import names
from function.api.spec import (
    AUTH_KEY_PATH,
    IDENTITY_VOLUME,
    STATE_VOLUME,
    FederationSpec,
    NodeAuthentication,
    superlink_state,
)
from function.builders import pods, tls
from function.federation.value import Federation
from function.programs import __main__ as programs_main
from function.programs import (
    bundle_program,
    flwr_control,
    gather_program,
    identity_program,
    key_publications,
    run_program,
)

KEY_DIR = posixpath.dirname(AUTH_KEY_PATH)
WORK_VOLUME = "supernode-registrar-work"
WORK_DIR = "/var/run/flower-registrar"
INIT_CONTAINER = "supernode-identity"
# The SuperNode pod's sidecar that replaces a key the SuperLink retired (identity_program.rekey).
REKEY_CONTAINER = "supernode-rekey"
REGISTRAR = "supernode-registrar"
# The registrar's report of retired keys, carried to the pools' namespaces, where the rekey sidecar reads it.
RETIRED_VOLUME = "retired-keys"
RETIRED_DIR = "/etc/flower-retired-keys"
# The registrar's memory of the keys it registered: beside the SuperLink's own state where it keeps one.
REGISTRAR_STATE = "registrar"
REGISTRAR_STATE_DIR = "/var/lib/flower-registrar"
# Seconds between a publisher's attempts while Kubernetes does not hold its key yet.
PUBLISH_RETRY = 5
# The programs' text, by its path in their archive: they run in the Flower image, which has no copy of
# this package, so the archive holds each module at its package path, and __main__.py picks the mode's.
PROGRAM = {
    "__main__.py": inspect.getsource(programs_main),
    "function/__init__.py": inspect.getsource(function),
    "function/programs/__init__.py": inspect.getsource(programs),
    "function/programs/bundle_program.py": inspect.getsource(bundle_program),
    "function/programs/flwr_control.py": inspect.getsource(flwr_control),
    "function/programs/gather_program.py": inspect.getsource(gather_program),
    "function/programs/identity_program.py": inspect.getsource(identity_program),
    "function/programs/key_publications.py": inspect.getsource(key_publications),
    "function/programs/run_program.py": inspect.getsource(run_program),
}
PROGRAM_VOLUME = "identity-program"
PROGRAM_DIR = "/etc/flower-identity"
# A zip archive, which Python runs by its __main__.py (zipapp).
PROGRAM_FILE = "identity_program.pyz"
# The projected ServiceAccount token and cluster CA the identity container publishes the key with.
KUBE_VOLUME = "identity-kube-api"
KUBE_DIR = "/var/run/flower-identity-api"
# A token lives an hour; the kubelet renews it well before, the program reads it at every call.
TOKEN_SECONDS = 3600
# Marks a published key's ConfigMap; with the Federation's instance label it selects the keys to carry.
KEY_LABEL = "flower.flwr.ai/supernode-key"
# The published keys, as the function lists them beside the SuperLink, in the registrar's volume.
AUTHORIZED_KEYS_VOLUME = "authorized-keys"
AUTHORIZED_KEYS_DIR = "/etc/flower-authorized-keys"
AUTHORIZED_KEYS_FILE = "authorized-keys"
# Beside it, the shard files (of groups of remote clusters) that should be there (published_keys.authorized_keys).
AUTHORIZED_SHARDS_FILE = identity_program.SHARDS_FILE
# Every shard a Federation may have, one per FederationClusterGroup (function/federation/read.py GROUPS).
SHARDS = 32
# The pod's own name, namespace and uid, from the downward API.
POD_FIELDS = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}


def settings(spec: FederationSpec) -> NodeAuthentication:
    """The node authentication settings, defaults filled in."""
    return spec.nodeAuthentication or NodeAuthentication()


@dataclasses.dataclass(frozen=True)
class Registration:
    """How the registrar beside the SuperLink reaches its Control API: the loopback, with the CLI that speaks it."""

    federation: str
    image: str
    address: str
    cli_config: str
    # With TLS, the CA certificate the CLI trusts, as the pod mounts it.
    root_certificates: str | None
    interval: int
    grace: int
    # Whether the SuperLink keeps its state on a volume: the registrar's memory goes there too.
    persistent: bool
    # Whether remote clusters' keys come in shards, one per group (published_keys.shard), beside the list.
    sharded: bool = False

    def args(self) -> list[str]:
        """The registrar's command line."""
        state = REGISTRAR_STATE_DIR if self.persistent else f"{WORK_DIR}/{REGISTRAR_STATE}"
        args = [
            "registrar",
            f"--address={self.address}",
            f"--cli-config={self.cli_config}",
            f"--work={WORK_DIR}",
            f"--state={state}",
            f"--authorized-keys={AUTHORIZED_KEYS_DIR}/{AUTHORIZED_KEYS_FILE}",
            f"--kube-credentials={KUBE_DIR}",
            f"--registrations={registrations_name(self.federation)}",
        ]
        if self.root_certificates:
            args.append(f"--root-certificates={self.root_certificates}")
        return [*args, f"--interval={self.interval}", f"--grace={self.grace}"]


def _archive(sources: dict[str, str]) -> bytes:
    """The programs as an archive `python` runs (path in the archive -> text), deflated to a third of their size.

    It ships once per cluster, so its size counts against what Crossplane reads
    from a function (4 MiB) for every selected cluster. Entries sorted, a fixed
    timestamp and level: the same programs always make the same bytes.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, source in sorted(sources.items()):
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, source, compresslevel=9)
    return out.getvalue()


_ARCHIVE = _archive(PROGRAM)
PROGRAM_ARCHIVE = base64.b64encode(_ARCHIVE).decode()
# Names the ConfigMap after the archive's content: immutable, and replaced (not edited) when any module changes.
PROGRAM_DIGEST = hashlib.sha256(_ARCHIVE).hexdigest()[:10]


def program_configmap_name(federation: str) -> str:
    """The name of the ConfigMap holding this program for federation's pods."""
    return f"{federation}-identity-program-{PROGRAM_DIGEST}"


def configmap(name: str, namespace: str, labels: dict[str, str], **content: Any) -> dict[str, Any]:
    """A ConfigMap of ours: name, namespace, labels, then content (data, binaryData, immutable)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        **content,
    }


def role(name: str, namespace: str, labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A Role of ours beside the programs that use it."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": rules,
    }


def program_configmap(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The program, once per namespace where identity containers run; immutable, as its name is its content."""
    name = program_configmap_name(federation)
    return configmap(name, namespace, labels, immutable=True, binaryData={PROGRAM_FILE: PROGRAM_ARCHIVE})


def registration(fed: Federation, address: str) -> Registration:
    """How the registrar reaches the Control API at address (the loopback), with the SuperLink's own CLI.

    It keeps what it registered across restarts when the SuperLink keeps its state.
    """
    federation, spec, superlink_dialect = fed.name, fed.spec, fed.superlink_dialect
    persistent = superlink_state(spec) is not None
    ca = f"{tls.TLS_DIR}/{tls.CA_FILE}" if tls.enabled(spec) else None
    auth = settings(spec)
    return Registration(
        federation,
        fed.images.superlink,
        address,
        superlink_dialect.cli_config,
        ca,
        auth.registrationIntervalSeconds,
        auth.unregisterAfterSeconds,
        persistent,
        sharded=fed.keys_sharded,
    )


def program(name: str, image: str, args: list[str], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A container running the program from its ConfigMap, with the image's Python."""
    program = {"name": PROGRAM_VOLUME, "mountPath": PROGRAM_DIR, "readOnly": True}
    return {
        "name": name,
        "image": image,
        "command": ["python", f"{PROGRAM_DIR}/{PROGRAM_FILE}"],
        "args": args,
        "volumeMounts": [*mounts, program],
    }


def publication_labels(federation: str, pool: str) -> dict[str, str]:
    """The labels of a published key: its Federation, its pool, and that it is a key."""
    return {names.INSTANCE_LABEL: federation, names.POOL_LABEL: pool, KEY_LABEL: "true"}


def program_volume(federation: str) -> dict[str, Any]:
    """The program's ConfigMap as a volume, readable by whatever user the container runs as."""
    return {"name": PROGRAM_VOLUME, "configMap": {"name": program_configmap_name(federation), "defaultMode": 0o444}}


def pool_init_containers(
    federation: str, image: str, pool: str, *, claims: bool, interval: int
) -> list[dict[str, Any]]:
    """The key maker and publisher, run in the pool's SuperNode image before the SuperNode starts, and its rekeyer.

    The publisher returns once Kubernetes holds the key (the SuperLink's
    registrar registers it when Crossplane has carried it there; until then
    the SuperNode is refused, exits and is restarted by the kubelet). claims:
    the key lives on the pod's StatefulSet claim, which then owns the
    publication. The rekeyer, a native sidecar, checks every interval whether
    the SuperLink retired the key and, if it did, makes and publishes a new one.
    """
    args = [f"--key-dir={KEY_DIR}", f"--kube-credentials={KUBE_DIR}", f"--retry={PUBLISH_RETRY}"]
    args += [f"--label={k}={v}" for k, v in sorted(publication_labels(federation, pool).items())]
    if claims:
        # The StatefulSet's claim for this pod: the key lives, and its publication with it, as long as the claim.
        args.append(f"--owner-claim={IDENTITY_VOLUME}-$(POD_NAME)")
    mounts: list[dict[str, Any]] = [
        {"name": IDENTITY_VOLUME, "mountPath": KEY_DIR},
        {"name": KUBE_VOLUME, "mountPath": KUBE_DIR, "readOnly": True},
    ]
    env = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in POD_FIELDS.items()]
    publisher = {**program(INIT_CONTAINER, image, ["publish", *args], mounts), "env": env}
    retired = {"name": RETIRED_VOLUME, "mountPath": RETIRED_DIR, "readOnly": True}
    rekey_args = ["rekey", *args, f"--retired={RETIRED_DIR}/{identity_program.RETIRED_FIELD}", f"--interval={interval}"]
    rekeyer = {**program(REKEY_CONTAINER, image, rekey_args, [*mounts, retired]), "env": env}
    rekeyer["restartPolicy"] = "Always"
    return [publisher, rekeyer]


def supernode_mount() -> dict[str, Any]:
    """The identity volume in the SuperNode container, where --auth-supernode-private-key points."""
    return {"name": IDENTITY_VOLUME, "mountPath": KEY_DIR, "readOnly": True}


def pool_volumes(spec: FederationSpec, federation: str) -> list[dict[str, Any]]:
    """The program, the publisher's token and, for a DaemonSet, the identity itself, in memory."""
    memory = {"medium": "Memory", "sizeLimit": "1Mi"}
    # Optional: composed only while it lists a retired key of the namespace (retired_keys).
    retired = {"name": RETIRED_VOLUME, "configMap": {"name": retired_keys_name(federation), "optional": True}}
    volumes = [program_volume(federation), kube_api_volume(), retired]
    if spec.mode == "DaemonSet":
        volumes.append({"name": IDENTITY_VOLUME, "emptyDir": memory})
    return volumes


def claim_template(spec: FederationSpec) -> dict[str, Any]:
    """A StatefulSet's claim per ordinal: the key outlives the pod, so the node ID does."""
    volume = settings(spec).identityVolume
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": volume.size}}}
    if volume.storageClassName:
        claim["storageClassName"] = volume.storageClassName
    return {"metadata": {"name": IDENTITY_VOLUME}, "spec": claim}


# The claims (and so the keys' publications) go with the StatefulSet, when its pool or cluster is
# removed: those SuperNodes are gone for good. A scale-down keeps them: the replicas are away, not gone.
CLAIM_RETENTION = {"whenDeleted": "Delete", "whenScaled": "Retain"}


def registrar(reg: Registration) -> dict[str, Any]:
    """The SuperLink pod's sidecar that registers the published keys, and unregisters those gone for good.

    It reads the keys the function lists beside the SuperLink
    (published_keys.authorized_keys), as the kubelet keeps them up to date in its volume.
    """
    mounts: list[dict[str, Any]] = [
        {"name": AUTHORIZED_KEYS_VOLUME, "mountPath": AUTHORIZED_KEYS_DIR, "readOnly": True},
        {"name": WORK_VOLUME, "mountPath": WORK_DIR},
    ]
    if reg.persistent:
        # Its own folder of the SuperLink's state volume: it sees none of the SuperLink's files.
        mounts.append({"name": STATE_VOLUME, "mountPath": REGISTRAR_STATE_DIR, "subPath": REGISTRAR_STATE})
    if reg.root_certificates:
        mounts.append(tls.ca_mount())
    # The token it reports retired keys with (registrations_role): only this container of the pod mounts it.
    mounts.append({"name": KUBE_VOLUME, "mountPath": KUBE_DIR, "readOnly": True})
    container = program(REGISTRAR, reg.image, reg.args(), mounts)
    container["env"] = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    container["restartPolicy"] = "Always"
    return container


def registrar_volumes(reg: Registration) -> list[dict[str, Any]]:
    """The registrar's program, scratch space and the published keys (its CA is the SuperLink pod's tls.CA_VOLUME)."""
    # Optional: the pod starts before the function first lists the keys.
    keys = {"name": authorized_keys_name(reg.federation), "optional": True}
    listed: dict[str, Any] = {"configMap": keys}
    if reg.sharded:
        # Every shard a group may write, mounted whether or not it is there yet: clusters
        # joining and leaving change what the files hold, never the SuperLink's pod.
        shards = [
            {
                "configMap": {
                    "name": shard_name(reg.federation, shard),
                    "optional": True,
                    "items": [{"key": AUTHORIZED_KEYS_FILE, "path": shard_file(shard)}],
                }
            }
            for shard in (f"{n:02d}" for n in range(SHARDS))
        ]
        listed = {"projected": {"sources": [listed, *shards]}}
    return [
        program_volume(reg.federation),
        {"name": WORK_VOLUME, "emptyDir": {}},
        {"name": AUTHORIZED_KEYS_VOLUME, **listed},
        kube_api_volume(),
    ]


def shard_name(federation: str, shard: str) -> str:
    """The ConfigMap beside the SuperLink where one group of remote clusters lists their keys."""
    return f"{authorized_keys_name(federation)}-{shard}"


def shard_file(shard: str) -> str:
    """Where the registrar reads a shard, beside the list."""
    return f"{AUTHORIZED_KEYS_FILE}-{shard}"


def registrations_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink where its registrar reports the keys it retired."""
    return f"{names.superlink(federation)}-registrations"


def registrations(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The registrar's report, created empty: the registrar writes it, Crossplane only reads it back."""
    return configmap(registrations_name(federation), namespace, labels, data={identity_program.RETIRED_FIELD: ""})


def reported_retired(live: Any) -> list[tuple[str, str]]:
    """The (key digest, holder) pairs a live report lists; none from anything else."""
    data = live.get("data") if isinstance(live, dict) else None
    text = data.get(identity_program.RETIRED_FIELD) if isinstance(data, dict) else None
    if not isinstance(text, str):
        return []
    pairs = (line.split() for line in text.splitlines())
    return sorted({(p[0], p[1]) for p in pairs if len(p) == 2 and DIGEST.match(p[0])})  # noqa: PLR2004 - two fields


# What identity_program.key_digest makes.
DIGEST = re.compile(rf"^[0-9a-f]{{{identity_program.DIGEST_LENGTH}}}$")
REPORTER = "superlink-registrations"


def registrations_role(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """What the SuperLink's ServiceAccount may do beside it: read and patch the report, nothing else."""
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
            "resourceNames": [registrations_name(federation)]}  # fmt: skip
    return role(f"{federation}-{REPORTER}", namespace, labels, [rule])


def registrations_binding(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Role above, granted to the SuperLink's own ServiceAccount alone.

    Not to the Federation's, which SuperNode pods in the same namespace run
    as: a pod's token would let it report others' keys retired.
    """
    return binding(f"{federation}-{REPORTER}", pods.superlink_service_account(federation), namespace, labels)


def retired_keys_name(federation: str) -> str:
    """The copy of the registrar's report in a pool namespace: the retired keys of that namespace's pods."""
    return f"{federation}-retired-keys"


def retired_keys(federation: str, namespace: str, labels: dict[str, str], digests: list[str]) -> dict[str, Any]:
    """The retired keys of one pool namespace, a digest a line, where its pods' rekey sidecars read them."""
    text = "".join(f"{d}\n" for d in sorted(set(digests)))
    return configmap(retired_keys_name(federation), namespace, labels, data={identity_program.RETIRED_FIELD: text})


def authorized_keys_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink that lists the published keys (published_keys.authorized_keys)."""
    return f"{names.superlink(federation)}-authorized-keys"


def kube_api_volume() -> dict[str, Any]:
    """A token of the pod's ServiceAccount and its cluster's CA, for the identity containers alone.

    The pods keep automountServiceAccountToken false: no other container gets a token.
    """
    token = {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}}
    ca = {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    return {"name": KUBE_VOLUME, "projected": {"sources": [token, ca], "defaultMode": 0o444}}


PUBLISHER = "supernode-keys"


def claim_name(workload: str, ordinal: int) -> str:
    """The identity claim of a StatefulSet's pod: `<template>-<pod name>`, as the StatefulSet names it."""
    return f"{IDENTITY_VOLUME}-{workload}-{ordinal}"


def publisher_name(federation: str, namespace: str, cluster: str) -> str:
    """The name of the Role that lets pools publish keys in a cluster's namespace, and of its binding.

    One per Federation (namespace: its own) and cluster (its ProviderConfig's name): each lists
    its own pools' claims, and two ProviderConfigs may name one cluster (a cluster reached two ways,
    a test fleet). With one name for both, each FederationCluster's Object would apply its own list
    over the other's at every poll: the other's pods could not read their claims until the next,
    and every change of the live Role woke both FederationClusters again (at 100 clusters over three
    spokes, about 200 reconciles a minute with nothing else changing).
    """
    digest = hashlib.sha256(f"{namespace}/{federation}/{cluster}".encode()).hexdigest()[:10]
    return f"{federation[:40]}-{PUBLISHER}-{digest}"


def publisher_role(name: str, namespace: str, labels: dict[str, str], *, claims: list[str]) -> dict[str, Any]:
    """What the pool's ServiceAccount may do in its namespace: create ConfigMaps (and read its pods' claims).

    Create only: it cannot read, change or delete what others published. What
    it may create is narrowed further by publication_policy (RBAC cannot
    restrict a create by name). claims: the identity claims of the pools'
    pods there, the only ones it may read (an empty list would mean all).
    name: publisher_name.
    """
    rules: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    if claims:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["persistentvolumeclaims"],
                "verbs": ["get"],
                "resourceNames": sorted(claims),
            }
        )
    return role(name, namespace, labels, rules)


# The pod a projected ServiceAccount token is bound to, as the API server tells admission.
_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"


def publication_policy_name(federation: str, namespace: str, cluster: str, pool_namespace: str) -> str:
    """The admission policy's name: cluster-wide, so unique per Federation, cluster and pool namespace."""
    digest = hashlib.sha256(f"{namespace}/{federation}/{cluster}/{pool_namespace}".encode()).hexdigest()[:12]
    return f"flower-{federation[:30]}-key-publications-{digest}"


def publication_policy(
    name: str, federation: str, pool_namespace: str, labels: dict[str, str], *, claims: bool
) -> dict[str, Any]:
    """What the API server lets the pool's ServiceAccount create: only its own pod's key publication.

    RBAC lets the account create any ConfigMap in the namespace; this policy
    has the API server refuse all but a `flwr-key-` ConfigMap of this
    Federation owned by the pod the request's token is bound to (or, on a
    StatefulSet, by that pod's identity claim). So a pool's pod cannot name
    another holder, publish for another Federation, or take a name the
    function's own objects use (a shard of the key list, the retired-keys
    report) before they are made.
    """
    account = f"system:serviceaccount:{pool_namespace}:{pods.service_account(federation)}"
    extra = "request.userInfo.extra"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
                ],
            },
            "matchConditions": [
                {"name": "pool-service-account", "expression": f"request.userInfo.username == '{account}'"}
            ],
            "variables": [
                {"name": "pod", "expression": f"'{_POD_NAME}' in {extra} ? {extra}['{_POD_NAME}'][0] : ''"},
                {"name": "podUID", "expression": f"'{_POD_UID}' in {extra} ? {extra}['{_POD_UID}'][0] : ''"},
            ],
            "validations": _publication_rules(federation, claims=claims),
        },
    }


def _publication_rules(federation: str, *, claims: bool) -> list[dict[str, str]]:
    """The policy's checks: a publication's name, its Federation, and that its one owner is the requesting pod."""
    owner = "object.metadata.ownerReferences[0]"
    owned = "has(object.metadata.ownerReferences) && size(object.metadata.ownerReferences) == 1"
    own_pod = f"({owner}.kind == 'Pod' && {owner}.name == variables.pod && {owner}.uid == variables.podUID)"
    own_claim = f"({owner}.kind == 'PersistentVolumeClaim' && {owner}.name == '{IDENTITY_VOLUME}-' + variables.pod)"
    label = names.INSTANCE_LABEL
    return [
        {
            # flwr-key-<its owner's uid>-: no name of the function's own objects (the gathered keys, a shard
            # of the key list, the retired-keys report), whatever the Federation is called.
            "expression": f"{owned} && object.metadata.name.startsWith('{key_publications.CONFIGMAP_PREFIX}'"
            f" + {owner}.uid + '-')",
            "message": "a SuperNode pool's ServiceAccount may create only key publications (flwr-key-<owner uid>-...)",
            "reason": "Forbidden",
        },
        {
            "expression": f"has(object.metadata.labels) && '{label}' in object.metadata.labels"
            f" && object.metadata.labels['{label}'] == '{federation}'",
            "message": f"a key publication of this pool is labelled {label}={federation}",
            "reason": "Forbidden",
        },
        {
            "expression": f"variables.pod != '' && {owned} && ({own_pod}{f' || {own_claim}' if claims else ''})",
            "message": "a key publication is owned by the pod whose token creates it"
            + (" or by that pod's identity claim" if claims else ""),
            # 403, as RBAC refuses: a refusal of who asks, not of what was written (422).
            "reason": "Forbidden",
        },
    ]


def publication_policy_binding(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """The policy in force: the API server denies what it refuses."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def publisher_binding(name: str, federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Role above (name: publisher_name), granted to the Federation's ServiceAccount in namespace."""
    return binding(name, pods.service_account(federation), namespace, labels)


def binding(role: str, account: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A RoleBinding of the Role role to one ServiceAccount of namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
