"""The platform's policy applied to what a Federation composes: every refusal of it is here.

Judged on the composed pods, not on the Federation's fields one by one: what
provider-kubernetes would apply is what counts, whichever field put it there
(a podTemplate, a volume, a GPU setting). Each refusal names the Federation
field it came from and the policy field that refuses it; refused, nothing is
composed and nothing that exists is removed (a fatal result), and the
Federation says why in its Synced condition.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from function.api.policy import (
    LEVELS,
    PLATFORM_ENVIRONMENT_CONFIG,
    PLATFORM_POD_FIELDS,
    RESERVED_NAMESPACES,
    Rules,
    looser,
)
from function.api.refusals import SpecError
from function.api.spec import PoolSpec
from function.composition import compose, pod_security, resource_names
from function.federation.read import pool_resource
from function.federation.runs import Run
from function.federation.value import Federation

WORKLOAD_KINDS = ("StatefulSet", "DaemonSet", "Deployment")
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# How a refusal of the policy begins what would admit it: `function render` looks for it.
ALLOWED_BY = "A platform team allows it with these fields of the platform's policy"


@dataclasses.dataclass(frozen=True)
class Allow:
    """What of the policy would admit a refusal: a value of one of its fields, in a clusters entry or not.

    key: exceptions (value: namespace, level), podFields, initContainerImages, runImages, namespaces
    or createNamespaces; entry: the providerConfigs of the clusters entry that sets key for
    the cluster, where one does ("" for the policy's own field).
    """

    key: str
    value: tuple[str, ...]
    entry: str = ""


# (Federation field, why, what would admit it: None where no policy may)
Refused = tuple[str, str, Allow | None]


def refusals(fed: Federation, policy: Rules, built: compose.Plan) -> list[tuple[str, str]]:
    """(Federation field, why) for everything built that policy does not allow; empty when all is allowed.

    Each object is judged by the rules of the cluster it goes to (Rules.for_cluster).
    """
    return [(field, why) for field, why, _ in _refused(fed, policy, built)]


def _refused(fed: Federation, policy: Rules, built: compose.Plan) -> list[Refused]:
    out: list[Refused] = []
    sources = _sources(fed)
    for name, composed in sorted(built.resources.items()):
        manifest = composed.manifest
        source = sources.get(name)
        if source is None:
            continue
        field, given = source
        if manifest.get("kind") in WORKLOAD_KINDS:
            out += _workload(field, given, manifest, _Judge(policy, composed.provider_config.name))
    for pool in built.pools:
        field, _ = sources[pool_resource(pool.name)]
        own = fed.namespace if fed.bound else None
        out += _namespace(field, pool.namespace, pool.spec, own, _Judge(policy, pool.provider_config.name))
    for name, composed in sorted(built.resources.items()):
        if composed.manifest.get("kind") == "Namespace":
            out += _created_namespace(fed, name, composed.manifest, _Judge(policy, composed.provider_config.name))
    return list(dict.fromkeys(out))


@dataclasses.dataclass(frozen=True)
class _Judge:
    """The rules in one cluster, and where in the policy a change of one of its fields would go."""

    policy: Rules
    provider_config: str

    @property
    def rules(self) -> Rules:
        return self.policy.for_cluster(self.provider_config)

    def allow(self, key: str, *value: str) -> Allow:
        """What would admit a refusal: key set to value, where the cluster reads key from."""
        for entry in self.policy.clusters:
            if any(fnmatch.fnmatchcase(self.provider_config, p) for p in entry.providerConfigs):
                return Allow(key, value, ", ".join(entry.providerConfigs) if getattr(entry, key) is not None else "")
        return Allow(key, value)


def _sources(fed: Federation) -> dict[str, tuple[str, Any]]:
    """Composition resource name of each workload -> its Federation field path and the spec part it came from."""
    written = fed.written.supernodes.pools
    index = {pool.name: i for i, pool in enumerate(written)}
    out: dict[str, tuple[str, Any]] = {resource_names.SUPERLINK: ("spec.superlink", fed.spec.superlink)}
    for pool in fed.spec.supernodes.pools:
        member = fed.member(pool.name)
        i = index[member.selector if member else pool.name]
        out[pool_resource(pool.name)] = (f"spec.supernodes.pools[{i}]", pool)
    return out


def _workload(field: str, given: Any, manifest: dict[str, Any], judge: _Judge) -> list[Refused]:
    template = manifest["spec"]["template"]
    pod, annotations = template["spec"], (template.get("metadata") or {}).get("annotations") or {}
    namespace = manifest["metadata"].get("namespace", "")
    policy = judge.rules
    level = policy.level(namespace)
    user = (given.podTemplate or {}).get("spec") or {}
    out: list[Refused] = []
    violations = pod_security.failing(pod, level, annotations)
    # The strictest level the pod meets: baseline unless a violation breaks baseline too.
    needed = LEVELS[-1] if any(v.level == LEVELS[1] for v in violations) else LEVELS[1]
    for violation in violations:
        where = _blame(field, given, pod, violation.path)
        why = f"{violation.what}: refused by the platform's policy (podSecurity {level} in {namespace})"
        out.append((where, why, judge.allow("exceptions", namespace, needed)))
    for key in sorted(set(user) & set(PLATFORM_POD_FIELDS)):
        if key not in policy.podFields:
            why = f"refused by the platform's policy (podFields does not list {key})"
            out.append((f"{field}.podTemplate.spec.{key}", why, judge.allow("podFields", key)))
    for j, container in enumerate(user.get("initContainers") or []):
        image = container.get("image") if isinstance(container, dict) else None
        if not isinstance(image, str) or not policy.admits_image(image):
            allowed = ", ".join(policy.initContainerImages) or "none"
            out.append(
                (
                    f"{field}.podTemplate.spec.initContainers[{j}].image",
                    f"{image} is refused by the platform's policy (initContainerImages: {allowed})",
                    judge.allow("initContainerImages", _repository(image)) if isinstance(image, str) else None,
                )
            )
    return out


def _repository(image: str) -> str:
    """An image without its tag or digest: the prefix that admits every tag of it."""
    name = image.split("@", 1)[0]
    head, _, tag = name.rpartition(":")
    return head if head and "/" not in tag else name


def _blame(field: str, given: Any, pod: dict[str, Any], path: tuple[str | int, ...]) -> str:
    """The Federation field that put path of the composed pod there: a podTemplate key, a volume, a GPU setting."""
    user = (given.podTemplate or {}).get("spec") or {}
    mount_all = isinstance(given, PoolSpec) and given.gpu is not None and given.gpu.mountAll
    head = path[0]
    found = None
    if head in ("volumes", "initContainers") and isinstance(path[1], int):
        found = _blame_named(field, given, pod, path, user)
    if found is None and mount_all and head in ("volumes", "containers"):
        found = f"{field}.gpu.mountAll"
    if found is None and head == "metadata":
        found = f"{field}.podTemplate.metadata.annotations"
    if found is None and isinstance(head, str) and head in user:
        found = f"{field}.podTemplate.spec{_rest(path)}"
    if found is None and "securityContext" in user and path[-1] in ("seccompProfile", "runAsNonRoot"):
        # A container without its own falls back on the pod's, which the podTemplate replaced.
        found = f"{field}.podTemplate.spec.securityContext"
    return found or field


def _blame_named(
    field: str, given: Any, pod: dict[str, Any], path: tuple[str | int, ...], user: dict[str, Any]
) -> str | None:
    """A volume or init container of the composed pod, by its name in the user's lists; None if it is ours."""
    key, index = str(path[0]), int(path[1])
    name = pod[key][index].get("name")
    lists = [(f"{field}.podTemplate.spec.{key}", user.get(key) or [])]
    if key == "volumes":
        lists.insert(0, (f"{field}.volumes", given.volumes or []))
    for where, items in lists:
        for j, item in enumerate(items):
            if isinstance(item, dict) and item.get("name") == name:
                return f"{where}[{j}]{_rest(path[2:])}"
    return None


def _rest(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _namespace(field: str, namespace: str, spec: PoolSpec, own: str | None, judge: _Judge) -> list[Refused]:
    policy = judge.rules
    if policy.admits_namespace(namespace, own):
        return []
    where = f"{field}.namespace" if spec.namespace else field
    if namespace in RESERVED_NAMESPACES:
        return [(where, f"namespace {namespace} is a cluster's own: no Federation may use it", None)]
    listed = ", ".join(policy.namespaces) or "none"
    why = (
        f"namespace {namespace} is refused by the platform's policy: pools run in the Federation's own "
        f"namespace ({own}) and those its namespaces field lists ({listed})"
    )
    return [(where, why, judge.allow("namespaces", namespace))]


def _created_namespace(fed: Federation, resource: str, manifest: dict[str, Any], judge: _Judge) -> list[Refused]:
    policy = judge.rules
    name = manifest["metadata"]["name"]
    pools = [
        (i, p)
        for i, p in enumerate(fed.written.supernodes.pools)
        if p.createNamespace and (p.namespace or fed.namespace) == name
    ]
    where = f"spec.supernodes.pools[{pools[0][0]}].createNamespace" if pools else resource
    if not policy.createNamespaces:
        return [(where, "refused by the platform's policy (createNamespaces: false)", judge.allow("createNamespaces"))]
    level = (manifest["metadata"].get("labels") or {}).get(ENFORCE_LABEL, "privileged")
    allowed = policy.level(name)
    if looser(level, allowed):
        why = f"a namespace of Pod Security level {level} is refused by the platform's policy ({allowed})"
        return [(where, why, judge.allow("exceptions", name, level))]
    return []


def check(fed: Federation, policy: Rules, built: compose.Plan) -> None:
    """Raise SpecError naming every refusal of policy, and what of the policy would admit them; nothing when all is."""
    found = _refused(fed, policy, built)
    if found:
        allows = [allow for _, _, allow in found if allow is not None]
        raise SpecError([(field, why) for field, why, _ in found], remedy(allows))


def check_run(run: Run, policy: Rules) -> None:
    """Raise SpecError when a run's app comes from an image the policy does not admit (runImages).

    A run composes nothing itself: its Federation's call bundles the image in a
    Job beside the SuperLink (function/composition/runs.py), and leaves out
    the runs this refuses, so a tenant's run can never break the Federation.
    """
    image = run.spec.app.image
    if image is None or policy.admits_run_image(image.reference):
        return
    allowed = ", ".join(policy.runImages) or "none"
    why = f"{image.reference} is refused by the platform's policy (runImages: {allowed})"
    raise SpecError([("spec.app.image.reference", why)], remedy([Allow("runImages", (_repository(image.reference),))]))


def remedy(allows: list[Allow]) -> str:
    """What of the platform's policy would admit these, as its fields in YAML's flow style; "" for nothing."""
    if not allows:
        return ""
    entries: dict[str, dict[str, list[str]]] = {}
    exceptions: dict[tuple[str, str], str] = {}  # (entry, namespace) -> the loosest level asked
    for allow in allows:
        if allow.key == "exceptions":
            namespace, level = allow.value
            key = (allow.entry, namespace)
            exceptions[key] = level if looser(level, exceptions.get(key, LEVELS[0])) else exceptions[key]
            entries.setdefault(allow.entry, {}).setdefault("exceptions", [])
        else:
            values = entries.setdefault(allow.entry, {}).setdefault(allow.key, [])
            values += [v for v in allow.value if v not in values]
    for (entry, namespace), level in exceptions.items():
        entries[entry]["exceptions"].append(f"{{namespaces: [{namespace}], podSecurity: {level}}}")
    parts = []
    for entry, fields in entries.items():
        said = "; ".join(_field(key, values) for key, values in fields.items())
        parts.append(f"in its clusters entry for [{entry}]: {said}" if entry else said)
    where = f"the packages' Compositions read it from the EnvironmentConfig {PLATFORM_ENVIRONMENT_CONFIG}"
    return f"{ALLOWED_BY} ({where}): {'; '.join(parts)}"


def _field(key: str, values: list[str]) -> str:
    return "createNamespaces: true" if key == "createNamespaces" else f"{key}: [{', '.join(values)}]"
