"""The SuperLink: a one-replica StatefulSet and its Service, in the dialect of its Flower release."""

from __future__ import annotations

from typing import Any

from function.api import names
from function.api.spec import (
    STATE_PATH,
    STATE_VOLUME,
    FederationSpec,
    Persistence,
    node_authentication,
    superlink_state,
)
from function.builders import fleet_proxy, identity, merge, pods, runner, superexec_auth, tls
from function.federation.value import Federation
from function.releases.flower import CONTROL_PORT, FLEET_PORT, FLEET_PROXY_PORT, Dialect

# The CIDRs of every address: a Service or NetworkPolicy admitting one is open to all.
WORLD = ("0.0.0.0/0", "::/0")
# Flower's switch for its gRPC Fleet adapter (1.40+; flower.Releases.legacy_fleet).
LEGACY_FLEET_ENV = {"name": "FLWR_INTERNAL_GRPC_FLEET_API", "value": "1"}


def service_address(federation: str, namespace: str) -> str:
    """The SuperLink Service's DNS name inside its cluster."""
    return f"{names.superlink(federation)}.{namespace}.svc"


def _args(spec: FederationSpec, dialect: Dialect, *, control_open: bool) -> list[str]:
    link = spec.superlink
    args = [f"--isolation={spec.isolationMode}", *dialect.superlink_listen_args(control_open=control_open)]
    if tls.insecure(spec):
        args.append("--insecure")
    if tls.enabled(spec):
        args += tls.superlink_args()
    if node_authentication(spec):
        args.append("--enable-supernode-auth")
    if superlink_state(spec) is not None:
        args.append(f"--database={STATE_PATH}/state.db")
        if dialect.storage_dir:
            args.append(f"--storage-dir={STATE_PATH}/ffs")
    if superexec_auth.enabled(spec, dialect):
        args += superexec_auth.args()
    args += dialect.superlink_dependency_args(allow=spec.allowRuntimeDependencyInstallation)
    return [*args, *link.extraArgs]


def _container(
    spec: FederationSpec, image: str, dialect: Dialect, *, legacy_fleet: bool, control_open: bool
) -> dict[str, Any]:
    link = spec.superlink
    container: dict[str, Any] = {
        "name": "superlink",
        "image": image,
        "args": _args(spec, dialect, control_open=control_open),
    }
    ports = _ports(dialect, legacy_fleet=legacy_fleet, control_open=control_open)
    if ports:
        container["ports"] = ports
    if spec.healthProbes and dialect.control_api == "http" and control_open:
        # From 1.37 an HTTP listener on every address lets the kubelet ask
        # GET /health (on the loopback, the Fleet API proxy asks it); the gRPC
        # health server always says SERVING and stays the liveness probe.
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
    mounts = [{"name": STATE_VOLUME, "mountPath": STATE_PATH}] if superlink_state(spec) is not None else []
    if tls.enabled(spec):
        mounts.append(tls.mount())
    if superexec_auth.enabled(spec, dialect):
        mounts.append(superexec_auth.mount())
    mounts = merge.by_name(mounts, link.volumeMounts)
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _ports(dialect: Dialect, *, legacy_fleet: bool, control_open: bool) -> list[dict[str, Any]]:
    """The ports other pods reach: the gRPC Fleet API, and Control when it is opened.

    A listener on the loopback (Control, Runtime, ServerAppIO) is no container
    port; from 1.40 the Fleet API proxy's container holds the HTTP Fleet port.
    """
    ports = []
    if dialect.fleet_api == "grpc" or legacy_fleet:
        # legacy_fleet: Flower's gRPC Fleet adapter (flower.Releases.legacy_fleet),
        # on --fleet-api-address's default, 0.0.0.0:9092.
        ports.append({"containerPort": FLEET_PORT, "name": "fleet", "protocol": "TCP"})
    if control_open:
        name = "http" if dialect.control_api == "http" else "control"
        ports.append({"containerPort": CONTROL_PORT, "name": name, "protocol": "TCP"})
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


def _containers(
    fed: Federation, dialect: Dialect, *, legacy_fleet: bool, control_open: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's long-running containers, and the volumes: the user's, and the Fleet proxy's configuration."""
    federation, spec = fed.name, fed.spec
    containers = [_container(spec, fed.images.superlink, dialect, legacy_fleet=legacy_fleet, control_open=control_open)]
    if spec.isolationMode == "process":
        containers.append(_superexec(spec, dialect))
    volumes = merge.by_name(spec.superlink.volumes)
    if dialect.fleet_api == "http":
        containers.append(fleet_proxy.container(spec))
        volumes = merge.add_missing(volumes, [fleet_proxy.volume(federation)])
    return containers, volumes


def statefulset(
    fed: Federation, *, registration: identity.Registration | None = None, with_runner: bool = False
) -> dict[str, Any]:
    """The SuperLink's one-replica StatefulSet: its SuperExec sidecar in process mode, from 1.40 its Fleet proxy.

    It also serves the gRPC Fleet API for pools before 1.40 (Releases.legacy_fleet),
    and its Control API on every address when the user opened it, not the
    loopback alone; registration: with node authentication, how its
    registrar reaches the Control API; with_runner: whether its runner starts the
    Federation's FederationRuns (function/builders/runner.py).
    """
    federation, namespace, spec, dialect = fed.name, fed.namespace, fed.spec, fed.superlink_dialect
    legacy_fleet, control_open = fed.flower.legacy_fleet, fed.control_open
    name = names.superlink(federation)
    labels = names.superlink_labels(federation)
    pod_spec = _pod_spec(
        fed,
        dialect,
        legacy_fleet=legacy_fleet,
        control_open=control_open,
        registration=registration,
        with_runner=with_runner,
    )
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
                pods.harden(pod_spec, pods.superlink_service_account(federation), spec),
                spec.superlink.podTemplate,
            ),
        },
    }
    if dialect.fleet_api == "http":
        # nginx reads its configuration once, when it starts: a new one (new limits, a fix of the
        # proxy's filter) rolls the pod, or a running SuperLink would keep the old one until it restarts.
        template = workload["spec"]["template"]["metadata"]
        template["annotations"] = {**template.get("annotations", {}), **fleet_proxy.config_annotation(spec)}
    claims = merge.claim_templates(spec.superlink.volumeClaimTemplates)
    kept = superlink_state(spec)
    if kept is not None:
        claims = [_state_claim(kept), *claims]
    if claims:
        workload["spec"]["volumeClaimTemplates"] = claims
    return workload


def _pod_spec(
    fed: Federation,
    dialect: Dialect,
    *,
    legacy_fleet: bool,
    control_open: bool,
    registration: identity.Registration | None,
    with_runner: bool,
) -> dict[str, Any]:
    """The SuperLink pod's containers, init containers and volumes, before hardening and the user's template."""
    federation, spec = fed.name, fed.spec
    containers, volumes = _containers(fed, dialect, legacy_fleet=legacy_fleet, control_open=control_open)
    pod_spec: dict[str, Any] = {"containers": containers}
    init: list[dict[str, Any]] = []
    if superexec_auth.enabled(spec, dialect):
        init.append(superexec_auth.init_container(fed.images.superlink))
        volumes = merge.add_missing(volumes, [superexec_auth.volume()])
    if registration is not None:
        init.append(identity.registrar(registration))
        volumes = merge.add_missing(volumes, identity.registrar_volumes(registration))
    if with_runner:
        init.append(runner.container(fed))
        volumes = merge.add_missing(volumes, runner.volumes(fed))
    if tls.enabled(spec):
        # The whole Secret for the SuperLink; its CA alone for the containers that only dial it.
        volumes = merge.add_missing(volumes, [tls.superlink_volume(federation, spec)])
        if any(m["name"] == tls.CA_VOLUME for c in [*containers, *init] for m in c.get("volumeMounts", [])):
            volumes = merge.add_missing(volumes, [tls.superlink_ca_volume(federation, spec)])
    if init:
        pod_spec["initContainers"] = init
    if volumes:
        pod_spec["volumes"] = volumes
    return pod_spec


def service(fed: Federation) -> dict[str, Any]:
    """The SuperLink's Service: the Fleet API, and the Control API only when it is opened in the cluster.

    Its Fleet port stays the operator's whatever the release, so addresses
    users and remote pools hold keep working across upgrades: from 1.40 it
    leads to the Fleet API proxy, unless Releases.legacy_fleet keeps it on
    Flower's gRPC Fleet adapter for older pools; HTTP pools then dial `fleet-http`.
    """
    federation, namespace, spec, dialect = fed.name, fed.namespace, fed.spec, fed.superlink_dialect
    legacy_fleet, control_open = fed.flower.legacy_fleet, fed.control_open
    svc = spec.superlink.service
    managed = names.superlink_labels(federation)
    ports = _service_ports(spec, dialect, legacy_fleet=legacy_fleet, control_open=control_open)
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


def _service_ports(
    spec: FederationSpec, dialect: Dialect, *, legacy_fleet: bool, control_open: bool
) -> list[dict[str, Any]]:
    """Fleet on the operator's port; the HTTP Fleet proxy beside gRPC Fleet for old pools; Control when opened."""
    numbers = spec.superlink.service.ports
    ports: list[dict[str, Any]] = [
        {
            "name": "fleet",
            "port": numbers.grpc,
            "protocol": "TCP",
            "targetPort": FLEET_PORT if legacy_fleet else dialect.fleet_port,
        }
    ]
    if legacy_fleet:
        ports.append(
            {"name": "fleet-http", "port": FLEET_PROXY_PORT, "protocol": "TCP", "targetPort": FLEET_PROXY_PORT}
        )
    if control_open:
        ports.append({"name": "control", "port": numbers.extra, "protocol": "TCP", "targetPort": CONTROL_PORT})
    return ports


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
    link = spec.superlink
    svc = link.service
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
    if link.inClusterControlAPI:
        warnings.append(
            "spec.superlink.inClusterControlAPI serves the Control and Runtime APIs, which open-source Flower "
            "authenticates no caller of, to every pod spec.networkPolicy admits to them: whoever reaches them "
            "can run code on every SuperNode"
        )
    if spec.networkPolicy.enabled and set(spec.networkPolicy.fleetCIDRs) & set(WORLD):
        warnings.append(
            "spec.networkPolicy.fleetCIDRs admits every address to the Fleet API: list the addresses "
            "remote SuperNodes come from"
        )
    return warnings
