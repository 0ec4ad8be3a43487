"""The Federation spec: the one source of truth for the API.

The XRD in apis/ is generated from these models (hack/gen_xrd.py), so the
schema users see at admission and the model the function parses never drift.
Field names are the flower-operator's, camelCase on the wire and in Python.
Rules that span fields are in function/api/rules.py; the XRD carries their CEL (hack/gen_xrd.py).

Kubernetes-typed sub-objects (resources, env, volumes, podTemplate...) are
kept open here and in the XRD, then checked against the official Kubernetes
schema by function/api/k8s_schema.py; that keeps the XRD small.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from function.releases.flower import CONTROL_PORT, FLEET_PORT, SERVERAPPIO_PORT, SUPPORTED_PATTERN

# Markers read by hack/gen_xrd.py: the sub-object is open in the XRD and
# validated against this Kubernetes definition by the function.
K8S_TYPE = "x-flower-k8s-type"
NODE_CONFIG = "x-flower-node-config"

MAX_POOLS = 128
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

CIDR_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:]+/[0-9]{1,3})$"

# nginx, built to run as any user, from its maintainers; pinned, overridable.
FLEET_PROXY_IMAGE = "nginxinc/nginx-unprivileged:1.28.0-alpine"
# gRPC health servers, one per container: containers of a pod share its ports.
HEALTH_PORTS = {"superlink": 9095, "superexec-serverapp": 9096, "supernode": 9097, "superexec-clientapp": 9098}
# The user the Flower images run as.
FLOWER_UID = 49999
# Where persistence keeps the SuperLink's state, and where pools find their auth key.
STATE_VOLUME = "state"
STATE_PATH = "/app/state"
AUTH_KEY_PATH = "/app/auth/supernode.key"

# An object field defaulted to {} in the XRD, so its own field defaults apply.
OBJECT_DEFAULT: dict[str, JsonValue] = {"default": {}}

# A DNS name or IPv4 address, or a bracketed IPv6 address; optionally :port.
HOST_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$"


def k8s(type_name: str, description: str) -> Any:
    """A field holding a Kubernetes object of the named definition."""
    return Field(default=None, description=description, json_schema_extra={K8S_TYPE: type_name})


def k8s_list(type_name: str, description: str) -> Any:
    """A field holding a list of Kubernetes objects of the named definition."""
    return Field(default_factory=list, description=description, json_schema_extra={K8S_TYPE: type_name})


# A Flower release migrates the SuperLink's state database forward (alembic; 1.42 adds a revision to
# 1.41's) and an older one cannot start on what a newer one wrote (tests/real/test_real_upgrade.py):
# moving spec.version back a minor release would leave the SuperLink down on its own state. Only the
# API server sees the old value, so only it refuses (a transition rule: nothing for the function to
# check); patches of one minor share a schema and may move either way. Each side's minor is the digits
# after its first dot (SUPPORTED_PATTERN: the major is 1); a value that is no release is the
# supported-version rule's to refuse.
_MINOR = "'[.]0*[0-9]+'"
NO_DOWNGRADE: JsonValue = {
    "rule": (
        f"!self.matches('{SUPPORTED_PATTERN}') || !oldSelf.matches('{SUPPORTED_PATTERN}') || "
        f"int(self.find({_MINOR}).substring(1)) >= int(oldSelf.find({_MINOR}).substring(1))"
    ),
    "message": (
        "spec.version cannot move to an older Flower minor release: the SuperLink's state was migrated "
        "to the newer release's schema, which an older SuperLink cannot start on; keep the release, or "
        "apply a new Federation"
    ),
}


class Model(BaseModel):
    # Unknown fields are an error, not silently dropped: a typo must not
    # quietly change what gets deployed. Strict types, as the XRD's schema:
    # lax pydantic read replicas "3" as 3 and insecure "true" as true, which
    # admission refuses (found by tests/product/test_properties.py).
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)


K8sObject = dict[str, Any] | None
K8sList = list[dict[str, Any]]
Port = Annotated[int, Field(ge=1, le=65535)]
NodeConfigValue = str | bool | int | float


# Bounds that keep the XRD's CEL rules within the API server's cost budget.
MAX_NODE_CONFIG_KEYS = 32
MAX_NODE_CONFIG_VALUE = 1024


def _scalar(value: Any) -> NodeConfigValue:
    if not isinstance(value, (str, bool, int, float)):
        msg = f"must be a string, integer, number or boolean, not {type(value).__name__}"
        raise ValueError(msg)
    if isinstance(value, str) and len(value) > MAX_NODE_CONFIG_VALUE:
        msg = f"must be at most {MAX_NODE_CONFIG_VALUE} characters long"
        raise ValueError(msg)
    return value


NodeConfigField = Annotated[Any, BeforeValidator(_scalar)]


# Kubernetes label syntax: a selector Crossplane cannot list by fails the
# whole pipeline with an API error that names no field of ours.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]
MAX_LABEL_KEY = 253 + 1 + 63  # prefix/name


def _label_keys(labels: dict[str, str]) -> dict[str, str]:
    """Keys in label syntax.

    Checked here, not as a typed key: pydantic would write a typed key as
    patternProperties, which the XRD cannot carry (the map would be pruned).
    """
    for key in labels:
        if len(key) > MAX_LABEL_KEY or not re.match(LABEL_KEY_PATTERN, key):
            msg = (
                f"the key {key!r} is not a Kubernetes label or annotation key "
                "([prefix/]name, name of at most 63 characters)"
            )
            raise ValueError(msg)
    return labels


Labels = Annotated[dict[str, LabelValue], AfterValidator(_label_keys)]
Annotations = Annotated[dict[str, str], AfterValidator(_label_keys)]


# Names and keys Kubernetes checks when the Objects are applied, too late to
# name the field: an Object that cannot be applied only shows the API
# server's error in its own status.
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
VolumeName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
# A key of a Secret's (or ConfigMap's) data.
DATA_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
DataKey = Annotated[str, Field(min_length=1, max_length=253, pattern=DATA_KEY_PATTERN)]
# The API server refuses an image with leading or trailing space, and one with
# space inside cannot be pulled. Spelled out, not \S: that is ASCII in the API
# server's regexps (Go) and Unicode in the function's (pydantic's, Rust).
NO_SPACE = r"[^ \t\n\r\f\v]"
Image = Annotated[str, Field(min_length=1, pattern=f"^{NO_SPACE}+$")]
# Sidecar and per-pool images: empty is unset, as in the operator's manifests.
ImageOrEmpty = Annotated[str, Field(pattern=f"^{NO_SPACE}*$")]


class ProviderConfigRef(Model):
    name: ObjectName = Field(
        default="default",
        description="Name of the provider-kubernetes ProviderConfig that picks the target cluster.",
    )
    kind: Literal["ProviderConfig", "ClusterProviderConfig"] = Field(
        default="ClusterProviderConfig",
        description=(
            "For namespaced Federations (Crossplane v2): a ProviderConfig in the Federation's "
            "namespace, or a ClusterProviderConfig. Cluster-scoped Objects ignore it."
        ),
    )


class ServicePorts(Model):
    grpc: Port = Field(default=FLEET_PORT, description="Fleet API port SuperNodes dial.")
    serverAppIO: Port = Field(
        default=SERVERAPPIO_PORT,
        description="Unused, kept for the operator's manifests: the ServerAppIO API never leaves the SuperLink pod.",
    )
    extra: Port = Field(
        default=CONTROL_PORT,
        description="Control API port, the one `flwr run` talks to, with spec.superlink.inClusterControlAPI.",
    )


class ServiceSpec(Model):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Service type of the SuperLink Service."
    )
    ports: ServicePorts = Field(
        default_factory=ServicePorts, description="Service ports.", json_schema_extra=OBJECT_DEFAULT
    )
    labels: Labels = Field(
        default_factory=dict,
        description="Extra Service labels; the managed labels take precedence.",
    )
    annotations: Annotations = Field(default_factory=dict, description="Service annotations.")
    nodeAddress: str | None = Field(
        default=None,
        min_length=1,
        pattern=HOST_PATTERN,
        description=(
            "With type NodePort: a node address that pools in other clusters can reach; "
            "they dial it at the Fleet port's node port."
        ),
    )
    externalTrafficPolicy: Literal["Cluster", "Local"] | None = Field(
        default=None,
        description=(
            "With type NodePort or LoadBalancer: Local keeps the SuperNodes' source addresses, which "
            "spec.networkPolicy.fleetCIDRs judges, and only the SuperLink's node answers; Cluster hides "
            "them. Default: Local for LoadBalancer, Kubernetes' Cluster for NodePort (nodeAddress may "
            "name any node)."
        ),
    )
    loadBalancerSourceRanges: list[Annotated[str, Field(pattern=CIDR_PATTERN)]] | None = Field(
        default=None,
        description=(
            "With type LoadBalancer: the addresses the load balancer admits. Unset, those of "
            "spec.networkPolicy.fleetCIDRs, the addresses the NetworkPolicy admits; [] admits every address."
        ),
    )


class ClaimTemplateMeta(Model):
    name: VolumeName = Field(description="Name of the claim, also the volume name to mount.")
    labels: Labels = Field(default_factory=dict, description="Labels of the claim.")
    annotations: Annotations = Field(default_factory=dict, description="Annotations of the claim.")


class VolumeClaimTemplate(Model):
    metadata: ClaimTemplateMeta
    spec: dict[str, Any] = Field(
        description="PersistentVolumeClaimSpec of the claim.",
        json_schema_extra={K8S_TYPE: "io.k8s.api.core.v1.PersistentVolumeClaimSpec"},
    )


class Storage(Model):
    """Volumes of a SuperLink or pool pod, shared by both."""

    volumes: K8sList = k8s_list("io.k8s.api.core.v1.Volume", "Pod volumes.")
    volumeMounts: K8sList = k8s_list(
        "io.k8s.api.core.v1.VolumeMount", "Mounts of the superlink or supernode container."
    )
    superexecVolumeMounts: K8sList = k8s_list(
        "io.k8s.api.core.v1.VolumeMount",
        "Mounts of the SuperExec sidecar; defaults to volumeMounts.",
    )
    volumeClaimTemplates: list[VolumeClaimTemplate] = Field(
        default_factory=list, description="Claim templates of the StatefulSet (StatefulSet workloads only)."
    )


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


class Persistence(Model):
    enabled: bool = Field(
        default=True,
        description=(
            "false keeps the state in memory. With node authentication the state is kept unless this says "
            "false: registrations live in it."
        ),
    )
    size: str = Field(default="1Gi", pattern=QUANTITY_PATTERN, description="Size of the SuperLink's state volume.")
    storageClassName: ObjectName | None = Field(
        default=None, description="Storage class of the volume; the cluster's default when unset."
    )


class SecretKeyRef(Model):
    name: ObjectName = Field(description="Name of the Secret, in the pool's namespace and cluster.")
    key: DataKey = Field(description="Key of the Secret holding the value.")


class CASecretRef(Model):
    name: ObjectName = Field(description="Name of the Secret, in the pool's namespace and cluster.")
    key: DataKey = Field(default="ca.crt", description="Key of the CA certificate.")


class IdentityVolume(Model):
    size: str = Field(default="1Mi", pattern=QUANTITY_PATTERN, description="Size of each SuperNode's identity claim.")
    storageClassName: ObjectName | None = Field(
        default=None, description="Storage class of the claims; the cluster's default when unset."
    )


class NodeAuthentication(Model):
    enabled: bool = Field(
        default=False,
        description=(
            "SuperLink accepts only SuperNodes whose keys are registered (--enable-supernode-auth). Each "
            "SuperNode makes its own key pair and registers it; see docs/tls-and-authentication.md."
        ),
    )
    identityVolume: IdentityVolume = Field(
        default_factory=IdentityVolume,
        description="StatefulSet pools: the claim per ordinal that keeps a SuperNode's key, and so its node ID.",
        json_schema_extra=OBJECT_DEFAULT,
    )
    registrationIntervalSeconds: int = Field(
        default=30,
        ge=5,
        le=3600,
        description=(
            "How often the SuperLink's registrar checks its registrations: it registers the published keys "
            "it does not hold yet (a SuperLink that lost its state gets them back) and looks for keys no "
            "longer published. Newly published keys are registered as soon as they reach it, whatever this is."
        ),
    )
    unregisterAfterSeconds: int = Field(
        default=600,
        ge=10,
        le=604800,
        description=(
            "A key no longer published this long is unregistered: its holder (a DaemonSet's pod, a "
            "StatefulSet's claim) is gone for good. A SuperNode offline keeps its key published and registered."
        ),
    )


class ProxyLimits(Model):
    """What one client, and all together, may ask of the Fleet API proxy (Flower 1.40+).

    The defaults are sized from what Flower 1.40-1.42 SuperNodes send; see
    docs/tls-and-authentication.md, "Limits of the Fleet API proxy".
    """

    maxBodyMiB: int = Field(
        default=16,
        ge=6,
        le=1024,
        description=(
            "Largest request body the proxy passes to the SuperLink, in MiB; a larger one is answered 413 and "
            "never reaches Flower (which reads a whole body before it checks a node's signature). The largest "
            "a SuperNode sends is one chunk of a model's arrays, 5 MiB in Flower 1.40-1.42, so at least 6; "
            "16 leaves room for the records Flower does not chunk (metrics, configs)."
        ),
    )
    maxRequests: int = Field(
        default=64,
        ge=1,
        le=16384,
        description=(
            "Fleet requests in progress at once, from all clients together; more are answered 503, which "
            "SuperNodes retry with back-off. Bounds the SuperLink's memory for request bodies at about "
            "maxRequests x maxBodyMiB (64 x 16 MiB = 1 GiB by default; Flower holds about twice a body while "
            "it parses it)."
        ),
    )
    maxRequestsPerAddress: int = Field(
        default=32,
        ge=1,
        le=16384,
        description=(
            "Fleet requests in progress at once from one client address; more are answered 503. A SuperNode "
            "has at most 3 (its two object transfers and its heartbeat). SuperNodes behind one NAT, or behind "
            "a LoadBalancer with externalTrafficPolicy Cluster, share an address: half of maxRequests by "
            "default, so one address cannot take every slot."
        ),
    )
    requestsPerSecondPerAddress: int = Field(
        default=200,
        ge=1,
        le=100000,
        description=(
            "Fleet requests a second from one client address, with bursts of twice as many; more are "
            "answered 503, which SuperNodes retry with back-off. An idle SuperNode asks about 0.4 a second "
            "(a poll every 3 s, a heartbeat about every 20 s), so the default holds about 500 idle "
            "SuperNodes behind one address; a model's transfer asks one request per object (an array is one "
            "object and a chunk per 5 MiB)."
        ),
    )
    clientTimeoutSeconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description=(
            "How long the proxy waits for a client's request header, between two reads of its body, and "
            "between two writes of its answer; a client that stalls longer is cut off. Flower's own client "
            "gives up after 30 s of the same, so the default never cuts off a SuperNode still waiting."
        ),
    )


class SuperLinkSpec(Storage):
    image: Image | None = Field(
        default=None, description="SuperLink container image; defaults to flwr/superlink:<spec.version>."
    )
    providerConfigRef: ProviderConfigRef | None = Field(
        default=None,
        description="Cluster of the SuperLink (the hub); defaults to spec.providerConfigRef.",
    )
    persistence: Persistence | None = Field(
        default=None,
        description=(
            "Keep the SuperLink's state (--database, --storage-dir) on a volume claim, so runs "
            "survive a restart. Without it the state lives in memory, except with node authentication: "
            "then it is kept unless enabled is false."
        ),
    )
    externalAddress: str | None = Field(
        default=None,
        min_length=1,
        pattern=HOST_PATTERN,
        description=(
            "host[:port] where pools in other clusters reach the Fleet API; the port "
            "defaults to service.ports.grpc. Without it the address is read from the "
            "observed Service (LoadBalancer ingress, or service.nodeAddress for NodePort)."
        ),
    )
    superexecImage: ImageOrEmpty | None = Field(
        default=None,
        description=(
            "SuperExec ServerApp sidecar image; process mode only. Defaults to flwr/superexec tagged with "
            "the SuperLink's release when spec.version is set."
        ),
    )
    inClusterControlAPI: bool = Field(
        default=False,
        description=(
            "Serve the Control API (`flwr run`, `flwr supernode ...`) and, from Flower 1.37, the Runtime API "
            "on the Service's Control port, to the namespaces and addresses spec.networkPolicy.controlNamespaces "
            "and controlCIDRs name. Open-source Flower authenticates no caller of either: for one trusted team "
            "only, and only on a ClusterIP Service. Off, they listen on the SuperLink pod's loopback alone, where "
            "`kubectl port-forward` (RBAC: pods/portforward) reaches them."
        ),
    )
    proxyImage: Image | None = Field(
        default=None,
        description=(
            f"From Flower 1.40: image of the nginx that serves the Fleet API alone in the SuperLink pod; "
            f"defaults to {FLEET_PROXY_IMAGE}. It runs `nginx` with the function's configuration."
        ),
    )
    proxyResources: K8sObject = k8s(
        "io.k8s.api.core.v1.ResourceRequirements", "Resources of the Fleet API proxy container (Flower 1.40+)."
    )
    proxyLimits: ProxyLimits = Field(
        default_factory=ProxyLimits,
        description=(
            "From Flower 1.40: the Fleet API proxy's request body cap, its limits per client address and in "
            "all, and its timeouts for slow clients."
        ),
        json_schema_extra=OBJECT_DEFAULT,
    )
    resources: K8sObject = k8s("io.k8s.api.core.v1.ResourceRequirements", "Resources of the superlink container.")
    superexecResources: K8sObject = k8s(
        "io.k8s.api.core.v1.ResourceRequirements", "Resources of the SuperExec sidecar."
    )
    env: K8sList = k8s_list("io.k8s.api.core.v1.EnvVar", "Environment of the superlink and its SuperExec sidecar.")
    extraArgs: list[str] = Field(default_factory=list, description="Arguments appended to the superlink command line.")
    podTemplate: K8sObject = k8s(
        "io.k8s.api.core.v1.PodTemplateSpec",
        "Pod-level settings merged into the SuperLink pod; containers are the function's.",
    )
    service: ServiceSpec = Field(
        default_factory=ServiceSpec, description="SuperLink Service.", json_schema_extra=OBJECT_DEFAULT
    )


class PoolImages(Model):
    supernode: ImageOrEmpty | None = Field(default=None, description="SuperNode image of this pool.")
    superexecClientApp: ImageOrEmpty | None = Field(
        default=None,
        description=(
            "SuperExec ClientApp sidecar image; process mode only. Defaults to flwr/superexec tagged with "
            "the pool's release when spec.version is set."
        ),
    )


class GPUConfig(Model):
    enabled: bool = Field(default=False, description="Request GPUs for this pool.")
    vendor: Literal["nvidia", "amd"] | None = Field(default=None, description="GPU vendor.")
    resourceName: str | None = Field(
        default=None,
        max_length=MAX_LABEL_KEY,
        pattern=LABEL_KEY_PATTERN,
        description="Extended resource name; defaults from the vendor (nvidia.com/gpu, amd.com/gpu).",
    )
    count: int = Field(default=1, ge=1, description="GPUs per pod.")
    mountAll: bool = Field(default=False, description="Expose every GPU of the node; needs the vendor.")


MAX_SELECTOR_LABELS = 16
DEFAULT_MAX_CLUSTERS = 100
# Crossplane reads a function's response up to gRPC's default 4 MiB. A
# Federation's answer holds one FederationCluster per remote cluster (a few
# KiB: the pools as written), each answered by a call of its own;
# tests/topology/test_clusters.py checks this many, with node authentication and TLS.
MAX_CLUSTERS = 1000


class ClusterSelector(Model):
    matchLabels: Labels = Field(
        min_length=1,
        max_length=MAX_SELECTOR_LABELS,
        description=(
            "Labels a provider-kubernetes ProviderConfig must carry for the pool to run in its cluster "
            "(for namespaced Federations: a ClusterProviderConfig, or a ProviderConfig in the Federation's namespace)."
        ),
    )
    maxClusters: int = Field(
        default=DEFAULT_MAX_CLUSTERS,
        ge=1,
        le=MAX_CLUSTERS,
        description=(
            "The most clusters the selector may stand for; more is an error, and nothing changes until it is "
            "mended. With {globalIndex} each cluster has a block of `replicas` SuperNode indices, so the pool "
            "takes maxClusters times replicas of them."
        ),
    )


class PoolSpec(Storage):
    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Pool name, unique in the Federation; part of generated names.",
    )
    replicas: int | None = Field(default=None, ge=1, description="SuperNodes in the pool; StatefulSet mode only.")
    providerConfigRef: ProviderConfigRef | None = Field(
        default=None,
        description="Cluster of this pool; defaults to spec.providerConfigRef.",
    )
    clusterSelector: ClusterSelector | None = Field(
        default=None,
        description=(
            "Instead of providerConfigRef: run the pool in every cluster whose ProviderConfig carries these "
            "labels, as one pool per cluster named <pool>-<cluster>. Clusters join and leave by their labels."
        ),
    )
    namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Namespace of the pool in its cluster; defaults to the Federation's.",
    )
    createNamespace: bool = Field(default=False, description="Compose the pool's namespace in its cluster as well.")
    caSecretRef: CASecretRef | None = Field(
        default=None,
        description=(
            "With TLS: a Secret in the pool's namespace and cluster holding the CA certificate "
            "SuperNodes trust. Without it the function composes one from the SuperLink's Secret."
        ),
    )
    authKeySecretRef: SecretKeyRef | None = Field(
        default=None,
        description=(
            "With node authentication: a Secret key holding the private key of this pool's one SuperNode "
            "(StatefulSet, replicas 1), which you register yourself. Without it SuperNodes make their own keys "
            "and publish them through Kubernetes, and the SuperLink's registrar registers them."
        ),
    )
    images: PoolImages = Field(default_factory=PoolImages, description="Images of this pool.")
    gpu: GPUConfig | None = Field(default=None, description="GPU settings.")
    supernodeResources: K8sObject = k8s(
        "io.k8s.api.core.v1.ResourceRequirements", "Resources of the supernode container."
    )
    superexecResources: K8sObject = k8s(
        "io.k8s.api.core.v1.ResourceRequirements", "Resources of the SuperExec sidecar."
    )
    podTemplate: K8sObject = k8s(
        "io.k8s.api.core.v1.PodTemplateSpec",
        "Pod-level settings merged into the pool's pods; containers are the function's.",
    )
    extraArgs: list[str] = Field(default_factory=list, description="Arguments appended to the supernode command line.")
    env: K8sList = k8s_list("io.k8s.api.core.v1.EnvVar", "Environment; merged over spec.supernodes.env.")
    nodeConfig: dict[str, NodeConfigField] = Field(
        default_factory=dict,
        max_length=MAX_NODE_CONFIG_KEYS,
        description=(
            "Passed to --node-config. Values are strings; numbers and true/false become typed "
            "values. They may use the placeholders {index}, {replicas}, {globalIndex}, {totalReplicas} (StatefulSet), "
            "{pool}, {node}, {cluster} and, with clusterSelector, {clusterIndex}."
        ),
        json_schema_extra={NODE_CONFIG: MAX_NODE_CONFIG_VALUE},
    )


class SuperNodesSpec(Model):
    image: Image | None = Field(
        default=None,
        description="Default SuperNode image; defaults to flwr/supernode:<spec.version>.",
    )
    env: K8sList = k8s_list("io.k8s.api.core.v1.EnvVar", "Environment of every pool.")
    pools: list[PoolSpec] = Field(min_length=1, max_length=MAX_POOLS, description="SuperNode pools, one workload each.")


class IssuerRef(Model):
    name: ObjectName = Field(description="Name of the cert-manager issuer.")
    kind: Literal["Issuer", "ClusterIssuer"] = Field(default="Issuer", description="Issuer or ClusterIssuer.")
    group: ObjectName = Field(default="cert-manager.io", description="API group of the issuer.")


class CertManagerTLS(Model):
    issuerRef: IssuerRef = Field(description="The issuer that signs the SuperLink's certificate.")


class TLSSpec(Model):
    secretName: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="An existing Secret in the SuperLink's namespace with tls.crt, tls.key and ca.crt.",
    )
    certManager: CertManagerTLS | None = Field(
        default=None,
        description="Have cert-manager issue the certificate (a Certificate is composed).",
    )


class NetworkPolicySpec(Model):
    enabled: bool = Field(default=True, description="Compose NetworkPolicies for the SuperLink and SuperNode pods.")
    fleetCIDRs: list[Annotated[str, Field(pattern=CIDR_PATTERN)]] = Field(
        default_factory=list,
        description="Addresses SuperNodes in other clusters reach the Fleet API from (their egress or NAT ranges).",
    )
    controlNamespaces: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]] = Field(
        default_factory=list,
        description=(
            "With spec.superlink.inClusterControlAPI: namespaces whose pods may reach the Control API (`flwr run`)."
        ),
    )
    controlCIDRs: list[Annotated[str, Field(pattern=CIDR_PATTERN)]] = Field(
        default_factory=list,
        description="With spec.superlink.inClusterControlAPI: addresses that may reach the Control API.",
    )
    supernodeEgress: K8sList = k8s_list(
        "io.k8s.api.networking.v1.NetworkPolicyEgressRule",
        "Egress SuperNode pods may use besides the SuperLink and DNS (e.g. a data store).",
    )


class LocalObjectReference(Model):
    name: ObjectName = Field(description="Name of the Secret.")


class FederationSpec(Model):
    mode: Literal["DaemonSet", "StatefulSet"] = Field(
        description="How SuperNode pools are deployed: one DaemonSet or StatefulSet per pool."
    )
    isolationMode: Literal["process", "subprocess"] = Field(
        description="How ServerApps and ClientApps run: SuperExec sidecars (process) or in-process."
    )
    version: str | None = Field(
        default=None,
        min_length=1,
        # Flower's longest tags (1.41.0-py3.11-ubuntu24.04) are a third of it; it bounds the cost
        # of the XRD's rule on it (function/api/rules.py, supported-version).
        max_length=64,
        description=(
            "Flower release the Federation runs (e.g. 1.41.0): images left unset default to "
            "flwr/superlink, flwr/supernode and flwr/superexec with this tag. An image whose tag names "
            "a release runs that release; each part's command lines follow its release. It may move to "
            "a newer release, or to another patch of its minor, never to an older minor."
        ),
        json_schema_extra={"x-kubernetes-validations": [NO_DOWNGRADE]},
    )
    insecure: bool | None = Field(
        default=None,
        description=(
            "Run SuperLink and SuperNodes with --insecure. Defaults to true without spec.tls "
            "(as the operator) and to false with it; true beside spec.tls is refused."
        ),
    )
    tls: TLSSpec | None = Field(default=None, description="TLS for the Fleet and Control APIs.")
    providerConfigRef: ProviderConfigRef = Field(
        default_factory=ProviderConfigRef,
        description="provider-kubernetes ProviderConfig of the target cluster.",
        json_schema_extra=OBJECT_DEFAULT,
    )
    namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description=(
            "Namespace of the workloads for a bare XR; a claim always deploys into "
            "its own namespace. Defaults to 'default'."
        ),
    )
    imagePullSecrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling the images, in every pod."
    )
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Pull policy of every container; Kubernetes' default when unset."
    )
    networkPolicy: NetworkPolicySpec = Field(
        default_factory=NetworkPolicySpec,
        description="NetworkPolicies, on by default.",
        json_schema_extra=OBJECT_DEFAULT,
    )
    nodeAuthentication: NodeAuthentication | None = Field(default=None, description="SuperNode authentication.")
    healthProbes: bool = Field(
        default=True,
        description=(
            "Start each Flower process with --health-server-address and give its container "
            "gRPC readiness and liveness probes."
        ),
    )
    allowRuntimeDependencyInstallation: bool = Field(
        default=False,
        description=(
            "Let Flower install each app's Python dependencies when a run starts (uv sync; Flower 1.29+): "
            "passes Flower's allow flag, gives uv a writable cache and lets SuperNode pods reach "
            "package indexes on TCP 443. Off: apps use what their images hold."
        ),
    )
    superlink: SuperLinkSpec = Field(
        default_factory=SuperLinkSpec, description="The SuperLink.", json_schema_extra=OBJECT_DEFAULT
    )
    supernodes: SuperNodesSpec


# The SuperNodes' key volume (function/builders/identity.py): a name pools' own volumes may not take.
IDENTITY_VOLUME = "supernode-identity"


def node_authentication(spec: FederationSpec) -> bool:
    """Whether the SuperLink accepts only registered SuperNodes."""
    return spec.nodeAuthentication is not None and spec.nodeAuthentication.enabled


def generates_identity(spec: FederationSpec, pool: PoolSpec) -> bool:
    """Whether a pool's SuperNodes make and register their own identities (not a key the user gives)."""
    return node_authentication(spec) and pool.authKeySecretRef is None


def superlink_state(spec: FederationSpec) -> Persistence | None:
    """Where the SuperLink keeps its state, or None for memory.

    With node authentication the registrations live in the state: a SuperLink
    that forgets them refuses every SuperNode until each registers again, so
    it keeps them unless persistence says enabled: false.
    """
    persistence = spec.superlink.persistence
    if persistence is None:
        return Persistence() if node_authentication(spec) else None
    return persistence if persistence.enabled else None


def superlink_ref(spec: FederationSpec) -> ProviderConfigRef:
    """The hub: the SuperLink's own ProviderConfig, else the Federation's."""
    return spec.superlink.providerConfigRef or spec.providerConfigRef


def pool_ref(spec: FederationSpec, pool: PoolSpec) -> ProviderConfigRef:
    """The ProviderConfig of a pool's cluster: its own, else the Federation's."""
    return pool.providerConfigRef or spec.providerConfigRef


def remote(spec: FederationSpec, pool: PoolSpec) -> bool:
    """Whether a pool runs in another cluster than the SuperLink.

    A pool that selects its clusters by label counts as remote: any cluster
    may come to carry its labels, so it must be able to run anywhere.
    """
    return pool.clusterSelector is not None or pool_ref(spec, pool) != superlink_ref(spec)
