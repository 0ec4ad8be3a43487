"""The SuperLink: a one-replica StatefulSet and its Service."""

from __future__ import annotations

from typing import Any

from function import merge, names, pods, tls
from function.spec import (
    CONTROL_PORT,
    FLEET_PORT,
    SERVERAPPIO_PORT,
    STATE_PATH,
    STATE_VOLUME,
    FederationSpec,
    Persistence,
)


def service_address(federation: str, namespace: str) -> str:
    """The SuperLink Service's DNS name inside its cluster."""
    return f"{names.superlink(federation)}.{namespace}.svc"


def _container(spec: FederationSpec) -> dict[str, Any]:
    link = spec.superlink
    args = [f"--isolation={spec.isolationMode}"]
    if tls.insecure(spec):
        args.append("--insecure")
    if tls.enabled(spec):
        args += tls.superlink_args()
    if spec.nodeAuthentication is not None and spec.nodeAuthentication.enabled:
        args.append("--enable-supernode-auth")
    if link.persistence is not None:
        args += [f"--database={STATE_PATH}/state.db", f"--storage-dir={STATE_PATH}/ffs"]
    args += link.extraArgs
    ports = [
        {"containerPort": FLEET_PORT, "name": "fleet", "protocol": "TCP"},
        {"containerPort": CONTROL_PORT, "name": "control", "protocol": "TCP"},
    ]
    if spec.isolationMode == "process":
        ports.append({"containerPort": SERVERAPPIO_PORT, "name": "serverappio", "protocol": "TCP"})
    container: dict[str, Any] = {"name": "superlink", "image": link.image, "args": args, "ports": ports}
    if link.resources:
        container["resources"] = link.resources
    env = merge.by_name(link.env)
    if env:
        container["env"] = env
    mounts = [{"name": STATE_VOLUME, "mountPath": STATE_PATH}] if link.persistence is not None else []
    if tls.enabled(spec):
        mounts.append(tls.mount())
    mounts = merge.by_name(mounts, link.volumeMounts)
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _state_claim(persistence: Persistence) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": persistence.size}}}
    if persistence.storageClassName:
        spec["storageClassName"] = persistence.storageClassName
    return {"metadata": {"name": STATE_VOLUME}, "spec": spec}


def _superexec(spec: FederationSpec) -> dict[str, Any]:
    link = spec.superlink
    # The AppIO API is plain gRPC inside the pod, whatever the Fleet API uses.
    args = [
        "--plugin-type=serverapp",
        f"--appio-api-address=localhost:{SERVERAPPIO_PORT}",
        "--insecure",
    ]
    container: dict[str, Any] = {"name": "superexec-serverapp", "image": link.superexecImage, "args": args}
    if link.superexecResources:
        container["resources"] = link.superexecResources
    env = merge.by_name(link.env)
    if env:
        container["env"] = env
    mounts = link.superexecVolumeMounts or link.volumeMounts
    if mounts:
        container["volumeMounts"] = merge.by_name(mounts)
    return container


def statefulset(federation: str, namespace: str, spec: FederationSpec) -> dict[str, Any]:
    """The SuperLink's one-replica StatefulSet, its SuperExec sidecar in process mode."""
    name = names.superlink(federation)
    labels = names.superlink_labels(federation)
    containers = [_container(spec)]
    if spec.isolationMode == "process":
        containers.append(_superexec(spec))
    pod_spec: dict[str, Any] = {"containers": containers}
    volumes = merge.by_name(spec.superlink.volumes)
    if tls.enabled(spec):
        volumes = merge.add_missing(volumes, [tls.superlink_volume(federation, spec)])
    if volumes:
        pod_spec["volumes"] = volumes
    workload: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "serviceName": name,
            "template": merge.pod_template(labels, pods.harden(pod_spec, federation, spec), spec.superlink.podTemplate),
        },
    }
    claims = merge.claim_templates(spec.superlink.volumeClaimTemplates)
    if spec.superlink.persistence is not None:
        claims = [_state_claim(spec.superlink.persistence), *claims]
    if claims:
        workload["spec"]["volumeClaimTemplates"] = claims
    return workload


def service(federation: str, namespace: str, spec: FederationSpec) -> dict[str, Any]:
    """The SuperLink's Service: Fleet and Control ports, ServerAppIO too in process mode."""
    svc = spec.superlink.service
    managed = names.superlink_labels(federation)
    ports = [
        {"name": "fleet", "port": svc.ports.grpc, "protocol": "TCP", "targetPort": FLEET_PORT},
        {"name": "control", "port": svc.ports.extra, "protocol": "TCP", "targetPort": CONTROL_PORT},
    ]
    if spec.isolationMode == "process":
        ports.append(
            {"name": "serverappio", "port": svc.ports.serverAppIO, "protocol": "TCP", "targetPort": SERVERAPPIO_PORT}
        )
    metadata: dict[str, Any] = {
        "name": names.superlink(federation),
        "namespace": namespace,
        "labels": {**svc.labels, **managed},
    }
    if svc.annotations:
        metadata["annotations"] = dict(svc.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": svc.type, "selector": managed, "ports": ports},
    }
