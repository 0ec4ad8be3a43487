"""SuperNode identities: one key pair per SuperNode, made in its pod and registered by it.

Flower binds a node ID to a key: two SuperNodes cannot share one. So each
SuperNode pod makes its own key pair, on a volume of its own, and its private
key never leaves that volume: no Secret, Object or XR ever holds it.

* StatefulSet pools keep it on a claim per ordinal (volumeClaimTemplates), so a
  pod that is replaced keeps its key and its node ID.
* DaemonSet pools keep it in memory (an emptyDir), for as long as the pod runs
  on its node; a replaced pod is a new identity.

Registration is Flower's own (`flwr supernode register` against the Control
API), run by the pod that holds the key: an init container registers the key
before the SuperNode starts, and a sidecar registers it again every interval,
so registrations lost with a SuperLink's state come back by themselves. In the
SuperLink's pod a sidecar unregisters SuperNodes that stay offline past a grace
period: the identities of removed replicas and pools. All three run the
SuperLink's image, so the CLI always speaks the SuperLink's release, and
function/builders/identity_program.py, run by its Python (no shell, no user text).
Each pod also publishes its public key through its own cluster's API
(identity_program.publish), with a projected ServiceAccount token that only
its identity containers mount and a Role that lets the pool's ServiceAccount
create ConfigMaps in its namespace (publisher_role); Crossplane brings the
published keys back (function/builders/published_keys.py).
The program ships once per namespace, in a ConfigMap named by its content
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
import zipfile
from typing import Any

from function.api import names
from function.api.spec import (
    AUTH_KEY_PATH,
    IDENTITY_VOLUME,
    FederationSpec,
    NodeAuthentication,
)
from function.builders import identity_program, pods, tls
from function.releases.flower import Dialect

KEY_DIR = posixpath.dirname(AUTH_KEY_PATH)
WORK_VOLUME = "supernode-identity-work"
WORK_DIR = "/var/run/flower-identity"
INIT_CONTAINER = "supernode-identity"
SIDECAR = "supernode-registration"
REAPER = "supernode-reaper"
# The program's text: it runs in the Flower image, which has no copy of this package.
PROGRAM = inspect.getsource(identity_program)
PROGRAM_VOLUME = "identity-program"
PROGRAM_DIR = "/etc/flower-identity"
# A zip archive, which Python runs by its __main__.py (zipapp).
PROGRAM_FILE = "identity_program.pyz"
# Names the ConfigMap after the program's content: immutable, and replaced (not edited) when it changes.
PROGRAM_DIGEST = hashlib.sha256(PROGRAM.encode()).hexdigest()[:10]
# The projected ServiceAccount token and cluster CA the identity containers publish the key with.
KUBE_VOLUME = "identity-kube-api"
KUBE_DIR = "/var/run/flower-identity-api"
# A token lives an hour; the kubelet renews it well before, the program reads it at every call.
TOKEN_SECONDS = 3600
# Marks a published key's ConfigMap; with the Federation's instance label it selects the keys to carry.
KEY_LABEL = "flower.flwr.ai/supernode-key"
# The published keys, as the function lists them beside the SuperLink, in the reaper's volume.
AUTHORIZED_KEYS_VOLUME = "authorized-keys"
AUTHORIZED_KEYS_DIR = "/etc/flower-authorized-keys"
AUTHORIZED_KEYS_FILE = "authorized-keys"
# The pod's own name, namespace and uid, from the downward API.
POD_FIELDS = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}
# The sidecar is ready while the SuperLink confirmed its key within the last checks:
# a SuperNode pod is ready only with its key registered, so ready pods count registered identities.
FRESH = "import os, sys, time; sys.exit(time.time() - os.path.getmtime(sys.argv[1]) > float(sys.argv[2]))"


def settings(spec: FederationSpec) -> NodeAuthentication:
    """The node authentication settings, defaults filled in."""
    return spec.nodeAuthentication or NodeAuthentication()


@dataclasses.dataclass(frozen=True)
class Registration:
    """Where and how a pool's SuperNodes register: the SuperLink's Control API and the CLI that speaks it."""

    federation: str
    image: str
    # The ConfigMap holding the program, in every namespace where it runs (program_configmap).
    program: str
    address: str
    cli_config: str
    # With TLS, the CA certificate the CLI trusts, as the pod mounts it.
    root_certificates: str | None
    interval: int

    def args(self, mode: str, **extra: str) -> list[str]:
        """The program's command line."""
        args = [mode, f"--address={self.address}", f"--cli-config={self.cli_config}", f"--work={WORK_DIR}"]
        if self.root_certificates:
            args.append(f"--root-certificates={self.root_certificates}")
        args.append(f"--interval={self.interval}")
        return args + [f"--{k.replace('_', '-')}={v}" for k, v in sorted(extra.items())]


def _archive(source: str) -> bytes:
    """The program as an archive `python` runs, deflated to a third of its size.

    It ships once per cluster, so its size counts against what Crossplane reads
    from a function (4 MiB) for every selected cluster. A fixed timestamp and
    level: the same program always makes the same bytes.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        entry = zipfile.ZipInfo("__main__.py", date_time=(1980, 1, 1, 0, 0, 0))
        entry.compress_type = zipfile.ZIP_DEFLATED
        entry.external_attr = 0o644 << 16
        archive.writestr(entry, source, compresslevel=9)
    return out.getvalue()


PROGRAM_ARCHIVE = base64.b64encode(_archive(PROGRAM)).decode()


def program_configmap_name(federation: str) -> str:
    """The name of the ConfigMap holding this program for federation's pods."""
    return f"{federation}-identity-program-{PROGRAM_DIGEST}"


def program_configmap(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The program, once per namespace where identity containers run; immutable, as its name is its content."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": program_configmap_name(federation), "namespace": namespace, "labels": labels},
        "immutable": True,
        "binaryData": {PROGRAM_FILE: PROGRAM_ARCHIVE},
    }


def registration(federation: str, spec: FederationSpec, superlink_dialect: Dialect, address: str) -> Registration:
    """How parts of federation reach the Control API at address, with the SuperLink's own CLI."""
    if spec.superlink.image is None:
        msg = "spec.superlink.image is unset: compose.federation names it from spec.version"
        raise ValueError(msg)
    ca = f"{tls.TLS_DIR}/{tls.CA_FILE}" if tls.enabled(spec) else None
    return Registration(
        federation,
        spec.superlink.image,
        program_configmap_name(federation),
        address,
        superlink_dialect.cli_config,
        ca,
        settings(spec).registrationIntervalSeconds,
    )


def _container(
    name: str, reg: Registration, args: list[str], mounts: list[dict[str, Any]], *, trust: dict[str, Any] | None = None
) -> dict[str, Any]:
    """trust: the mount of the CA certificate, where the pod's TLS volume holds more than that."""
    work = {"name": WORK_VOLUME, "mountPath": WORK_DIR}
    program = {"name": PROGRAM_VOLUME, "mountPath": PROGRAM_DIR, "readOnly": True}
    if reg.root_certificates:
        mounts = [*mounts, trust or tls.mount()]
    return {
        "name": name,
        "image": reg.image,
        "command": ["python", f"{PROGRAM_DIR}/{PROGRAM_FILE}"],
        "args": args,
        "volumeMounts": [*mounts, program, work],
    }


def publication_labels(federation: str, pool: str) -> dict[str, str]:
    """The labels of a published key: its Federation, its pool, and that it is a key."""
    return {names.INSTANCE_LABEL: federation, names.POOL_LABEL: pool, KEY_LABEL: "true"}


def _publisher(container: dict[str, Any], reg: Registration, pool: str, *, claims: bool) -> dict[str, Any]:
    """container, also publishing the key through the Kubernetes API: its pod's identity and the token."""
    args = [f"--kube-credentials={KUBE_DIR}"]
    args += [f"--label={k}={v}" for k, v in sorted(publication_labels(reg.federation, pool).items())]
    if claims:
        # The StatefulSet's claim for this pod: the key lives, and its publication with it, as long as the claim.
        args.append(f"--owner-claim={IDENTITY_VOLUME}-$(POD_NAME)")
    env = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in POD_FIELDS.items()]
    mount = {"name": KUBE_VOLUME, "mountPath": KUBE_DIR, "readOnly": True}
    return {**container, "args": container["args"] + args, "env": env,
            "volumeMounts": [*container["volumeMounts"], mount]}  # fmt: skip


def _program_volume(reg: Registration) -> dict[str, Any]:
    return {"name": PROGRAM_VOLUME, "configMap": {"name": reg.program, "defaultMode": 0o444}}


def pool_init_containers(reg: Registration, pool: str, *, claims: bool) -> list[dict[str, Any]]:
    """The key maker and first registration, then the sidecar that keeps the key registered.

    Both publish the key (the sidecar until Kubernetes holds it); claims: the
    key lives on the pod's StatefulSet claim, which then owns the publication.
    """
    key = {"name": IDENTITY_VOLUME, "mountPath": KEY_DIR}
    first = _container(INIT_CONTAINER, reg, reg.args("identity", key_dir=KEY_DIR), [key])
    # Writable: it replaces a key the SuperLink unregistered (identity_program).
    keep = _container(SIDECAR, reg, reg.args("keep", key_dir=KEY_DIR), [key])
    # A native sidecar: it runs beside the SuperNode for the pod's life, and its
    # readiness is the pod's: ready while the last checks found the key registered.
    keep["restartPolicy"] = "Always"
    marker = f"{WORK_DIR}/{identity_program.REGISTERED}"
    keep["readinessProbe"] = {
        "exec": {"command": ["python", "-c", FRESH, marker, str(3 * reg.interval)]},
        "periodSeconds": 10,
        "failureThreshold": 1,
    }
    return [_publisher(first, reg, pool, claims=claims), _publisher(keep, reg, pool, claims=claims)]


def supernode_mount() -> dict[str, Any]:
    """The identity volume in the SuperNode container, where --auth-supernode-private-key points."""
    return {"name": IDENTITY_VOLUME, "mountPath": KEY_DIR, "readOnly": True}


def pool_volumes(spec: FederationSpec, reg: Registration) -> list[dict[str, Any]]:
    """The program, its scratch space and, for a DaemonSet, the identity itself, in memory."""
    memory = {"medium": "Memory", "sizeLimit": "1Mi"}
    volumes = [_program_volume(reg), {"name": WORK_VOLUME, "emptyDir": {}}, kube_api_volume()]
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


def reaper(reg: Registration, grace: int) -> dict[str, Any]:
    """The SuperLink pod's sidecar that unregisters identities offline for longer than grace seconds.

    Never one whose key is published: it reads the published keys the function
    lists beside the SuperLink (published_keys.authorized_keys), as the kubelet
    keeps them up to date in its volume.
    """
    listed = f"{AUTHORIZED_KEYS_DIR}/{AUTHORIZED_KEYS_FILE}"
    mount = {"name": AUTHORIZED_KEYS_VOLUME, "mountPath": AUTHORIZED_KEYS_DIR, "readOnly": True}
    args = reg.args("reap", grace=str(grace), authorized_keys=listed)
    container = _container(REAPER, reg, args, [mount], trust=tls.ca_mount())
    container["restartPolicy"] = "Always"
    return container


def reaper_volumes(reg: Registration) -> list[dict[str, Any]]:
    """The reaper's program, scratch space and the published keys (its CA is the SuperLink pod's tls.CA_VOLUME)."""
    # Optional: the pod starts before the function first lists the keys.
    keys = {"name": authorized_keys_name(reg.federation), "optional": True}
    return [
        _program_volume(reg),
        {"name": WORK_VOLUME, "emptyDir": {}},
        {"name": AUTHORIZED_KEYS_VOLUME, "configMap": keys},
    ]


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


def publisher_role(federation: str, namespace: str, labels: dict[str, str], *, claims: bool) -> dict[str, Any]:
    """What the pool's ServiceAccount may do in its namespace: create ConfigMaps (and read the pods' claims).

    Create only: it cannot read, change or delete what others published.
    """
    rules: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    if claims:
        rules.append({"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": f"{federation}-{PUBLISHER}", "namespace": namespace, "labels": labels},
        "rules": rules,
    }


def publisher_binding(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Role above, granted to the Federation's ServiceAccount in namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{federation}-{PUBLISHER}", "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{federation}-{PUBLISHER}"},
        "subjects": [{"kind": "ServiceAccount", "name": pods.service_account(federation), "namespace": namespace}],
    }
