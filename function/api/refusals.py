"""Every refusal of a Federation's input, in one place: each check names the field and says why.

The XRD rejects most bad input at admission; this module rejects all of it,
with the same messages, for the paths that skip the XRD (a render without
it, an older XRD, an operator manifest). In the order the front door
(function/federation/read.py) applies them:

- `parse`: the model's own types and bounds (function/api/spec.py), then
  `check`: the cross-field rules (function/api/rules.py, as the XRD's CEL
  has them), each pool's nodeConfig (function/api/nodeconfig.py) and the
  Kubernetes-typed fields (function/api/k8s_schema.py);
- `federation_name`: the XR has a name;
- `claim_namespace`: a claim or namespaced Federation stays in its namespace;
- `generated_names`: every name the function generates is a valid Kubernetes name;
- `releases`: every part runs a Flower release this function supports, and
  every pool can join its SuperLink at the releases they run;
- `cluster_counts`: no selector matches more clusters than its maxClusters.

A FederationRun (function/api/run_spec.py) is read by `run_spec`, refused
without a namespace (`unclaimed_run`) and by `run_release` on a Federation
whose Flower cannot start runs from its runner.

A FederationCluster (function/api/cluster_spec.py) is read by `cluster_spec`,
which checks the Federation's spec it carries with `parse` as above, and
`cluster_namespace`: a namespaced one speaks only for its namespace's Federation.

What the platform's policy refuses of the composed objects is judged on the
objects themselves, after composing: function/composition/admission.py.
Everything either refuses is a SpecError: a fatal result, nothing composed,
nothing that exists removed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sized
from typing import Any, TypeVar

import pydantic

from function import caching
from function.api import k8s_schema, names, nodeconfig, rules, versions
from function.api.cluster_spec import FederationClusterGroupSpec, FederationClusterSpec
from function.api.run_spec import ONE_SOURCE, FederationRunSpec
from function.api.spec import K8S_TYPE, FederationSpec, pool_ref, remote, superlink_ref
from function.releases.flower import RUNS_SINCE, SUPPORTED, Dialect, Release, Releases, dialect

Validated = TypeVar("Validated", bound=pydantic.BaseModel)


class SpecError(Exception):
    """The spec is invalid; errors holds (field path, message) pairs, remedy what would admit it, if anything."""

    def __init__(self, errors: list[tuple[str, str]], remedy: str = "") -> None:
        """Hold errors; the message lists them all, then the remedy."""
        self.errors = errors
        self.remedy = remedy
        listed = "; ".join(f"{field}: {message}" for field, message in errors)
        super().__init__(f"{listed}. {remedy}" if remedy else listed)


def parse(raw: Any) -> FederationSpec:
    """Parse and fully check a spec; raise SpecError naming every bad field.

    The cross-field and Kubernetes checks run once per spec: Crossplane sends the
    same spec on every reconcile, and they were a quarter of such a call. What is
    cached is their verdict, not the parsed spec: thousands of objects per
    Federation, which the garbage collector would scan on every full collection.
    Parsing itself (pydantic, compiled) is cheap.
    """
    spec = _validated(FederationSpec, raw)
    errors = _problems(caching.Content(raw), caching.Aside(spec))
    if errors:
        raise SpecError(list(errors))
    return spec


@caching.memoize()
def _problems(content: caching.Content, spec: caching.Aside) -> tuple[tuple[str, str], ...]:
    # A spec without problems has none in any order of its maps; one with problems is checked again
    # from the canonical form, so that a message names a map's keys in one order whichever was sent.
    if not check(spec.value):
        return ()
    return tuple(check(_validated(FederationSpec, content.canonical())))


def _validated(model: type[Validated], raw: Any) -> Validated:
    """The raw spec read as model, or a SpecError naming each bad field under spec."""
    if not isinstance(raw, dict):
        raise SpecError([("spec", "must be an object")])
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as err:
        raise SpecError(
            [(k8s_schema.field_path("spec", e["loc"]), e["msg"]) for e in err.errors(include_url=False)]
        ) from None


def cluster_spec(raw: Any) -> tuple[FederationClusterSpec, FederationSpec]:
    """A FederationCluster's spec, and the Federation's spec it carries, checked as the Federation's is.

    Its fields are named where they are: spec.federationSpec.<field> for the carried spec.
    """
    given = _validated(FederationClusterSpec, raw)
    try:
        spec = parse(given.federationSpec)
    except SpecError as err:
        carried = [("spec.federationSpec" + field.removeprefix("spec"), message) for field, message in err.errors]
        raise SpecError(carried) from None
    selectors = [p.name for p in spec.supernodes.pools if p.clusterSelector is not None]
    named = [s.selector for s in given.selected]
    if sorted(named) != sorted(selectors) or len(set(named)) != len(named):
        message = f"must name each selector pool of spec.federationSpec once ({', '.join(selectors) or 'none'})"
        raise SpecError([("spec.selected", message)])
    return given, spec


def run_spec(raw: Any) -> FederationRunSpec:
    """A FederationRun's spec (function/api/run_spec.py), its fields named under spec.

    Its run config goes to `flwr run --run-config`, which Flower parses as a
    node config is parsed: each value must read back unchanged, as there.
    """
    spec = _validated(FederationRunSpec, raw)
    # The XRD's rule on spec.app (run_spec.ONE_SOURCE_RULE), for a render or an older XRD.
    errors = [] if (spec.app.configMap is None) != (spec.app.image is None) else [("spec.app", ONE_SOURCE)]
    errors += nodeconfig.check(nodeconfig.typed(spec.runConfig), "StatefulSet", "spec.runConfig")
    if errors:
        raise SpecError(errors)
    return spec


def unclaimed_run() -> SpecError:
    """The refusal of a cluster-scoped XFederationRun of no claim: it belongs to no namespace, so to no Federation."""
    message = "an XFederationRun must come from a claim: apply a FederationRun in the Federation's namespace"
    return SpecError([("metadata", message)])


def run_release(federation: str, release: Release, dialect: Dialect) -> None:
    """A run is refused on a Federation whose Flower the runner cannot start runs with."""
    if not dialect.runs:
        message = (
            f"Federation {federation!r} runs Flower {release}, whose CLI the runner cannot start runs with; "
            f"FederationRuns need Flower {RUNS_SINCE} or later (upgrade the Federation's spec.version)"
        )
        raise SpecError([("spec.federation", message)])


def group_spec(raw: Any) -> FederationClusterGroupSpec:
    """A FederationClusterGroup's spec; each FederationCluster it composes is checked by that one's own call."""
    return _validated(FederationClusterGroupSpec, raw)


def cluster_namespace(
    namespace: str, part: FederationClusterSpec | FederationClusterGroupSpec, kind: str = "FederationCluster"
) -> None:
    """A namespaced FederationCluster (or group) is part of a Federation of its own namespace, bound to it as that is.

    Written by hand in one tenant's namespace, it must not name another's
    Federation: its objects would carry that Federation's names in the cluster.
    """
    errors = []
    if part.namespace != namespace:
        errors.append(("spec.namespace", f"must be {namespace!r}: the {kind}'s own namespace"))
    if not part.bound:
        errors.append(("spec.bound", "must be true: a namespaced Federation is bound to its namespace"))
    if errors:
        raise SpecError(errors)


def check(spec: FederationSpec) -> list[tuple[str, str]]:
    """The cross-field rules (function/api/rules.py, in the XRD's order), then what only the function can check."""
    return [*rules.violations(spec), *_node_configs(spec), *_check_kubernetes_types(spec)]


def _node_configs(spec: FederationSpec) -> list[tuple[str, str]]:
    """Each pool's nodeConfig entries that Flower would not read back as written."""
    return [
        error
        for i, pool in enumerate(spec.supernodes.pools)
        for error in nodeconfig.check(pool.nodeConfig, spec.mode, f"spec.supernodes.pools[{i}].nodeConfig")
    ]


def generated_names(federation: str, spec: FederationSpec) -> None:
    """Generated names must be valid Kubernetes names of the right length."""
    errors = []
    for field, name, kind in names.generated(federation, spec):
        problem = names.problem(name, kind)
        if problem:
            errors.append((field, f"generated {kind} name {name!r} {problem}"))
    if errors:
        raise SpecError(errors)


def _kubernetes_field(type_name: str, name: str, value: Any, path: str) -> list[tuple[str, str]]:
    """Check one Kubernetes-typed field (an object, or a list of them) against its definition."""
    if isinstance(value, list):
        errors = [e for i, item in enumerate(value) for e in k8s_schema.check(type_name, item, f"{path}[{i}]")]
    else:
        errors = k8s_schema.check(type_name, value, path)
    if name == "podTemplate" and (value.get("spec") or {}).get("containers"):
        errors.append(
            (
                f"{path}.spec.containers",
                (
                    "containers are built by the function; set images, env, "
                    "resources and volumeMounts in the spec instead"
                ),
            )
        )
    return errors


def _check_kubernetes_types(spec: FederationSpec) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    _walk_kubernetes_types(spec, "spec", errors)
    return errors


def _walk_kubernetes_types(model: pydantic.BaseModel, field: str, errors: list[tuple[str, str]]) -> None:
    """Every Kubernetes-typed field under model, checked into errors.

    A module function, not a closure: a closure that calls itself is a reference
    cycle, left for the garbage collector on every call.
    """
    for name, type_name in _fields_of(type(model)):
        value = getattr(model, name)
        if value is None:
            continue
        if type_name:
            errors.extend(_kubernetes_field(type_name, name, value, f"{field}.{name}"))
        elif isinstance(value, pydantic.BaseModel):
            _walk_kubernetes_types(value, f"{field}.{name}", errors)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, pydantic.BaseModel):
                    _walk_kubernetes_types(item, f"{field}.{name}[{i}]", errors)


@functools.cache
def _fields_of(model: type[pydantic.BaseModel]) -> tuple[tuple[str, str], ...]:
    """A model's fields by name, each with its Kubernetes type's name ("" if it has none).

    Read once per model class: reading each field's schema extras on every
    walk was most of the walk (a tenth of a call with a new spec).
    """
    fields = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        type_name = extra.get(K8S_TYPE)
        fields.append((name, type_name if isinstance(type_name, str) else ""))
    return tuple(fields)


def federation_name(name: str) -> None:
    """The XR must have a name: every object is named from it."""
    if not name:
        raise SpecError([("metadata.name", "is required")])


def claim_namespace(namespace: str, spec: FederationSpec) -> None:
    """A claim or namespaced XR deploys into its own namespace in the SuperLink's cluster."""
    errors = []
    if spec.namespace and spec.namespace != namespace:
        errors.append(("spec.namespace", f"must be empty or {namespace!r}: a claim deploys into its own namespace"))
    hub = superlink_ref(spec)
    for i, pool in enumerate(spec.supernodes.pools):
        # A selector pool's clusters are checked one by one, and held, not refused (function/topology/clusters.py).
        selects = pool.clusterSelector is not None
        if pool.namespace and pool.namespace != namespace and not selects and pool_ref(spec, pool) == hub:
            errors.append(
                (
                    f"spec.supernodes.pools[{i}].namespace",
                    f"must be empty or {namespace!r}: a claim's pools in the SuperLink's cluster stay in its namespace",
                )
            )
    if errors:
        raise SpecError(errors)


def releases(spec: FederationSpec) -> Releases:
    """The release each part runs (function/api/versions.py).

    Refused when one is unsupported or cannot be told, or when a pool could
    never join the SuperLink at the releases they run.
    """
    written = versions.written(spec)
    errors = [
        (field, f"Flower {text} is not a release this function supports: {SUPPORTED}")
        for field, text in written.unsupported
    ]
    superlink_fields = ("spec.version", "spec.superlink.image")
    if written.superlink is None and not any(field in superlink_fields for field, _ in written.unsupported):
        # First: neither field that would tell it was refused.
        errors.insert(
            0,
            (
                "spec.version",
                (
                    "cannot tell which Flower release runs: set spec.version, or tag spec.superlink.image "
                    "with the release (e.g. flwr/superlink:1.41.0)"
                ),
            ),
        )
    if errors or written.superlink is None:
        raise SpecError(errors)
    found = versions.releases(written.superlink, written.pools, written.version)
    errors = [*_unreachable(spec, found), *_dependency_installation(spec, found)]
    if errors:
        raise SpecError(errors)
    return found


def _unreachable(spec: FederationSpec, releases: Releases) -> list[tuple[str, str]]:
    """Pools whose SuperNodes could never join: Fleet APIs changed from gRPC to HTTP in 1.40.

    A gRPC SuperLink (before 1.40) cannot serve an HTTP SuperNode. An HTTP
    SuperLink serves older pools through its gRPC Fleet adapter (see
    Releases.legacy_fleet); its HTTP pools then dial the proxy's port, which
    pools in other clusters have no address for.
    """
    errors = []
    superlink, fleet = releases.superlink, releases.superlink_dialect.fleet_api
    for i, pool in enumerate(spec.supernodes.pools):
        release = releases.pools[pool.name]
        if fleet == "grpc" and dialect(release).fleet_api == "http":
            errors.append(
                (
                    f"spec.supernodes.pools[{i}]",
                    (
                        f"pool {pool.name} runs Flower {release} and the SuperLink {superlink}: a SuperLink "
                        "before 1.40 has no HTTP Fleet API, so its SuperNodes could never join; upgrade the "
                        "SuperLink first"
                    ),
                )
            )
        elif releases.dials_proxy_port(pool.name) and remote(spec, pool):
            errors.append(
                (
                    f"spec.supernodes.pools[{i}]",
                    (
                        f"pool {pool.name} runs Flower {release} in another cluster while pools before 1.40 "
                        "hold the SuperLink's Fleet port for Flower's gRPC adapter, so its SuperNodes have no "
                        "address for the HTTP Fleet API; upgrade those pools first"
                    ),
                )
            )
    return errors


def _dependency_installation(spec: FederationSpec, releases: Releases) -> list[tuple[str, str]]:
    """Flower before 1.29 cannot install an app's dependencies: allowing it there would promise what never happens."""
    if not spec.allowRuntimeDependencyInstallation:
        return []
    parts = [("the SuperLink", releases.superlink)] + [(f"pool {n}", r) for n, r in releases.pools.items()]
    old = [f"{part} runs {release}" for part, release in parts if dialect(release).dependency_install == "absent"]
    if not old:
        return []
    return [
        (
            "spec.allowRuntimeDependencyInstallation",
            f"needs Flower 1.29 or newer, where apps can install their dependencies; {', '.join(old)}",
        )
    ]


def cluster_counts(spec: FederationSpec, found: Mapping[str, Sized | None]) -> None:
    """No selector may match more clusters than its maxClusters: which would be left out?

    found: per selector pool, the clusters Crossplane found (None while it has
    not answered). Nothing changes until the labels or the bound are mended.
    """
    errors = []
    for i, pool in enumerate(spec.supernodes.pools):
        chosen = found.get(pool.name)
        if pool.clusterSelector is None or chosen is None:
            continue
        limit = pool.clusterSelector.maxClusters
        if len(chosen) > limit:
            message = (
                f"matches {len(chosen)} clusters, more than maxClusters {limit}: raise maxClusters or narrow "
                "matchLabels; nothing changes until then"
            )
            errors.append((f"spec.supernodes.pools[{i}].clusterSelector", message))
    if errors:
        raise SpecError(errors)


# Crossplane reads a function's response with gRPC's default limit, 4 MiB.
CROSSPLANE_READS = "4 MiB"
# The parts of a too deep path a message shows: enough to find where it is.
SHOWN_PATH_PARTS = 12
# Where the XR itself is in a request: a path under it is a Federation's field.
COMPOSITE_PATH = ["observed", "composite", "resource"]


def too_large(kind: str, resources: int, size: int) -> str:
    """Why a composite is refused whose composed resources Crossplane could not read (a gRPC error naming nothing)."""
    return (
        f"invalid {kind}: its {resources} composed resources take {size / 2**20:.1f} MiB, more than Crossplane "
        f"reads from a function ({CROSSPLANE_READS}): select fewer clusters (clusterSelector.maxClusters) or pools, "
        "make the pools' pod templates smaller, or split the Federation"
    )


def too_deep(path: list[Any], depth: int) -> str:
    """Why a request nested deeper than protobuf decodes (depth levels of messages) is refused, naming where.

    The API server stores, and Crossplane sends, JSON nested far deeper than
    protobuf's decoder reads in the fields of Kubernetes types that keep unknown fields.
    """
    in_xr = path[: len(COMPOSITE_PATH)] == COMPOSITE_PATH
    shown = path[len(COMPOSITE_PATH) :] if in_xr else path
    where = k8s_schema.field_path(str(shown[0]), shown[1:SHOWN_PATH_PARTS])
    if len(shown) > SHOWN_PATH_PARTS:
        where += "..."
    return (
        f"{'invalid Federation' if in_xr else 'cannot read the request'}: {where}: nested deeper than a "
        f"function's request can carry (protobuf decodes {depth} levels of messages, about 30 levels of maps and "
        "lists)"
    )


def images(spec: FederationSpec) -> versions.Images:
    """Every part's image, once versions.with_default_images named the unset ones from spec.version.

    The rules require an image wherever spec.version names none (rules.py), so
    a missing one here is refused as they would refuse it: the builders take
    these as given.
    """
    errors: list[tuple[str, str]] = []
    superlink = spec.superlink.image
    if not superlink:
        errors.append(("spec.superlink.image", "is required unless spec.version is set"))
    pools = []
    for i, pool in enumerate(spec.supernodes.pools):
        image = pool.images.supernode or spec.supernodes.image
        if not image:
            errors.append((f"spec.supernodes.pools[{i}].images.supernode", "is required unless spec.version is set"))
        pools.append((pool.name, image or ""))
    if errors:
        raise SpecError(errors)
    return versions.Images(superlink or "", tuple(pools))
