"""Every verdict on a selected cluster's settings: its ProviderConfig's annotations.

A pool that follows clusters by label takes per-cluster settings from the
annotations of each cluster's ProviderConfig: its index, its replicas, its
nodeConfig values. A cluster whose annotations are not what its pools need is
held back (its pools are not composed there, and status says why), not
refused: the Federation's author did not write them, the platform did. Each
verdict here is (the value, or "" and why not); function/topology/clusters.py
only applies them.
"""

from __future__ import annotations

from typing import Literal

from function.api import nodeconfig
from function.api.spec import NodeConfigValue

REPLICAS_ANNOTATION = "flower.flwr.ai/replicas"
INDEX_ANNOTATION = "flower.flwr.ai/cluster-index"
NODE_CONFIG_PREFIX = "node-config.flower.flwr.ai/"
# The most SuperNodes one cluster's annotation may ask of a pool that numbers none federation-wide.
MAX_REPLICAS = 1000


def number(text: str | None, low: int, high: int) -> int | None:
    """The whole number text writes, if it is one from low to high; else None."""
    if text is None or not text.isdigit() or not low <= int(text) <= high:
        return None
    return int(text)


def pinned_index(text: str, limit: int, taken: dict[int, str]) -> tuple[int | None, str]:
    """The index a cluster's annotation pins, or why it cannot: not an index below limit, or another's already."""
    pinned = number(text, 0, limit - 1)
    if pinned is None:
        return None, f"annotation {INDEX_ANNOTATION} {text!r} is not an index from 0 to {limit - 1}"
    if pinned in taken:
        return None, f"annotation {INDEX_ANNOTATION} {pinned} is pinned by {taken[pinned]} too"
    return pinned, ""


def replicas(text: str, pool_replicas: int | None, *, numbered: bool) -> tuple[int | None, str]:
    """The replicas a cluster's annotation asks of a StatefulSet pool, or why not.

    numbered: the Federation numbers SuperNodes federation-wide, so each cluster has
    the pool's `replicas` global indices and may ask no more.
    """
    high = pool_replicas if numbered and pool_replicas else MAX_REPLICAS
    asked = number(text, 1, high)
    if asked is None:
        why = " (each cluster has `replicas` global indices)" if high != MAX_REPLICAS else ""
        return None, f"annotation {REPLICAS_ANNOTATION} {text!r} is not a number from 1 to {high}{why}"
    return asked, ""


def node_config(values: dict[str, NodeConfigValue], mode: Literal["StatefulSet", "DaemonSet"] | str) -> str:
    """Why a cluster's nodeConfig annotations cannot be a pool's nodeConfig, or "" when they can."""
    errors = nodeconfig.check(values, mode, "nodeConfig")
    if not errors:
        return ""
    where, message = errors[0]
    return f"annotation {NODE_CONFIG_PREFIX}{where.removeprefix('nodeConfig.')}: {message}"
