"""The platform's policy: what a Federation may ask for, set where tenants cannot change it.

provider-kubernetes applies every composed Object with its own rights, in
every cluster a ProviderConfig reaches: whatever a Federation puts into a pod
runs with the provider's rights, not its author's. So a platform team states,
in the function's input of its Composition's pipeline step (which only it
writes), what Federations may ask for; the function refuses the rest
(function/composition/admission.py), with the field and the policy that
refuses it named.

The defaults are safe: every composed pod meets the restricted Pod Security
Standard, whatever the Federation says; no platform-owned pod field (the
ServiceAccount, the node, the runtime and priority classes), no user init
container and no run's app from an image (either would run an image the
platform did not choose); pools only in the Federation's own namespace (a
claim's or a namespaced Federation's), never in a cluster's system namespaces.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Literal, get_args

import pydantic
from pydantic import Field

from function.api import k8s_schema
from function.api.refusals import SpecError
from function.api.spec import Model

API_VERSION = "flower.fn.crossplane.io/v1alpha1"
KIND = "Policy"

# The Pod Security Standards' levels, strictest first.
Level = Literal["restricted", "baseline", "privileged"]
LEVELS: tuple[str, ...] = get_args(Level)

# Pod fields the platform owns: the function sets the first two, the rest are the cluster's to assign.
PlatformPodField = Literal[
    "serviceAccountName",
    "automountServiceAccountToken",
    "nodeName",
    "runtimeClassName",
    "priorityClassName",
]
PLATFORM_POD_FIELDS: tuple[str, ...] = get_args(PlatformPodField)

# Namespaces no Federation may use, whatever the policy says: the clusters' own and Crossplane's.
RESERVED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "crossplane-system")


class PodSecurityException(Model):
    namespaces: list[str] = Field(
        min_length=1, description="Namespaces (shell-style patterns) where the level below applies instead."
    )
    podSecurity: Level = Field(description="The Pod Security level pods there must meet.")


class ClusterRules(Model):
    """Rules for some clusters: each field set here replaces the policy's own in the clusters it names."""

    providerConfigs: list[str] = Field(
        min_length=1, description="The clusters these rules are for: ProviderConfig names (shell-style patterns)."
    )
    podSecurity: Level | None = Field(
        default=None, description="The Pod Security Standard pods there must meet; the policy's when absent."
    )
    exceptions: list[PodSecurityException] | None = Field(
        default=None, description="Namespaces there with another level; the policy's when absent."
    )
    namespaces: list[str] | None = Field(
        default=None,
        description="Namespaces pools may use there besides the Federation's own; the policy's when absent.",
    )
    createNamespaces: bool | None = Field(
        default=None, description="Whether pools may compose their namespace there; the policy's when absent."
    )


# The fields a clusters entry may set for its clusters: all of its own but the names it matches.
CLUSTER_FIELDS = tuple(f for f in ClusterRules.model_fields if f != "providerConfigs")


class Rules(Model):
    """What Federations may ask for: the policy's fields, given inline or in an EnvironmentConfig's data."""

    podSecurity: Level = Field(
        default="restricted",
        description=(
            "The Pod Security Standard every composed pod must meet, and the highest level a composed "
            "Namespace may be labelled with."
        ),
    )
    exceptions: list[PodSecurityException] = Field(
        default_factory=list,
        description="Namespaces with another level: where GPU pools that need privilege (AMD mountAll) may run.",
    )
    podFields: list[PlatformPodField] = Field(
        default_factory=list,
        description=f"Platform-owned pod fields a Federation's podTemplate may set: {', '.join(PLATFORM_POD_FIELDS)}.",
    )
    initContainerImages: list[str] = Field(
        default_factory=list,
        description="Image prefixes a podTemplate's init containers may use; none at all when empty.",
    )
    runImages: list[str] = Field(
        default_factory=list,
        description=(
            "Image prefixes a FederationRun's app.image may use; none at all when empty (runs then take "
            "their app from a ConfigMap only). The image runs as a Job beside the SuperLink, with the right "
            "to write its run's bundle."
        ),
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description=(
            "Namespaces (shell-style patterns) pools may use in any cluster besides the Federation's own (a "
            "claim's or a namespaced Federation's; a cluster-scoped Federation's pools may use any). Never "
            f"{', '.join(RESERVED_NAMESPACES)}."
        ),
    )
    createNamespaces: bool = Field(
        default=True, description="Whether pools may compose their namespace (createNamespace)."
    )
    clusters: list[ClusterRules] = Field(
        default_factory=list,
        description=(
            "Rules for some clusters, by ProviderConfig name: in a cluster the first entry names, the fields "
            "it sets replace the ones above (a GPU cluster whose namespace gpu-jobs admits privileged pods, "
            "say, while every other cluster stays restricted)."
        ),
    )

    def for_cluster(self, provider_config: str) -> Rules:
        """The rules in the cluster a ProviderConfig reaches: the first clusters entry naming it, over these."""
        for entry in self.clusters:
            if any(fnmatch.fnmatchcase(provider_config, p) for p in entry.providerConfigs):
                changes = {f: getattr(entry, f) for f in CLUSTER_FIELDS if getattr(entry, f) is not None}
                return self.model_copy(update={**changes, "clusters": []})
        return self

    def level(self, namespace: str) -> Level:
        """The Pod Security level pods in namespace must meet."""
        for exception in self.exceptions:
            if any(fnmatch.fnmatchcase(namespace, p) for p in exception.namespaces):
                return exception.podSecurity
        return self.podSecurity

    def admits_namespace(self, namespace: str, own: str | None) -> bool:
        """Whether pools may use namespace; own: the Federation's own namespace, where it is bound to one."""
        if namespace in RESERVED_NAMESPACES:
            return False
        # A tenant's own namespace is theirs in every cluster; the list only adds to it.
        if own is None or namespace == own:
            return True
        return any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)

    def admits_image(self, image: str) -> bool:
        """Whether a user init container may run image."""
        return any(image.startswith(prefix) for prefix in self.initContainerImages)

    def admits_run_image(self, image: str) -> bool:
        """Whether a FederationRun's app may come from image."""
        return any(image.startswith(prefix) for prefix in self.runImages)


class Policy(Rules):
    """The function's input: the rules inline, or the EnvironmentConfig that holds them."""

    apiVersion: Literal["flower.fn.crossplane.io/v1alpha1"] = "flower.fn.crossplane.io/v1alpha1"
    kind: Literal["Policy"] = "Policy"
    environmentConfig: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "The name of an EnvironmentConfig whose data holds these rules: once it exists it replaces the "
            "rules given here, which stay the policy while it does not (so platform teams change the policy "
            "with kubectl, and deleting it falls back to what the Composition says)."
        ),
    )


DEFAULT = Policy()
# The EnvironmentConfig the packages' Compositions read the policy from (apis/): absent, the defaults.
PLATFORM_ENVIRONMENT_CONFIG = "flower-platform-policy"
# The required-resource key under which Crossplane hands the function the policy's EnvironmentConfig.
REQUIREMENT = "platform-policy"
ENVIRONMENT_CONFIG_API = "apiextensions.crossplane.io/v1beta1"
ENVIRONMENT_CONFIG_KIND = "EnvironmentConfig"


def load(raw: Any) -> Policy:
    """The policy the Composition's step gives (None or empty: the defaults); SpecError naming input.<field>."""
    if raw is None or raw == {}:
        return DEFAULT
    if not isinstance(raw, dict):
        raise SpecError([("input", "must be an object")])
    try:
        return Policy.model_validate(raw)
    except pydantic.ValidationError as err:
        raise SpecError(
            [(k8s_schema.field_path("input", e["loc"]), e["msg"]) for e in err.errors(include_url=False)]
        ) from None


def effective(policy: Policy, found: list[dict[str, Any]]) -> Rules:
    """The rules in force: the named EnvironmentConfig's data when Crossplane found it, else the input's.

    SpecError naming the EnvironmentConfig's data.<field> when its data is no policy.
    """
    if policy.environmentConfig is None or not found:
        return policy
    data = found[0].get("data")
    where = f"EnvironmentConfig {policy.environmentConfig}: data"
    if not isinstance(data, dict):
        raise SpecError([(where, "must be an object holding the policy's fields")])
    try:
        return Rules.model_validate(data)
    except pydantic.ValidationError as err:
        raise SpecError(
            [(k8s_schema.field_path(where, e["loc"]), e["msg"]) for e in err.errors(include_url=False)]
        ) from None


def looser(level: str, than: str) -> bool:
    """Whether Pod Security level is looser than than."""
    return LEVELS.index(level) > LEVELS.index(than)
