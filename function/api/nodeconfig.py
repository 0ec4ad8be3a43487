"""Build the `--node-config` argument of a pool's SuperNodes, with no shell.

Flower (flwr.common.config.parse_config_args) finds `key=value` pairs with the
regex below, joins them as `key = value` lines and parses that as TOML. So we
write each value as a TOML literal (tomli-w), check that it survives Flower's
regex, and leave per-pod values to the kubelet: `{index}`, `{globalIndex}` and
`{node}` become `$(FLOWER_INDEX)`, `$(FLOWER_GLOBAL_INDEX)` and
`$(FLOWER_NODE_NAME)`, fed by the downward API. Every `$` of user text is
doubled so the kubelet passes it through unchanged.

The kubelet cannot add, so `{globalIndex}` comes from the pod-index label of a
StatefulSet whose ordinals start at the pool's offset in the federation
(`spec.ordinals.start`); in such a pool `{index}` is not available.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from typing import Any

import tomli_w

from function import caching
from function.api.spec import NodeConfigValue

INDEX_ENV = "FLOWER_INDEX"
GLOBAL_INDEX_ENV = "FLOWER_GLOBAL_INDEX"
NODE_ENV = "FLOWER_NODE_NAME"
# The StatefulSet controller labels each pod with its ordinal (Kubernetes 1.28+).
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"

RUNTIME = {
    "{index}": f"$({INDEX_ENV})",
    "{globalIndex}": f"$({GLOBAL_INDEX_ENV})",
    "{node}": f"$({NODE_ENV})",
}
ENV_SOURCES = {
    INDEX_ENV: f"metadata.labels['{POD_INDEX_LABEL}']",
    GLOBAL_INDEX_ENV: f"metadata.labels['{POD_INDEX_LABEL}']",
    NODE_ENV: "spec.nodeName",
}
POOL_ONLY = ("{index}", "{replicas}")
# Only in pools that select their clusters (function/topology/clusters.py).
SELECTED_ONLY = ("{clusterIndex}",)
FEDERATION_WIDE = ("{globalIndex}", "{totalReplicas}")
# What the self-check substitutes for per-pod values.
_SAMPLES = {"{index}": "7", "{globalIndex}": "11", "{node}": "node-a"}

# Flower's own pattern, from parse_config_args.
FLOWER_PAIR = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")
KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
INT = re.compile(r"^[+-]?[0-9]+$")
FLOAT = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?$")
# What a TOML literal string cannot hold: control characters other than tab.
_CONTROL = frozenset(chr(c) for c in [*range(0x20), 0x7F]) - {"\t"}


class NodeConfigError(ValueError):
    """A nodeConfig key or value Flower would not read back as written."""


@dataclasses.dataclass(frozen=True)
class Context:
    """What render-time placeholders stand for in one pool."""

    pool: str
    replicas: int | None = None
    cluster: str = ""
    total_replicas: int | None = None
    # A selected cluster's index (function/topology/clusters.py); None in pools that name their cluster.
    cluster_index: int | None = None


def uses_global_index(node_config: dict[str, NodeConfigValue]) -> bool:
    """Whether a value uses {globalIndex}, so the pool's ordinals start at its offset."""
    return any(isinstance(v, str) and "{globalIndex}" in v for v in node_config.values())


def _typed(text: str) -> NodeConfigValue:
    """Numeric-looking and boolean strings become typed values, as in the operator."""
    if INT.match(text):
        return int(text)
    if FLOAT.match(text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    return text


def typed(config: dict[str, NodeConfigValue]) -> dict[str, NodeConfigValue]:
    """A config's values as Flower should read them: numeric-looking and boolean strings typed, keys sorted."""
    return {k: _typed(v) if isinstance(v, str) else v for k, v in sorted(config.items())}


def _literal(value: NodeConfigValue) -> str:
    """The TOML literal of one value, in a form Flower's regex keeps whole."""
    if isinstance(value, float) and not math.isfinite(value):
        msg = "must be a finite number"
        raise NodeConfigError(msg)
    text = tomli_w.dumps({"v": value})[len("v = ") :].rstrip("\n")
    if not isinstance(value, str) or '"' not in value:
        return text
    # A basic string cannot hold its own quote for Flower's regex; a TOML
    # literal string can, if it needs no escapes.
    if "'" in value:
        msg = "cannot hold both ' and \" (Flower's parser splits on them)"
        raise NodeConfigError(msg)
    if any(c in _CONTROL for c in value):
        msg = 'cannot hold " together with control characters'
        raise NodeConfigError(msg)
    return f"'{value}'"


def _flower_parse(key: str, token: str) -> Any:
    """What Flower's parser makes of `key=token`."""
    pairs = FLOWER_PAIR.findall(f"{key}={token}")
    if len(pairs) != 1 or pairs[0] != (key, token):
        msg = "does not survive Flower's key=value splitting"
        raise NodeConfigError(msg)
    try:
        parsed = tomllib.loads(f"{key} = {token}")
    except tomllib.TOMLDecodeError as err:
        msg = f"is not valid TOML for Flower: {err}"
        raise NodeConfigError(msg) from None
    for part in key.split("."):
        parsed = parsed[part]
    return parsed


def value_token(value: NodeConfigValue, key: str, context: Context) -> str:
    """The argument text of one value, before kubelet expansion.

    The render-time placeholders are filled here; what is left is cached by
    the value and key alone (_token), not the whole context: a pool's total
    replicas are in every pool's context, and a change of one pool's
    replicas made every pool's values miss the cache.
    """
    if isinstance(value, str):
        text = value.replace("{pool}", context.pool).replace("{cluster}", context.cluster)
        for placeholder, number in (
            ("{replicas}", context.replicas),
            ("{totalReplicas}", context.total_replicas),
            ("{clusterIndex}", context.cluster_index),
        ):
            if number is not None:
                text = text.replace(placeholder, str(number))
        if text in ("{index}", "{globalIndex}"):
            # Expands to a pod ordinal: an integer, so unquoted.
            return RUNTIME[text]
        value = text if any(p in text for p in RUNTIME) else _typed(text)
    return _token(value, key)


# typed: True, 1 and 1.0 are equal keys to a plain cache, but not to Flower.
@caching.memoize(typed=True)
def _token(value: NodeConfigValue, key: str) -> str:
    """The argument text of a value with its render-time placeholders filled: pure, and cached."""
    token = _literal(value)
    # Check with a sample expansion that Flower reads back what was meant.
    sample = token
    expected: Any = value
    for placeholder, sample_value in _SAMPLES.items():
        sample = sample.replace(placeholder, sample_value)
        if isinstance(expected, str):
            expected = expected.replace(placeholder, sample_value)
    if _flower_parse(key, sample) != expected:
        msg = "does not read back unchanged through Flower's parser"
        raise NodeConfigError(msg)
    token = token.replace("$", "$$")
    for placeholder, reference in RUNTIME.items():
        token = token.replace(placeholder, reference)
    return token


def _clashes(keys: list[str], field: str) -> list[tuple[str, str]]:
    """Dotted keys under another key: TOML cannot make that key both a value and a table."""
    return [
        (f"{field}.{other}", f"clashes with key {key!r}: a key cannot be both a value and a table")
        for key in keys
        for other in keys
        if other.startswith(key + ".")
    ]


def check(node_config: dict[str, NodeConfigValue], mode: str, field: str) -> list[tuple[str, str]]:
    """Return (field path, message) for each nodeConfig entry Flower would not read as written."""
    errors = []
    keys = sorted(node_config)
    strings = {k: v for k, v in node_config.items() if isinstance(v, str)}
    for key in keys:
        path = f"{field}.{key}"
        if not KEY.match(key):
            errors.append(
                (path, "keys are letters, digits, '_' and '-', dot-separated (Flower reads them as TOML keys)")
            )
            continue
        value = node_config[key]
        if mode == "DaemonSet" and key in strings and any(p in strings[key] for p in POOL_ONLY + FEDERATION_WIDE):
            # A placeholder a DaemonSet pool cannot fill: its rule (function/api/rules.py) reports it.
            continue
        try:
            value_token(value, key, Context("pool", 1, "cluster", 1, 0))
        except NodeConfigError as err:
            errors.append((path, f"value {value!r} {err}"))
    return errors + _clashes(keys, field)


def build(node_config: dict[str, NodeConfigValue], context: Context) -> tuple[str, list[str]]:
    """The --node-config argument and the env vars it references, in a stable order."""
    parts = [f"{key}={value_token(node_config[key], key, context)}" for key in sorted(node_config)]
    strings = [v for v in node_config.values() if isinstance(v, str)]
    needs = [
        env
        for placeholder, env in (("{index}", INDEX_ENV), ("{globalIndex}", GLOBAL_INDEX_ENV), ("{node}", NODE_ENV))
        if any(placeholder in v for v in strings)
    ]
    return " ".join(parts), needs


def env_vars(needs: list[str]) -> list[dict[str, Any]]:
    """Downward-API env vars for the per-pod placeholders."""
    return [
        {"name": env, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": ENV_SOURCES[env]}}} for env in needs
    ]
