"""Hypothesis strategies for Federation specs, generated from the model itself.

The walk follows the model's own JSON schema (hack/gen_xrd.resolved_schema,
the same one the XRD is made from), so a field added to function/api/spec.py is
generated here without a change. Two things the schema cannot say come from
small tables: what a Kubernetes-typed field holds (the model keeps those open)
and, for a few fields, realistic values (an image tag that names a release),
drawn beside the schema's own random ones so both kinds are covered.

specs() gives schema-valid specs; most also pass the cross-field rules, the
rest exercise them. invalid_specs() takes such a spec and breaks exactly one
thing the XRD's schema refuses (a wrong type, a number out of range, an
unknown field, a string or map over its bound, a pattern miss, a missing
required field) or that only the function can refuse (a bad placeholder):
the function must refuse each with a fatal result.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from hypothesis import strategies as st

from function.api import spec as model
from support.peers import hack_module

gen_xrd = hack_module("gen_xrd")

SCHEMA: dict[str, Any] = gen_xrd.resolved_schema(model.FederationSpec)

# Small collections keep examples fast; the bounds themselves are probed by
# invalid_specs(), which goes one past each.
MAX_GENERATED_ITEMS = 3
MAX_GENERATED_POOLS = 4
MAX_GENERATED_TEXT = 24

RELEASES = ["1.25.0", "1.29.0", "1.35.0", "1.37.0", "1.41.0", "1.41.2"]

dns_labels = st.from_regex(r"\A[a-z]([-a-z0-9]{0,10}[a-z0-9])?\Z")
quantities = st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 4096), st.sampled_from(["", "m", "Mi", "Gi", "k"]))
label_keys = st.from_regex(r"\A([a-z0-9]{1,8}\.[a-z]{2,5}/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,10}[a-zA-Z0-9])?\Z")
label_values = st.from_regex(r"\A([a-zA-Z0-9]([-a-zA-Z0-9_.]{0,10}[a-zA-Z0-9])?)?\Z")
env_names = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,12}\Z")
any_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=MAX_GENERATED_TEXT
)  # JSON strings: no lone surrogates
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.floats(allow_nan=False) | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)


def _resources() -> st.SearchStrategy[dict[str, Any]]:
    amounts = st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), quantities, max_size=2)
    return st.fixed_dictionaries({}, optional={"requests": amounts, "limits": amounts})


def _env_var() -> st.SearchStrategy[dict[str, Any]]:
    field_ref = st.fixed_dictionaries(
        {"fieldRef": st.fixed_dictionaries({"fieldPath": st.sampled_from(["metadata.name", "spec.nodeName"])})}
    )
    return st.one_of(
        st.fixed_dictionaries({"name": env_names, "value": any_text}),
        st.fixed_dictionaries({"name": env_names, "valueFrom": field_ref}),
    )


def _volume() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"name": dns_labels, "emptyDir": st.just({})}),
        st.fixed_dictionaries({"name": dns_labels, "configMap": st.fixed_dictionaries({"name": dns_labels})}),
        st.fixed_dictionaries({"name": dns_labels, "secret": st.fixed_dictionaries({"secretName": dns_labels})}),
    )


def _volume_mount() -> st.SearchStrategy[dict[str, Any]]:
    paths = st.from_regex(r"\A/[a-z]{1,8}(/[a-z0-9]{1,8}){0,2}\Z")
    return st.fixed_dictionaries({"name": dns_labels, "mountPath": paths}, optional={"readOnly": st.booleans()})


def _pod_template() -> st.SearchStrategy[dict[str, Any]]:
    toleration = st.fixed_dictionaries(
        {"key": label_keys, "operator": st.sampled_from(["Exists", "Equal"])},
        optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"]), "value": label_values},
    )
    pod_spec = st.fixed_dictionaries(
        {},
        optional={
            "nodeSelector": st.dictionaries(label_keys, label_values, max_size=2),
            "tolerations": st.lists(toleration, max_size=2),
            "priorityClassName": dns_labels,
            "terminationGracePeriodSeconds": st.integers(0, 600),
        },
    )
    metadata = st.fixed_dictionaries(
        {},
        optional={
            "labels": st.dictionaries(label_keys, label_values, max_size=2),
            "annotations": st.dictionaries(label_keys, any_text, max_size=2),
        },
    )
    return st.fixed_dictionaries({}, optional={"metadata": metadata, "spec": pod_spec})


def _claim_spec() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "accessModes": st.lists(st.sampled_from(["ReadWriteOnce", "ReadOnlyMany"]), min_size=1, max_size=1),
            "resources": st.fixed_dictionaries({"requests": st.fixed_dictionaries({"storage": quantities})}),
        },
        optional={"storageClassName": dns_labels},
    )


def _egress_rule() -> st.SearchStrategy[dict[str, Any]]:
    cidrs = st.sampled_from(["10.0.0.0/8", "192.168.1.0/24", "0.0.0.0/0"])
    peer = st.fixed_dictionaries({"ipBlock": st.fixed_dictionaries({"cidr": cidrs})})
    port = st.fixed_dictionaries({"port": st.integers(1, 65535), "protocol": st.sampled_from(["TCP", "UDP"])})
    return st.fixed_dictionaries({}, optional={"to": st.lists(peer, max_size=2), "ports": st.lists(port, max_size=2)})


# What each Kubernetes type the model keeps open holds. Random JSON beside it
# tries the function's own schema check (function/api/k8s_schema.py).
KUBERNETES: dict[str, st.SearchStrategy[Any]] = {
    "io.k8s.api.core.v1.ResourceRequirements": _resources(),
    "io.k8s.api.core.v1.EnvVar": _env_var(),
    "io.k8s.api.core.v1.Volume": _volume(),
    "io.k8s.api.core.v1.VolumeMount": _volume_mount(),
    "io.k8s.api.core.v1.PodTemplateSpec": _pod_template(),
    "io.k8s.api.core.v1.PersistentVolumeClaimSpec": _claim_spec(),
    "io.k8s.api.networking.v1.NetworkPolicyEgressRule": _egress_rule(),
}
RANDOM_KUBERNETES_SHARE = 20  # one in this many Kubernetes-typed values is random JSON

PLACEHOLDERS = ["{index}", "{replicas}", "{globalIndex}", "{totalReplicas}", "{pool}", "{node}", "{cluster}"]
node_config_keys = st.from_regex(r"\A[a-z][a-z0-9_-]{0,10}(\.[a-z][a-z0-9_-]{0,6})?\Z")
node_config_values = st.one_of(
    st.sampled_from(PLACEHOLDERS),
    st.builds("".join, st.lists(st.sampled_from([*PLACEHOLDERS, "-", "_", "part", "0", "x"]), max_size=4)),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.sampled_from(["32", "0.5", "true", "false", "-3", "cifar10", "it's", 'say "hi"']),
    any_text,
)

images = st.one_of(
    st.builds(
        lambda name, release: f"flwr/{name}:{release}",
        st.sampled_from(["superlink", "supernode"]),
        st.sampled_from(RELEASES),
    ),
    st.builds(lambda name: f"registry.example.com/{name}:latest", dns_labels),
    # Any text with no ASCII space (the image pattern): Unicode spaces are tried too.
    any_text.filter(lambda text: bool(text) and not any(c in " \t\n\r\f\v" for c in text)),
)
# Realistic values for fields whose schema says little (by field name): the
# schema's own random values are drawn beside them, so both kinds are tried.
HINTS: dict[str, st.SearchStrategy[Any]] = {
    "version": st.sampled_from(RELEASES),
    "image": images,
    "supernode": images,
    "superexecImage": st.builds(lambda r: f"flwr/superexec:{r}", st.sampled_from(RELEASES)),
    "superexecClientApp": st.builds(lambda r: f"flwr/superexec:{r}", st.sampled_from(RELEASES)),
    "extraArgs": st.lists(st.sampled_from(["--max-retries", "3", "--isolation"]) | any_text, max_size=2),
    "labels": st.dictionaries(label_keys, label_values, max_size=2),
    "annotations": st.dictionaries(label_keys, any_text, max_size=2),
    "matchLabels": st.dictionaries(label_keys, label_values, min_size=1, max_size=2),
    "replicas": st.integers(1, 4),
    # A claim's objects go to its own namespace (tests use the claim namespace team-a).
    "namespace": st.just("team-a"),
    "maxClusters": st.integers(1, 8),
}
HINT_SHARE = 5  # one in this many values of a hinted field is the schema's own
# Maps whose keys the function checks and the schema cannot say: their own
# random keys would only be refused (tests/api/test_refusals.py tries bad keys).
HINT_ONLY = {"labels", "annotations", "matchLabels"}
UNSETTLED_SHARE = 5  # one in this many specs keeps whatever the schema walk drew


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], share: int) -> st.SearchStrategy[Any]:
    """common, except one draw in share is rare (one_of would favour its first branch, and shrink to it)."""
    return st.integers(0, share - 1).flatmap(lambda i: rare if i == share - 1 else common)


def _text(node: dict[str, Any]) -> st.SearchStrategy[str]:
    low = node.get("minLength", 0)
    high = min(node.get("maxLength", MAX_GENERATED_TEXT), max(low, MAX_GENERATED_TEXT))
    if "pattern" in node:
        return st.from_regex(node["pattern"], fullmatch=True).filter(
            lambda s: low <= len(s) <= node.get("maxLength", 1e9)
        )
    return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=low, max_size=high)


def unwrap(node: dict[str, Any]) -> dict[str, Any]:
    """Optional[X] as X: leaving a field out is how the generator says None."""
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        return {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
    return node


def for_node(node: dict[str, Any], name: str = "") -> st.SearchStrategy[Any]:
    """A strategy for values the schema node accepts (and, by hint, realistic ones)."""
    node = unwrap(node)
    own = _schema_values(node)
    hint = HINTS.get(name)
    if hint is None:
        return own
    if name in HINT_ONLY:
        return hint
    return mostly(hint, own, HINT_SHARE)


def _schema_values(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    if node.get(model.NODE_CONFIG):
        return st.dictionaries(node_config_keys, node_config_values, max_size=min(4, node["maxProperties"]))
    if node.get(model.K8S_TYPE):
        item = mostly(
            KUBERNETES[node[model.K8S_TYPE]],
            st.dictionaries(any_text, json_values, max_size=3),
            RANDOM_KUBERNETES_SHARE,
        )
        return st.lists(item, max_size=2) if node.get("type") == "array" else item
    if "enum" in node or "const" in node:
        return st.sampled_from(node.get("enum", [node.get("const")]))
    if node.get("type") == "object" or "properties" in node:
        return _objects(node)
    if node.get("type") == "array":
        low = node.get("minItems", 0)
        cap = MAX_GENERATED_POOLS if node.get("maxItems") == model.MAX_POOLS else MAX_GENERATED_ITEMS
        return st.lists(for_node(node["items"]), min_size=low, max_size=max(low, min(node.get("maxItems", cap), cap)))
    return _scalars(node)


def _objects(node: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    if "properties" in node:
        required = set(node.get("required", []))
        props = node["properties"]
        return st.fixed_dictionaries(
            {k: for_node(v, k) for k, v in props.items() if k in required},
            optional={k: for_node(v, k) for k, v in props.items() if k not in required},
        )
    values = node.get("additionalProperties")
    value_strategy = for_node(values) if isinstance(values, dict) else json_values
    low = node.get("minProperties", 0)
    return st.dictionaries(label_keys, value_strategy, min_size=low, max_size=max(low, MAX_GENERATED_ITEMS))


def _scalars(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = node.get("type")
    if kind == "string":
        return _text(node)
    if kind == "integer":
        low = node.get("minimum", -(2**31))
        return st.integers(low, node.get("maximum", low + 2**16))
    if kind == "number":
        return st.floats(node.get("minimum"), node.get("maximum"), allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    msg = f"no strategy for schema node {node}"
    raise ValueError(msg)


def schema_specs() -> st.SearchStrategy[dict[str, Any]]:
    """Specs the XRD's OpenAPI schema admits, its cross-field rules not applied: most break one."""
    return for_node(SCHEMA)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Schema-valid specs, most of which also keep the cross-field rules (function/api/rules.py).

    A spec drawn from the schema alone breaks some rule nearly always (a
    StatefulSet pool without replicas...); settling the few settings those
    rules tie together leaves every other field as drawn. One in
    UNSETTLED_SHARE is left as drawn, so the rules themselves are tried too.
    """
    spec = draw(schema_specs())
    # Hypothesis favours small draws (0 here) and shrinks towards them: 0 is the common case.
    if draw(st.integers(0, UNSETTLED_SHARE - 1)) == UNSETTLED_SHARE - 1:
        return spec
    if draw(st.integers(0, 9)) < 9:
        spec["version"] = draw(st.sampled_from(RELEASES))
    statefulset = spec["mode"] == "StatefulSet"
    subprocess = spec["isolationMode"] == "subprocess"
    tls = spec.get("tls")
    if tls is not None:
        spec.pop("insecure", None)
        if ("secretName" in tls) == ("certManager" in tls):
            tls.pop("certManager", None)
            tls["secretName"] = "superlink-tls"
    elif (spec.get("nodeAuthentication") or {}).get("enabled"):
        spec["nodeAuthentication"]["enabled"] = False
    if subprocess:
        spec.get("superlink", {}).pop("superexecImage", None)
    names: set[str] = set()
    for pool in spec["supernodes"]["pools"]:
        while pool["name"] in names:
            pool["name"] = f"{pool['name'][:60]}-x"
        names.add(pool["name"])
        _settle_pool(draw, pool, statefulset=statefulset, subprocess=subprocess)
    return spec


def _settle_pool(draw: st.DrawFn, pool: dict[str, Any], *, statefulset: bool, subprocess: bool) -> None:
    """One pool, settled as specs() says."""
    if statefulset:
        pool.setdefault("replicas", draw(st.integers(1, 4)))
        if pool.get("authKeySecretRef"):
            pool["replicas"] = 1
    else:
        pool.pop("replicas", None)
        pool.pop("volumeClaimTemplates", None)
        pool.pop("authKeySecretRef", None)
    if subprocess:
        pool.get("images", {}).pop("superexecClientApp", None)
    if pool.get("clusterSelector") and draw(st.integers(0, 3)) < 3:
        # With no cluster listed a selector pool composes nothing to check:
        # three in four are named pools instead.
        del pool["clusterSelector"]
    if pool.get("clusterSelector"):
        pool.pop("providerConfigRef", None)
        pool.pop("authKeySecretRef", None)
    if (pool.get("gpu") or {}).get("mountAll") and "vendor" not in pool["gpu"]:
        pool["gpu"]["vendor"] = draw(st.sampled_from(["nvidia", "amd"]))


# Breaking one thing ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Site:
    """A place in a spec: its path, the schema node there, and whether the field is required."""

    path: tuple[str | int, ...]
    node: dict[str, Any]
    required: bool


def sites(value: Any, node: dict[str, Any], path: tuple[str | int, ...] = (), *, required: bool = True) -> list[Site]:
    """Every place in value the schema describes, value's own first."""
    node = unwrap(node)
    out = [Site(path, node, required)]
    if node.get(model.K8S_TYPE) or node.get(model.NODE_CONFIG):
        return out
    if isinstance(value, dict) and "properties" in node:
        required_keys = set(node.get("required", []))
        for key, item in value.items():
            out += sites(item, node["properties"][key], (*path, key), required=key in required_keys)
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        for key, item in value.items():
            out += sites(item, node["additionalProperties"], (*path, key), required=False)
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            out += sites(item, node["items"], (*path, i), required=False)
    return out


def _wrong_type(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of a JSON type the node does not take (an int is no string, a string no int)."""
    kind = node.get("type")
    if node.get(model.K8S_TYPE) and kind != "array":
        kind = "object"
    candidates = {
        "string": st.integers(0, 9) | st.booleans() | st.just([]),
        "integer": st.sampled_from(["3", "1.5", "many"]) | st.just(1.5) | st.booleans() | st.just({}),
        "number": st.sampled_from(["3", "x"]) | st.booleans(),
        "boolean": st.sampled_from(["true", "yes", 1, 0]),
        "object": st.sampled_from(["x", 3, True]) | st.lists(st.integers(), min_size=1, max_size=2),
        "array": st.sampled_from(["x", 3, True]) | st.just({"a": 1}),
    }
    if "enum" in node:
        return st.sampled_from(["Bogus", 7])
    return candidates.get(kind or "object", st.just(object()))  # a node of no type: nothing to break


def breakages(site: Site) -> list[st.SearchStrategy[Any]]:
    """What can replace the value at site and must be refused, one strategy per kind of break."""
    node = site.node
    out = []
    if node.get("type") or node.get(model.K8S_TYPE) or "enum" in node:
        out.append(_wrong_type(node))
    if "minimum" in node:
        out.append(st.just(node["minimum"] - 1))
    if "maximum" in node:
        out.append(st.just(node["maximum"] + 1))
    if "maxLength" in node:
        out.append(st.just("a" * (node["maxLength"] + 1)))
    if "pattern" in node:
        # Only true misses: a label value may be empty, or upper case.
        misses = [text for text in ("Not Valid!", "-x-", "UPPER", "") if not re.search(node["pattern"], text)]
        out.append(st.sampled_from(misses))
    if "maxItems" in node and node["maxItems"] <= model.MAX_POOLS:
        out.append(st.just("__repeat_items__"))
    if "maxProperties" in node:
        out.append(st.just("__too_many_keys__"))
    if node.get(model.NODE_CONFIG):
        out.append(st.sampled_from([{"k": "{bogus}"}, {"k": "{index"}, {"k": "a'b\"c"}, {"k": [1]}, {"k": {"x": 1}}]))
    return out


def _grow(value: Any, node: dict[str, Any]) -> Any:
    if isinstance(value, list):
        items = value or [None]
        return [copy.deepcopy(items[i % len(items)]) for i in range(node["maxItems"] + 1)]
    return {f"key{i}": "v" for i in range(node["maxProperties"] + 1)}


def _set(tree: Any, path: tuple[str | int, ...], value: Any) -> None:
    for part in path[:-1]:
        tree = tree[part]
    tree[path[-1]] = value


def _delete(tree: Any, path: tuple[str | int, ...]) -> None:
    for part in path[:-1]:
        tree = tree[part]
    del tree[path[-1]]


@dataclasses.dataclass(frozen=True)
class Broken:
    """A spec with one thing broken, and what was broken, for the failure message."""

    spec: dict[str, Any]
    path: tuple[str | int, ...]
    how: str


@st.composite
def invalid_specs(draw: st.DrawFn) -> Broken:
    """A schema-valid spec with exactly one thing broken that the XRD or the function refuses."""
    spec = draw(specs())
    places = sites(spec, SCHEMA)
    site = draw(st.sampled_from(places))
    choices: list[tuple[str, st.SearchStrategy[Any]]] = [(f"break {i}", s) for i, s in enumerate(breakages(site))]
    if isinstance(spec_at(spec, site.path), dict) and "properties" in site.node:
        choices.append(("unknown field", st.just("__unknown_field__")))
    if site.required and site.path:
        choices.append(("missing required field", st.just("__delete__")))
    if not choices:
        choices.append(("unknown field at the top", st.just("__top_unknown__")))
    how, strategy = draw(st.sampled_from(choices))
    value = draw(strategy)
    out = copy.deepcopy(spec)
    if value == "__delete__":
        _delete(out, site.path)
    elif value == "__unknown_field__":
        spec_at(out, site.path)["notAField"] = draw(json_values)
    elif value == "__top_unknown__":
        out["notAField"] = 1
    elif value in ("__repeat_items__", "__too_many_keys__"):
        grown = _grow(spec_at(spec, site.path), site.node)
        if site.path:
            _set(out, site.path, grown)
    elif not site.path:
        out = value  # the spec itself of the wrong type
    else:
        _set(out, site.path, value)
    return Broken(out, site.path, f"{how}: {value!r}"[:200])


def spec_at(tree: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        tree = tree[part]
    return tree
