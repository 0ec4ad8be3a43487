"""The Federation's cross-field rules: each written once, with its message, its CEL and its check.

A rule's CEL is an admission rule: hack/gen_xrd.py writes it into the XRD
beside the model's schema (on spec: `self` is the spec), and `kubectl apply`
is refused with the rule's message. Its check is what the function runs
(function/api/refusals.py), so a render without the XRD, an older XRD or an
operator manifest gets the same answer; the function reports it on the field
that is wrong (`spec.supernodes.pools[1].replicas`) with the same message,
sometimes followed by `: ` and a detail. tests/api/test_rules.py runs every
rule's cases through both halves, the CEL through cel-go.

Not here: constraints on one field (types, enums, patterns, lengths, bounds),
which the model states (function/api/spec.py), but for the Flower release
spec.version names: its range as a pattern would read, in kubectl's refusal, as
a regular expression, where this table's message says which releases run; nodeConfig keys and values that
Flower must read back as written (function/api/nodeconfig.py), Kubernetes-typed
fields (function/api/k8s_schema.py) and generated names (function/api/names.py, they
need the XR's name): none of those needs another field of the spec, and CEL
could not express them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from pydantic import JsonValue

from function.api import nodeconfig
from function.api.spec import (
    IDENTITY_VOLUME,
    STATE_VOLUME,
    FederationSpec,
    PoolSpec,
    generates_identity,
    node_authentication,
    superlink_state,
)
from function.releases.flower import SUPPORTED, SUPPORTED_PATTERN, Release, supported

# A field path, and a detail the function appends to the rule's message ("" for none).
Violation = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One cross-field rule.

    field: where the function reports it; `[*]` stands for each pool's index.
    cel: the admission rule on spec, or None for a rule the function alone checks.
    check: the function's check, or None when the model refuses such a spec first.
    why: why cel or check is None.
    """

    name: str
    field: str
    message: str
    cel: str | None
    check: Callable[[FederationSpec], Iterator[Violation]] | None
    why: str = ""

    def __post_init__(self) -> None:
        """A rule that skips a half must say why."""
        if (self.cel is None or self.check is None) and not self.why:
            msg = f"rule {self.name}: say why it has no CEL or no check"
            raise ValueError(msg)

    def violations(self, spec: FederationSpec) -> list[tuple[str, str]]:
        """(field path, message) for each place the spec breaks this rule."""
        if self.check is None:
            return []
        return [(path, f"{self.message}: {detail}" if detail else self.message) for path, detail in self.check(spec)]


def _pools(spec: FederationSpec) -> Iterator[tuple[str, PoolSpec]]:
    for i, pool in enumerate(spec.supernodes.pools):
        yield f"spec.supernodes.pools[{i}]", pool


def _replicas_in_daemonset(spec: FederationSpec) -> Iterator[Violation]:
    if spec.mode == "DaemonSet":
        yield from ((f"{field}.replicas", "") for field, pool in _pools(spec) if pool.replicas is not None)


def _replicas_missing_in_statefulset(spec: FederationSpec) -> Iterator[Violation]:
    # The model refuses replicas below 1 itself.
    if spec.mode == "StatefulSet":
        yield from ((f"{field}.replicas", "") for field, pool in _pools(spec) if pool.replicas is None)


def _unsupported_version(spec: FederationSpec) -> Iterator[Violation]:
    # As function/api/versions.py reads it: Release.parse, then supported.
    if spec.version is not None:
        release = Release.parse(spec.version)
        if release is None or not supported(release):
            yield "spec.version", f"{spec.version!r} is not one"


def _superlink_image_missing(spec: FederationSpec) -> Iterator[Violation]:
    if not spec.version and not spec.superlink.image:
        yield "spec.superlink.image", ""


def _supernode_image_missing(spec: FederationSpec) -> Iterator[Violation]:
    if not spec.version and not spec.supernodes.image and not all(p.images.supernode for p in spec.supernodes.pools):
        yield "spec.supernodes.image", ""


def _superlink_superexec_missing(spec: FederationSpec) -> Iterator[Violation]:
    if spec.isolationMode == "process" and not spec.version and not spec.superlink.superexecImage:
        yield "spec.superlink.superexecImage", ""


def _pool_superexec_missing(spec: FederationSpec) -> Iterator[Violation]:
    if spec.isolationMode == "process" and not spec.version:
        yield from (
            (f"{field}.images.superexecClientApp", "")
            for field, pool in _pools(spec)
            if not pool.images.superexecClientApp
        )


def _superlink_superexec_set(spec: FederationSpec) -> Iterator[Violation]:
    if spec.isolationMode == "subprocess" and spec.superlink.superexecImage:
        yield "spec.superlink.superexecImage", ""


def _pool_superexec_set(spec: FederationSpec) -> Iterator[Violation]:
    if spec.isolationMode == "subprocess":
        yield from (
            (f"{field}.images.superexecClientApp", "") for field, pool in _pools(spec) if pool.images.superexecClientApp
        )


def _control_api_outside_cluster(spec: FederationSpec) -> Iterator[Violation]:
    if spec.superlink.inClusterControlAPI and spec.superlink.service.type != "ClusterIP":
        yield "spec.superlink.inClusterControlAPI", ""


def _mount_all_without_vendor(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        if pool.gpu is not None and pool.gpu.mountAll and not pool.gpu.vendor:
            yield f"{field}.gpu.vendor", ""


def _duplicate_pool_names(spec: FederationSpec) -> Iterator[Violation]:
    first: dict[str, int] = {}
    for i, (field, pool) in enumerate(_pools(spec)):
        if pool.name in first:
            yield f"{field}.name", f"{pool.name!r} is also pools[{first[pool.name]}]"
        first.setdefault(pool.name, i)


def _daemonset_placeholders(placeholders: tuple[str, ...]) -> Callable[[FederationSpec], Iterator[Violation]]:
    """Values of a DaemonSet pool that use these placeholders: its pods have no index or count."""

    def check(spec: FederationSpec) -> Iterator[Violation]:
        if spec.mode != "DaemonSet":
            return
        for field, pool in _pools(spec):
            for key in sorted(pool.nodeConfig):
                value = pool.nodeConfig[key]
                if isinstance(value, str) and any(p in value for p in placeholders):
                    yield f"{field}.nodeConfig.{key}", ""

    return check


def _index_beside_global_index(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        strings = [v for v in pool.nodeConfig.values() if isinstance(v, str)]
        if any("{index}" in v for v in strings) and nodeconfig.uses_global_index(pool.nodeConfig):
            yield (
                f"{field}.nodeConfig",
                "with {globalIndex} the pool's pods are numbered from its offset in the federation",
            )


def _tls_sources(spec: FederationSpec) -> Iterator[Violation]:
    if spec.tls is not None and (spec.tls.secretName is None) == (spec.tls.certManager is None):
        yield "spec.tls", ""


def _insecure_beside_tls(spec: FederationSpec) -> Iterator[Violation]:
    if spec.tls is not None and spec.insecure:
        yield "spec.insecure", ""


def _traffic_policy_without_external_service(spec: FederationSpec) -> Iterator[Violation]:
    service = spec.superlink.service
    if service.externalTrafficPolicy is not None and service.type == "ClusterIP":
        yield "spec.superlink.service.externalTrafficPolicy", ""


def _source_ranges_without_load_balancer(spec: FederationSpec) -> Iterator[Violation]:
    service = spec.superlink.service
    if service.loadBalancerSourceRanges is not None and service.type != "LoadBalancer":
        yield "spec.superlink.service.loadBalancerSourceRanges", ""


def _auth_without_tls(spec: FederationSpec) -> Iterator[Violation]:
    if node_authentication(spec) and spec.tls is None:
        yield "spec.nodeAuthentication.enabled", ""


def _auth_key_shared(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        if pool.authKeySecretRef is not None and (spec.mode != "StatefulSet" or pool.replicas != 1):
            yield f"{field}.authKeySecretRef", ""


def _identity_volume_taken(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        taken = [t.metadata.name for t in pool.volumeClaimTemplates] + [v.get("name") for v in pool.volumes]
        if generates_identity(spec, pool) and IDENTITY_VOLUME in taken:
            yield f"{field}.volumes", ""


def _claim_templates_outside_statefulset(spec: FederationSpec) -> Iterator[Violation]:
    if spec.mode != "StatefulSet":
        yield from ((f"{field}.volumeClaimTemplates", "") for field, pool in _pools(spec) if pool.volumeClaimTemplates)


def _state_volume_taken(spec: FederationSpec) -> Iterator[Violation]:
    if superlink_state(spec) is not None and any(
        t.metadata.name == STATE_VOLUME for t in spec.superlink.volumeClaimTemplates
    ):
        yield "spec.superlink.volumeClaimTemplates", ""


def _selector_beside_provider_config(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        if pool.clusterSelector is not None and pool.providerConfigRef is not None:
            yield f"{field}.clusterSelector", ""


def _selector_beside_auth_key(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        if pool.clusterSelector is not None and pool.authKeySecretRef is not None:
            yield f"{field}.authKeySecretRef", ""


def _cluster_index_without_selector(spec: FederationSpec) -> Iterator[Violation]:
    for field, pool in _pools(spec):
        if pool.clusterSelector is None:
            for key, value in sorted(pool.nodeConfig.items()):
                if isinstance(value, str) and any(p in value for p in nodeconfig.SELECTED_ONLY):
                    yield f"{field}.nodeConfig.{key}", ""


# Why the last rules are the function's alone: the published XRD does not
# check them, and an admission rule added now would refuse at kubectl claims
# that the API server accepts today.
NOT_AT_ADMISSION = "not an admission rule in the published XRD; adding one would newly refuse claims at kubectl"

# The XRD's rules in this order (the operator's first, with its messages, then
# ours); the function reports violations in the same order.
RULES: tuple[Rule, ...] = (
    Rule(
        name="pools-not-empty",
        field="spec.supernodes.pools",
        message="spec.supernodes.pools must contain at least one pool",
        cel="size(self.supernodes.pools) > 0",
        check=None,
        why="the model refuses an empty list first (min_length=1), with its own message",
    ),
    Rule(
        name="daemonset-no-replicas",
        field="spec.supernodes.pools[*].replicas",
        message="replicas must not be set for pools when mode is DaemonSet",
        cel="self.mode == 'DaemonSet' ? self.supernodes.pools.all(p, !has(p.replicas)) : true",
        check=_replicas_in_daemonset,
    ),
    Rule(
        name="statefulset-replicas",
        field="spec.supernodes.pools[*].replicas",
        message="replicas must be set (>=1) for every pool when mode is StatefulSet",
        cel="self.mode == 'StatefulSet' ? self.supernodes.pools.all(p, has(p.replicas) && p.replicas >= 1) : true",
        check=_replicas_missing_in_statefulset,
    ),
    Rule(
        name="superlink-image-or-version",
        field="spec.superlink.image",
        message="spec.superlink.image is required unless spec.version is set",
        cel="has(self.version) || (has(self.superlink) && has(self.superlink.image))",
        check=_superlink_image_missing,
    ),
    Rule(
        name="supernode-image-or-version",
        field="spec.supernodes.image",
        message="spec.supernodes.image is required unless spec.version is set or every pool sets images.supernode",
        cel="has(self.version) || has(self.supernodes.image) || "
        "self.supernodes.pools.all(p, has(p.images) && has(p.images.supernode))",
        check=_supernode_image_missing,
    ),
    Rule(
        name="process-superlink-superexec",
        field="spec.superlink.superexecImage",
        message="spec.superlink.superexecImage is required when isolationMode=process, unless spec.version is set",
        cel="self.isolationMode != 'process' || has(self.version) || "
        "(has(self.superlink) && has(self.superlink.superexecImage) && size(self.superlink.superexecImage) > 0)",
        check=_superlink_superexec_missing,
    ),
    Rule(
        name="process-pool-superexec",
        field="spec.supernodes.pools[*].images.superexecClientApp",
        message="spec.supernodes.pools[*].images.superexecClientApp is required when isolationMode=process, "
        "unless spec.version is set",
        cel="self.isolationMode != 'process' || has(self.version) || self.supernodes.pools.all(p, "
        "has(p.images) && has(p.images.superexecClientApp) && size(p.images.superexecClientApp) > 0)",
        check=_pool_superexec_missing,
    ),
    Rule(
        name="subprocess-superlink-superexec",
        field="spec.superlink.superexecImage",
        message="spec.superlink.superexecImage must be empty when isolationMode=subprocess",
        cel="self.isolationMode != 'subprocess' || !has(self.superlink) || !has(self.superlink.superexecImage) || "
        "size(self.superlink.superexecImage) == 0",
        check=_superlink_superexec_set,
    ),
    Rule(
        name="subprocess-pool-superexec",
        field="spec.supernodes.pools[*].images.superexecClientApp",
        message="spec.supernodes.pools[*].images.superexecClientApp must be empty when isolationMode=subprocess",
        cel="self.isolationMode != 'subprocess' || self.supernodes.pools.all(p, "
        "!has(p.images) || !has(p.images.superexecClientApp) || size(p.images.superexecClientApp) == 0)",
        check=_pool_superexec_set,
    ),
    Rule(
        name="gpu-mount-all-vendor",
        field="spec.supernodes.pools[*].gpu.vendor",
        message="spec.supernodes.pools[*].gpu.vendor is required when gpu.mountAll=true",
        cel="self.supernodes.pools.all(p, !has(p.gpu) || !has(p.gpu.mountAll) || "
        "p.gpu.mountAll == false || (has(p.gpu.vendor) && size(p.gpu.vendor) > 0))",
        check=_mount_all_without_vendor,
    ),
    Rule(
        name="supported-version",
        field="spec.version",
        message=f"spec.version must name a Flower release (such as 1.41.0) this function supports: {SUPPORTED}",
        # SUPPORTED_PATTERN has no backslash or quote to escape in a CEL string.
        cel=f"!has(self.version) || self.version.matches('{SUPPORTED_PATTERN}')",
        check=_unsupported_version,
    ),
    Rule(
        name="unique-pool-names",
        field="spec.supernodes.pools[*].name",
        message="spec.supernodes.pools[*].name must be unique",
        cel="self.supernodes.pools.all(p, self.supernodes.pools.exists_one(q, q.name == p.name))",
        check=_duplicate_pool_names,
    ),
    Rule(
        name="daemonset-pool-placeholders",
        field="spec.supernodes.pools[*].nodeConfig.<key>",
        message="spec.supernodes.pools[*].nodeConfig must not use {index} or {replicas} when mode is DaemonSet",
        cel="self.mode != 'DaemonSet' || self.supernodes.pools.all(p, !has(p.nodeConfig) || "
        "p.nodeConfig.all(k, "
        "!(p.nodeConfig[k].contains('{index}') || p.nodeConfig[k].contains('{replicas}'))))",
        check=_daemonset_placeholders(nodeconfig.POOL_ONLY),
    ),
    Rule(
        name="daemonset-federation-placeholders",
        field="spec.supernodes.pools[*].nodeConfig.<key>",
        message="spec.supernodes.pools[*].nodeConfig must not use {globalIndex} or {totalReplicas} "
        "when mode is DaemonSet",
        cel="self.mode != 'DaemonSet' || self.supernodes.pools.all(p, !has(p.nodeConfig) || "
        "p.nodeConfig.all(k, "
        "!(p.nodeConfig[k].contains('{globalIndex}') || p.nodeConfig[k].contains('{totalReplicas}'))))",
        check=_daemonset_placeholders(nodeconfig.FEDERATION_WIDE),
    ),
    Rule(
        name="index-or-global-index",
        field="spec.supernodes.pools[*].nodeConfig",
        message="spec.supernodes.pools[*].nodeConfig cannot use both {index} and {globalIndex}",
        cel="self.supernodes.pools.all(p, !has(p.nodeConfig) || "
        "!p.nodeConfig.exists(k, p.nodeConfig[k].contains('{index}')) || "
        "!p.nodeConfig.exists(k, p.nodeConfig[k].contains('{globalIndex}')))",
        check=_index_beside_global_index,
    ),
    Rule(
        name="tls-one-source",
        field="spec.tls",
        message="spec.tls needs exactly one of secretName and certManager",
        cel="!has(self.tls) || (has(self.tls.secretName) ? !has(self.tls.certManager) : has(self.tls.certManager))",
        check=_tls_sources,
    ),
    Rule(
        name="tls-not-insecure",
        field="spec.insecure",
        message="spec.insecure must not be true when spec.tls is set",
        cel="!has(self.tls) || !has(self.insecure) || !self.insecure",
        check=_insecure_beside_tls,
    ),
    Rule(
        name="traffic-policy-needs-external-service",
        field="spec.superlink.service.externalTrafficPolicy",
        message="spec.superlink.service.externalTrafficPolicy needs type NodePort or LoadBalancer",
        cel="!has(self.superlink) || !has(self.superlink.service) || "
        "!has(self.superlink.service.externalTrafficPolicy) || "
        "(has(self.superlink.service.type) && self.superlink.service.type != 'ClusterIP')",
        check=_traffic_policy_without_external_service,
    ),
    Rule(
        name="source-ranges-need-load-balancer",
        field="spec.superlink.service.loadBalancerSourceRanges",
        message="spec.superlink.service.loadBalancerSourceRanges needs type LoadBalancer",
        cel="!has(self.superlink) || !has(self.superlink.service) || "
        "!has(self.superlink.service.loadBalancerSourceRanges) || "
        "(has(self.superlink.service.type) && self.superlink.service.type == 'LoadBalancer')",
        check=_source_ranges_without_load_balancer,
    ),
    Rule(
        name="auth-needs-tls",
        field="spec.nodeAuthentication.enabled",
        message="spec.nodeAuthentication.enabled needs spec.tls (Flower refuses node authentication without TLS)",
        cel="!has(self.nodeAuthentication) || !has(self.nodeAuthentication.enabled) || "
        "!self.nodeAuthentication.enabled || has(self.tls)",
        check=_auth_without_tls,
    ),
    Rule(
        name="control-api-in-cluster-only",
        field="spec.superlink.inClusterControlAPI",
        message="spec.superlink.inClusterControlAPI needs spec.superlink.service.type ClusterIP: the Control API "
        "authenticates no caller and is never served on an external address",
        cel="!has(self.superlink) || !has(self.superlink.inClusterControlAPI) || !self.superlink.inClusterControlAPI "
        "|| !has(self.superlink.service) || !has(self.superlink.service.type) || "
        "self.superlink.service.type == 'ClusterIP'",
        check=_control_api_outside_cluster,
    ),
    Rule(
        name="auth-key-one-supernode",
        field="spec.supernodes.pools[*].authKeySecretRef",
        message="spec.supernodes.pools[*].authKeySecretRef is one SuperNode's key: it needs mode StatefulSet "
        "and replicas 1 (Flower refuses a second SuperNode with the same key)",
        cel="self.supernodes.pools.all(p, !has(p.authKeySecretRef) || "
        "(self.mode == 'StatefulSet' && has(p.replicas) && p.replicas == 1))",
        check=_auth_key_shared,
    ),
    Rule(
        name="selector-or-provider-config",
        field="spec.supernodes.pools[*].clusterSelector",
        message="spec.supernodes.pools[*] takes clusterSelector or providerConfigRef, not both",
        cel="self.supernodes.pools.all(p, !has(p.clusterSelector) || !has(p.providerConfigRef))",
        check=_selector_beside_provider_config,
    ),
    Rule(
        name="selector-no-auth-key",
        field="spec.supernodes.pools[*].authKeySecretRef",
        message="spec.supernodes.pools[*].authKeySecretRef is one SuperNode's key: a pool with clusterSelector "
        "runs in many clusters, so its SuperNodes make their own",
        cel="self.supernodes.pools.all(p, !has(p.clusterSelector) || !has(p.authKeySecretRef))",
        check=_selector_beside_auth_key,
    ),
    Rule(
        name="cluster-index-needs-selector",
        field="spec.supernodes.pools[*].nodeConfig.<key>",
        message="spec.supernodes.pools[*].nodeConfig may use {clusterIndex} only in a pool with clusterSelector",
        cel="self.supernodes.pools.all(p, has(p.clusterSelector) || !has(p.nodeConfig) || "
        "p.nodeConfig.all(k, !p.nodeConfig[k].contains('{clusterIndex}')))",
        check=_cluster_index_without_selector,
    ),
    Rule(
        name="identity-volume-name",
        field="spec.supernodes.pools[*].volumes",
        message=f"the name {IDENTITY_VOLUME!r} is taken by the SuperNodes' identities (nodeAuthentication)",
        cel=None,
        check=_identity_volume_taken,
        why=NOT_AT_ADMISSION,
    ),
    Rule(
        name="claim-templates-need-statefulset",
        field="spec.supernodes.pools[*].volumeClaimTemplates",
        message="volumeClaimTemplates need mode StatefulSet",
        cel=None,
        check=_claim_templates_outside_statefulset,
        why=NOT_AT_ADMISSION,
    ),
    Rule(
        name="state-volume-name",
        field="spec.superlink.volumeClaimTemplates",
        message=f"the name {STATE_VOLUME!r} is taken by spec.superlink.persistence",
        cel=None,
        check=_state_volume_taken,
        why=NOT_AT_ADMISSION,
    ),
)


def admission() -> list[JsonValue]:
    """The XRD's x-kubernetes-validations on spec: each rule that has CEL."""
    return [{"rule": rule.cel, "message": rule.message} for rule in RULES if rule.cel is not None]


def violations(spec: FederationSpec) -> list[tuple[str, str]]:
    """(field path, message) for every rule the spec breaks, in the table's order."""
    return [violation for rule in RULES for violation in rule.violations(spec)]
