"""SuperNode pools: one DaemonSet or StatefulSet per pool, in the dialect of the pool's Flower release."""

from __future__ import annotations

import posixpath
from typing import Any

from function.api import names, nodeconfig
from function.api.spec import AUTH_KEY_PATH, FederationSpec, PoolSpec
from function.builders import gpu, identity, merge, pods, superexec_auth, tls
from function.federation.value import Federation, PlacedPool
from function.releases.flower import CLIENTAPPIO_PORT, Dialect

AUTH_KEY_VOLUME = "auth-key"
AUTH_KEY_FILE = posixpath.basename(AUTH_KEY_PATH)
# A SuperNode that has not reached its SuperLink for this long exits, so the kubelet restarts it and
# `CrashLoopBackOff` tells. Without it some never give up while their health server says SERVING (Flower
# 1.25 behind a certificate it does not trust, 1.41 dialling plain HTTP at TLS): alive to every probe.
# Longer than a SuperNode started before its SuperLink may take to connect once it is up (gRPC's
# reconnect back-off delays that by up to two minutes on a busy machine) and than a restarted
# SuperLink takes to come back.
GIVE_UP_AFTER_SECONDS = 300
# A new StatefulSet pool starts and stops its SuperNodes all at once. SuperNodes do not depend on one
# another, and with node authentication a SuperNode is Ready only once its key was published, carried
# and registered: in order (OrderedReady, Kubernetes' default), a pool of 10 would wait for ten of those
# round trips one after another, and its StatefulSet's status (so its Object and its composite) would
# change at every step. The field is immutable: a StatefulSet made before keeps what it has
# (pod_management_of).
PARALLEL = "Parallel"


def _supernode_args(
    spec: FederationSpec, pool: PoolSpec, dialect: Dialect, fleet: str, *, trusts: bool, registers: bool
) -> list[str]:
    args = [f"--superlink={fleet}", f"--isolation={spec.isolationMode}"]
    if tls.insecure(spec):
        args.append("--insecure")
    if trusts:
        args += tls.supernode_args()
    if spec.isolationMode == "process":
        if dialect.supernode_runtime_api == "grpc":
            args.append(f"--clientappio-api-address=0.0.0.0:{CLIENTAPPIO_PORT}")
        else:
            # The sidecar dials it in the pod: the loopback is enough.
            args += ["--host=127.0.0.1", f"--port={CLIENTAPPIO_PORT}"]
    if pool.authKeySecretRef is not None or registers:
        args.append(f"--auth-supernode-private-key={AUTH_KEY_PATH}")
    if superexec_auth.enabled(spec, dialect):
        args += superexec_auth.args()
    if spec.isolationMode == "subprocess":
        # In process mode the sidecar runs the ClientApp, so it installs.
        args += dialect.dependency_args(allow=spec.allowRuntimeDependencyInstallation)
    args.append(f"--max-wait-time={GIVE_UP_AFTER_SECONDS}")
    return [*args, *pool.extraArgs]


def _supernode(  # noqa: PLR0913 - the container's parts, each its own value
    spec: FederationSpec,
    pool: PoolSpec,
    image: str,
    dialect: Dialect,
    fleet: str,
    context: nodeconfig.Context,
    trust: dict[str, Any] | None,
    *,
    registers: bool,
) -> dict[str, Any]:
    args = _supernode_args(spec, pool, dialect, fleet, trusts=trust is not None, registers=registers)
    process = spec.isolationMode == "process"
    env = merge.by_name(spec.supernodes.env, pool.env, gpu.env(pool.gpu))
    if pool.nodeConfig:
        text, needs = nodeconfig.build(pool.nodeConfig, context)
        args += ["--node-config", text]
        # Ours win over user variables of the same name: the args depend on them.
        env = merge.by_name(env, nodeconfig.env_vars(needs))
    container: dict[str, Any] = {
        "name": "supernode",
        "image": image,
        "args": args,
    }
    if dialect.supernode_runtime_api == "grpc":
        container["ports"] = [{"containerPort": CLIENTAPPIO_PORT, "name": "clientappio", "protocol": "TCP"}]
    # In process mode the ClientApp, and so the GPU, lives in the sidecar.
    resources = pool.supernodeResources if process else gpu.with_gpus(pool.supernodeResources, pool.gpu)
    mounts = pool.volumeMounts
    if trust is not None:
        mounts = [*mounts, tls.mount()]
    if superexec_auth.enabled(spec, dialect):
        mounts = [*mounts, superexec_auth.mount()]
    if pool.authKeySecretRef is not None:
        # The directory, not the file, so a rotated key reaches the pod.
        mounts = [*mounts, {"name": AUTH_KEY_VOLUME, "mountPath": posixpath.dirname(AUTH_KEY_PATH), "readOnly": True}]
    if registers:
        mounts = [*mounts, identity.supernode_mount()]
    return _with_settings(container, pool, resources, env, mounts)


def _superexec(spec: FederationSpec, pool: PoolSpec, dialect: Dialect) -> dict[str, Any]:
    # The SuperNode's app-facing API is plain inside the pod, whatever the Fleet API uses.
    args = [*dialect.superexec_args("clientapp", CLIENTAPPIO_PORT), "--insecure"]
    mounts = pool.superexecVolumeMounts or pool.volumeMounts
    if superexec_auth.enabled(spec, dialect):
        args += superexec_auth.args()
        mounts = [*mounts, superexec_auth.mount()]
    args += dialect.dependency_args(allow=spec.allowRuntimeDependencyInstallation)
    container: dict[str, Any] = {"name": "superexec-clientapp", "image": pool.images.superexecClientApp, "args": args}
    env = merge.by_name(spec.supernodes.env, pool.env, gpu.env(pool.gpu))
    resources = gpu.with_gpus(pool.superexecResources, pool.gpu)
    return _with_settings(container, pool, resources, env, mounts)


def _with_settings(
    container: dict[str, Any],
    pool: PoolSpec,
    resources: dict[str, Any] | None,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """Add what both pool containers take: resources, env, mounts (GPU ones first), security."""
    if resources:
        container["resources"] = resources
    if env:
        container["env"] = env
    mounts = merge.by_name(gpu.volume_mounts(pool.gpu), mounts)
    if mounts:
        container["volumeMounts"] = mounts
    security = gpu.security_context(pool.gpu)
    if security:
        container["securityContext"] = security
    return container


def _statefulset_fields(spec: FederationSpec, pool: PoolSpec, offset: int, *, registers: bool) -> dict[str, Any]:
    """A StatefulSet pool's ordinals (from its offset, for global indices) and volume claim templates."""
    fields: dict[str, Any] = {}
    if nodeconfig.uses_global_index(pool.nodeConfig):
        # Pod ordinals, and so the pod-index label, count from the pool's offset.
        fields["ordinals"] = {"start": offset}
    claims = merge.claim_templates(pool.volumeClaimTemplates)
    if registers:
        claims = [*claims, identity.claim_template(spec)]
        fields["persistentVolumeClaimRetentionPolicy"] = dict(identity.CLAIM_RETENTION)
    if claims:
        fields["volumeClaimTemplates"] = claims
    return fields


def _pod_fields(
    spec: FederationSpec,
    pool: PoolSpec,
    image: str,
    dialect: Dialect,
    trust: dict[str, Any] | None,
    federation: str,
    *,
    makes_identity: bool,
) -> dict[str, Any]:
    """A pool pod's fields besides its containers, each only when it has any.

    Init containers (secret maker, identity), volumes (the user's, then ours), runtime class.
    """
    volumes = merge.add_missing(merge.by_name(pool.volumes), gpu.volumes(pool.gpu))
    if trust is not None:
        volumes = merge.add_missing(volumes, [trust])
    init: list[dict[str, Any]] = []
    if superexec_auth.enabled(spec, dialect):
        init.append(superexec_auth.init_container(image))
        volumes = merge.add_missing(volumes, [superexec_auth.volume()])
    if makes_identity:
        claims = spec.mode == "StatefulSet"
        interval = identity.settings(spec).registrationIntervalSeconds
        init += identity.pool_init_containers(federation, image, pool.name, claims=claims, interval=interval)
        volumes = merge.add_missing(volumes, identity.pool_volumes(spec, federation))
    if pool.authKeySecretRef is not None:
        ref = pool.authKeySecretRef
        secret = {"secretName": ref.name, "items": [{"key": ref.key, "path": AUTH_KEY_FILE}], "defaultMode": 0o440}
        volumes = merge.add_missing(volumes, [{"name": AUTH_KEY_VOLUME, "secret": secret}])
    fields = {"initContainers": init, "volumes": volumes, "runtimeClassName": gpu.runtime_class(pool.gpu)}
    return {k: v for k, v in fields.items() if v}


def workload(
    fed: Federation,
    placed: PlacedPool,
    *,
    context: nodeconfig.Context,
    offset: int = 0,
    pod_management: str | None = PARALLEL,
) -> dict[str, Any]:
    """A placed pool's workload in its namespace, its SuperNodes dialling the Fleet API at its address.

    offset is the number of SuperNodes in the StatefulSet pools before this one.
    With TLS they mount the CA the pool trusts; with node authentication, when
    the pool makes its identities, each SuperNode makes and publishes its own key.
    pod_management is a StatefulSet's podManagementPolicy, None to leave it out (see PARALLEL).
    """
    if placed.fleet is None:
        msg = f"pool {placed.name} has no Fleet address: it must be held back"
        raise ValueError(msg)
    federation, namespace, spec, pool, fleet = fed.name, placed.namespace, fed.spec, placed.spec, placed.fleet
    dialect = fed.flower.pool_dialect(placed.name)
    trust = tls.pool_volume(placed.trust.secret, placed.trust.key) if placed.trust is not None else None
    makes_identity = placed.makes_identity
    name = names.pool(federation, pool.name)
    labels = names.pool_labels(federation, pool.name)
    image = fed.images.supernode(pool.name)
    containers = [_supernode(spec, pool, image, dialect, fleet, context, trust, registers=makes_identity)]
    if spec.isolationMode == "process":
        containers.append(_superexec(spec, pool, dialect))
    fields = _pod_fields(spec, pool, image, dialect, trust, federation, makes_identity=makes_identity)
    pod_spec = {"containers": containers, **fields}
    workload_spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": merge.pod_template(
            labels, pods.harden(pod_spec, pods.service_account(federation), spec), pool.podTemplate
        ),
    }
    if spec.mode == "StatefulSet":
        workload_spec = {"replicas": pool.replicas, **workload_spec, "serviceName": name}
        workload_spec.update(_statefulset_fields(spec, pool, offset, registers=makes_identity))
        if pod_management is not None:
            workload_spec["podManagementPolicy"] = pod_management
    return {
        "apiVersion": "apps/v1",
        "kind": spec.mode,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": workload_spec,
    }


def pod_management_of(previous: dict[str, Any] | None) -> str | None:
    """The podManagementPolicy a pool's workload keeps, from the manifest last composed for it (None: none yet).

    A StatefulSet made before keeps the policy it was made with (None: left out, as
    this function did before PARALLEL), since Kubernetes refuses to change it;
    anything else (nothing yet, or a DaemonSet becoming a StatefulSet) starts in parallel.
    """
    if not isinstance(previous, dict) or previous.get("kind") != "StatefulSet":
        return PARALLEL
    kept = (previous.get("spec") or {}).get("podManagementPolicy")
    return kept if isinstance(kept, str) else None
