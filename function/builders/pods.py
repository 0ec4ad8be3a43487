"""What every Flower pod gets.

That is the restricted Pod Security Standard, writable scratch space, health
probes, its ServiceAccount and image pull settings.

The Flower images run as user app (uid 49999) with HOME=/app. With a
read-only root filesystem, Flower needs somewhere to write: each container
gets an emptyDir mounted at /app/.flwr (FLWR_HOME: apps, state) and /tmp.
"""

from __future__ import annotations

from typing import Any

from function.api import names
from function.api.spec import FLOWER_UID, HEALTH_PORTS, FederationSpec
from function.builders import merge

POD_SECURITY = {
    "fsGroup": FLOWER_UID,
    "runAsGroup": FLOWER_UID,
    "runAsNonRoot": True,
    "runAsUser": FLOWER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}
# Flower reports usage to its telemetry service and, on shutdown, waits up to
# a minute for that request: with egress narrowed to what Flower needs, a pod
# would outlive its grace period. Off, unless the user's env says otherwise.
TELEMETRY = {"name": "FLWR_TELEMETRY_ENABLED", "value": "0"}
# Installing an app's dependencies (spec.allowRuntimeDependencyInstallation)
# writes environments under FLWR_HOME and uv's cache, by default in
# $HOME/.cache, on the read-only root filesystem: the cache goes to scratch.
UV_CACHE = {"name": "UV_CACHE_DIR", "value": "/tmp/uv-cache"}  # noqa: S108 - on the container's own emptyDir
SCRATCH = (("flwr", "/app/.flwr"), ("tmp", "/tmp"))  # noqa: S108 - paths in the container, on its own emptyDir
# Requests for a container the user gave no resources: without any a pod is BestEffort, the first the
# kubelet evicts under pressure. No limits: a limit the function guessed would throttle or kill
# training it knows nothing of. The Flower processes hold a Python interpreter with Flower loaded
# (about 150-250 MiB each); the ClientApp's training is the user's to size (supernodeResources,
# superexecResources).
FLOWER_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
# The helpers: nginx (fleet-proxy), and the Python programs of node authentication and SuperExec secrets.
HELPER_REQUESTS = {
    "fleet-proxy": {"cpu": "10m", "memory": "16Mi"},
    "superexec-auth": {"cpu": "10m", "memory": "32Mi"},
    # Asleep but for a file read every interval; it loads the key maker only on the rare retirement.
    "supernode-rekey": {"cpu": "5m", "memory": "32Mi"},
    # A watch and a list of the namespace's keys (gather_program bounds it well under this).
    "supernode-keys-gatherer": {"cpu": "10m", "memory": "64Mi"},
}
PROGRAM_REQUESTS = {"cpu": "10m", "memory": "128Mi"}


def service_account(federation: str) -> str:
    """Name of the Federation's ServiceAccount, the same in every namespace its pods run in."""
    return f"{federation}-flower"


def superlink_service_account(federation: str) -> str:
    """Name of the SuperLink pod's own ServiceAccount: what its registrar may do, no SuperNode pod may."""
    return names.superlink(federation)


def service_account_manifest(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A ServiceAccount of Flower pods in one namespace.

    Flower never talks to the Kubernetes API: no token in its pods (the
    identity containers alone mount one, identity.kube_api_volume).
    """
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "automountServiceAccountToken": False,
    }


def default_requests(container: str) -> dict[str, str]:
    """The requests a container of ours gets when the user gave it no resources."""
    if container in HEALTH_PORTS:
        return FLOWER_REQUESTS
    return HELPER_REQUESTS.get(container, PROGRAM_REQUESTS)


def _with_requests(container: dict[str, Any]) -> dict[str, Any]:
    # Only where the user said nothing: requests of ours beside the user's limits could exceed them.
    if container.get("resources"):
        return container
    return {**container, "resources": {"requests": default_requests(container["name"])}}


def _scratch_volume(container: str) -> str:
    return f"scratch-{container}"


def _harden_container(container: dict[str, Any], spec: FederationSpec) -> dict[str, Any]:
    out = _with_requests(container)
    port = HEALTH_PORTS.get(out["name"])
    if port is None:
        return _harden_helper(out, spec)
    if spec.healthProbes:
        out["args"] = [*out["args"], f"--health-server-address=0.0.0.0:{port}"]
        # A builder that knows a better readiness signal has set it already.
        out.setdefault("readinessProbe", {"grpc": {"port": port}, "periodSeconds": 10, "failureThreshold": 3})
        out["livenessProbe"] = {
            "grpc": {"port": port},
            "initialDelaySeconds": 10,
            "periodSeconds": 20,
            "failureThreshold": 6,
        }
    defaults = [TELEMETRY, UV_CACHE] if spec.allowRuntimeDependencyInstallation else [TELEMETRY]
    out["env"] = merge.add_missing(out.get("env", []), defaults)
    if spec.imagePullPolicy:
        out["imagePullPolicy"] = spec.imagePullPolicy
    # A container that needs privilege (AMD mountAll) keeps only that.
    if not (out.get("securityContext") or {}).get("privileged"):
        out["securityContext"] = CONTAINER_SECURITY
    taken = {m["mountPath"] for m in out.get("volumeMounts", [])}
    scratch = [
        {"name": _scratch_volume(out["name"]), "mountPath": path, "subPath": sub}
        for sub, path in SCRATCH
        if path not in taken
    ]
    if scratch:
        out["volumeMounts"] = [*out.get("volumeMounts", []), *scratch]
    return out


def _harden_helper(container: dict[str, Any], spec: FederationSpec) -> dict[str, Any]:
    """A container that is no Flower process (the Fleet API proxy): restricted, with a scratch /tmp, its own probes."""
    out = _harden_init_container(container, spec)
    scratch = {"name": _scratch_volume(out["name"]), "mountPath": "/tmp", "subPath": "tmp"}  # noqa: S108 - its emptyDir
    out["volumeMounts"] = [*out.get("volumeMounts", []), scratch]
    return out


def _harden_init_container(container: dict[str, Any], spec: FederationSpec) -> dict[str, Any]:
    """An init container runs once and serves nothing: the security context and pull policy alone."""
    out = {**_with_requests(container), "securityContext": CONTAINER_SECURITY}
    if spec.imagePullPolicy:
        out["imagePullPolicy"] = spec.imagePullPolicy
    return out


def harden(pod_spec: dict[str, Any], service_account_name: str, spec: FederationSpec) -> dict[str, Any]:
    """The pod spec with the defaults above, run as that ServiceAccount.

    A podTemplate merged later can override pod-level ones.
    """
    out = dict(pod_spec)
    out["containers"] = [_harden_container(c, spec) for c in pod_spec["containers"]]
    if pod_spec.get("initContainers"):
        out["initContainers"] = [_harden_init_container(c, spec) for c in pod_spec["initContainers"]]
    out["securityContext"] = POD_SECURITY
    out["serviceAccountName"] = service_account_name
    out["automountServiceAccountToken"] = False
    if spec.imagePullSecrets:
        out["imagePullSecrets"] = [{"name": s.name} for s in spec.imagePullSecrets]
    scratch = [{"name": _scratch_volume(c["name"]), "emptyDir": {}} for c in pod_spec["containers"]]
    out["volumes"] = merge.add_missing(list(pod_spec.get("volumes", [])), scratch)
    return out
