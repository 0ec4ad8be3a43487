"""The SuperLink: a one-replica StatefulSet and its Service, in the dialect of its Flower release."""

from __future__ import annotations

from typing import Any

from function import identity, merge, names, pods, superexec_auth, tls
from function.flower import Dialect
from function.spec import (
    CONTROL_PORT,
    FLEET_PORT,
    SERVERAPPIO_PORT,
    STATE_PATH,
    STATE_VOLUME,
    FederationSpec,
    Persistence,
)

# The CIDRs of every address: a Service or NetworkPolicy admitting one is open to all.
WORLD = ("0.0.0.0/0", "::/0")
# Flower's switch for its gRPC Fleet adapter (1.40+; flower.Releases.legacy_fleet).
LEGACY_FLEET_ENV = {"name": "FLWR_INTERNAL_GRPC_FLEET_API", "value": "1"}


def service_address(federation: str, namespace: str) -> str:
    """The SuperLink Service's DNS name inside its cluster."""
    return f"{names.superlink(federation)}.{namespace}.svc"


def _args(spec: FederationSpec, dialect: Dialect) -> list[str]:
    link = spec.superlink
    args = [f"--isolation={spec.isolationMode}", *dialect.superlink_listen_args()]
    if tls.insecure(spec):
        args.append("--insecure")
    if tls.enabled(spec):
        args += tls.superlink_args()
    if identity.enabled(spec):
        args.append("--enable-supernode-auth")
    if identity.superlink_state(spec) is not None:
        args.append(f"--database={STATE_PATH}/state.db")
        if dialect.storage_dir:
            args.append(f"--storage-dir={STATE_PATH}/ffs")
    if superexec_auth.enabled(spec, dialect):
        args += superexec_auth.args()
    args += dialect.superlink_dependency_args(allow=spec.allowRuntimeDependencyInstallation)
    return [*args, *link.extraArgs]


def _image(spec: FederationSpec) -> str:
    if spec.superlink.image is None:
        msg = "spec.superlink.image is unset: compose.federation names it from spec.version"
        raise ValueError(msg)
    return spec.superlink.image


def _container(spec: FederationSpec, dialect: Dialect, *, legacy_fleet: bool) -> dict[str, Any]:
    link = spec.superlink
    ports = _ports(spec, dialect)
    if legacy_fleet:
        # Flower's gRPC Fleet adapter (flower.Releases.legacy_fleet), on
        # --fleet-api-address's default, 0.0.0.0:9092.
        ports = [{"containerPort": FLEET_PORT, "name": "fleet", "protocol": "TCP"}, *ports]
    container: dict[str, Any] = {
        "name": "superlink",
        "image": _image(spec),
        "args": _args(spec, dialect),
        "ports": ports,
    }
    if spec.healthProbes and dialect.control_api == "http":
        # From 1.37 the HTTP listener binds every address, so the kubelet can
        # ask GET /health; the gRPC health server always says SERVING and stays
        # the liveness probe.
        scheme = "HTTPS" if tls.enabled(spec) else "HTTP"
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": CONTROL_PORT, "scheme": scheme},
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    if link.resources:
        container["resources"] = link.resources
    # Ours wins over the user's: the Service's Fleet port leads there.
    env = merge.by_name(link.env, [LEGACY_FLEET_ENV] if legacy_fleet else [])
    if env:
        container["env"] = env
    mounts = [{"name": STATE_VOLUME, "mountPath": STATE_PATH}] if identity.superlink_state(spec) is not None else []
    if tls.enabled(spec):
        mounts.append(tls.mount())
    if superexec_auth.enabled(spec, dialect):
        mounts.append(superexec_auth.mount())
    mounts = merge.by_name(mounts, link.volumeMounts)
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _ports(spec: FederationSpec, dialect: Dialect) -> list[dict[str, Any]]:
    """The ports other pods reach: a listener bound to the loopback is no container port."""
    if dialect.fleet_api == "http":
        return [{"containerPort": CONTROL_PORT, "name": "http", "protocol": "TCP"}]
    if dialect.control_api == "http":
        return [
            {"containerPort": FLEET_PORT, "name": "fleet", "protocol": "TCP"},
            {"containerPort": CONTROL_PORT, "name": "http", "protocol": "TCP"},
        ]
    ports = [
        {"containerPort": FLEET_PORT, "name": "fleet", "protocol": "TCP"},
        {"containerPort": CONTROL_PORT, "name": "control", "protocol": "TCP"},
    ]
    if spec.isolationMode == "process" and dialect.runtime_api == "grpc":
        ports.append({"containerPort": SERVERAPPIO_PORT, "name": "serverappio", "protocol": "TCP"})
    return ports


def _state_claim(persistence: Persistence) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": persistence.size}}}
    if persistence.storageClassName:
        spec["storageClassName"] = persistence.storageClassName
    return {"metadata": {"name": STATE_VOLUME}, "spec": spec}


def _superexec(spec: FederationSpec, dialect: Dialect) -> dict[str, Any]:
    link = spec.superlink
    args = dialect.superexec_args("serverapp", dialect.runtime_port)
    # The API it dials is plain inside the pod, whatever the Fleet API uses,
    # until 1.37 puts it behind the SuperLink's TLS (then its certificate must
    # also name localhost).
    secure = tls.enabled(spec) and dialect.runtime_tls
    args += tls.supernode_args() if secure else ["--insecure"]
    if superexec_auth.enabled(spec, dialect):
        args += superexec_auth.args()
    args += dialect.dependency_args(allow=spec.allowRuntimeDependencyInstallation)
    container: dict[str, Any] = {"name": "superexec-serverapp", "image": link.superexecImage, "args": args}
    if link.superexecResources:
        container["resources"] = link.superexecResources
    env = merge.by_name(link.env)
    if env:
        container["env"] = env
    mounts = link.superexecVolumeMounts or link.volumeMounts
    if secure:
        mounts = [*mounts, tls.ca_mount()]
    if superexec_auth.enabled(spec, dialect):
        mounts = [*mounts, superexec_auth.mount()]
    if mounts:
        container["volumeMounts"] = merge.by_name(mounts)
    return container


def statefulset(
    federation: str,
    namespace: str,
    spec: FederationSpec,
    dialect: Dialect,
    *,
    legacy_fleet: bool = False,
    registration: identity.Registration | None = None,
) -> dict[str, Any]:
    """The SuperLink's one-replica StatefulSet, its SuperExec sidecar in process mode.

    legacy_fleet: also serve the gRPC Fleet API, for pools before 1.40;
    registration: with node authentication, how its reaper reaches the Control API.
    """
    name = names.superlink(federation)
    labels = names.superlink_labels(federation)
    containers = [_container(spec, dialect, legacy_fleet=legacy_fleet)]
    if spec.isolationMode == "process":
        containers.append(_superexec(spec, dialect))
    pod_spec: dict[str, Any] = {"containers": containers}
    volumes = merge.by_name(spec.superlink.volumes)
    init: list[dict[str, Any]] = []
    if superexec_auth.enabled(spec, dialect):
        init.append(superexec_auth.init_container(_image(spec)))
        volumes = merge.add_missing(volumes, [superexec_auth.volume()])
    if registration is not None:
        init.append(identity.reaper(registration, identity.settings(spec).unregisterAfterSeconds))
        volumes = merge.add_missing(volumes, identity.reaper_volumes())
    if tls.enabled(spec):
        # The whole Secret for the SuperLink; its CA alone for the containers that only dial it.
        volumes = merge.add_missing(volumes, [tls.superlink_volume(federation, spec)])
        if any(m["name"] == tls.CA_VOLUME for c in [*containers, *init] for m in c.get("volumeMounts", [])):
            volumes = merge.add_missing(volumes, [tls.superlink_ca_volume(federation, spec)])
    if init:
        pod_spec["initContainers"] = init
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
            "template": merge.pod_template(
                labels,
                pods.harden(pod_spec, federation, spec),
                spec.superlink.podTemplate,
            ),
        },
    }
    claims = merge.claim_templates(spec.superlink.volumeClaimTemplates)
    kept = identity.superlink_state(spec)
    if kept is not None:
        claims = [_state_claim(kept), *claims]
    if claims:
        workload["spec"]["volumeClaimTemplates"] = claims
    return workload


def service(
    federation: str, namespace: str, spec: FederationSpec, dialect: Dialect, *, fleet_target: int | None = None
) -> dict[str, Any]:
    """The SuperLink's Service: Fleet and Control ports, ServerAppIO too in process mode while it is gRPC.

    Its ports stay the operator's whatever the release, so addresses users
    and remote pools hold keep working across upgrades: from 1.40 both lead
    to the one HTTP listener, unless fleet_target keeps the Fleet port on the
    gRPC Fleet adapter for older pools.
    """
    svc = spec.superlink.service
    managed = names.superlink_labels(federation)
    target = dialect.fleet_port if fleet_target is None else fleet_target
    ports = [
        {"name": "fleet", "port": svc.ports.grpc, "protocol": "TCP", "targetPort": target},
        {"name": "control", "port": svc.ports.extra, "protocol": "TCP", "targetPort": CONTROL_PORT},
    ]
    if spec.isolationMode == "process" and dialect.runtime_api == "grpc":
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
    service_spec: dict[str, Any] = {"type": svc.type, "selector": managed, "ports": ports}
    if svc.externalTrafficPolicy is not None:
        service_spec["externalTrafficPolicy"] = svc.externalTrafficPolicy
    elif svc.type == "LoadBalancer":
        # The SuperNodes' own addresses reach the pod, for the NetworkPolicy's
        # fleetCIDRs to judge; the balancer sends them to the node of the one
        # SuperLink replica. Not for NodePort: nodeAddress may name another node.
        service_spec["externalTrafficPolicy"] = "Local"
    ranges = source_ranges(spec)
    if ranges:
        service_spec["loadBalancerSourceRanges"] = ranges
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": service_spec}


def source_ranges(spec: FederationSpec) -> list[str]:
    """The addresses a LoadBalancer admits: those named, else those the NetworkPolicy admits; [] for any."""
    svc = spec.superlink.service
    if svc.type != "LoadBalancer":
        return []
    if svc.loadBalancerSourceRanges is not None:
        return list(svc.loadBalancerSourceRanges)
    return list(spec.networkPolicy.fleetCIDRs) if spec.networkPolicy.enabled else []


def exposure_warnings(spec: FederationSpec) -> list[str]:
    """What an exposed Fleet API lets anyone do, said where the user looks (the XR's events)."""
    svc = spec.superlink.service
    warnings = []
    if svc.type != "ClusterIP" and tls.insecure(spec):
        warnings.append(
            f"The SuperLink's {svc.type} Service carries the Fleet API without TLS to every address that "
            "reaches it: set spec.tls"
        )
    ranges = set(source_ranges(spec))
    if svc.type == "LoadBalancer" and (not ranges or ranges & set(WORLD)):
        warnings.append(
            "The SuperLink's LoadBalancer admits every address that reaches it: list the addresses remote "
            "SuperNodes come from in spec.networkPolicy.fleetCIDRs (or spec.superlink.service.loadBalancerSourceRanges)"
        )
    if spec.networkPolicy.enabled and set(spec.networkPolicy.fleetCIDRs) & set(WORLD):
        warnings.append(
            "spec.networkPolicy.fleetCIDRs admits every address to the Fleet API: list the addresses "
            "remote SuperNodes come from"
        )
    return warnings
