"""The verdicts on a selected cluster's annotations (function/api/cluster_settings.py), a reason per case.

How a held-back cluster shows in status and what is composed instead is in test_clusters.py.
"""

from __future__ import annotations

import pytest

from function.api import cluster_settings

NUMBERED_PAST = (
    "annotation flower.flwr.ai/replicas '3' is not a number from 1 to 2 (each cluster has `replicas` global indices)"
)


@pytest.mark.parametrize(
    ("text", "limit", "taken", "expected", "reason"),
    [
        ("2", 4, {}, (2, ""), "an index below the pool's maxClusters is pinned"),
        ("0", 1, {}, (0, ""), "index 0 of a pool of one cluster"),
        ("4", 4, {}, (None, "annotation flower.flwr.ai/cluster-index '4' is not an index from 0 to 3"), "one past"),
        ("-1", 4, {}, (None, "annotation flower.flwr.ai/cluster-index '-1' is not an index from 0 to 3"), "negative"),
        ("x", 4, {}, (None, "annotation flower.flwr.ai/cluster-index 'x' is not an index from 0 to 3"), "no number"),
        ("1", 4, {1: "eu"}, (None, "annotation flower.flwr.ai/cluster-index 1 is pinned by eu too"), "taken"),
    ],
)
def test_a_pinned_index(text, limit, taken, expected, reason):
    assert cluster_settings.pinned_index(text, limit, taken) == expected, reason


@pytest.mark.parametrize(
    ("text", "pool_replicas", "numbered", "expected", "reason"),
    [
        ("3", 2, False, (3, ""), "a cluster may ask more than the pool's replicas when nothing is numbered"),
        ("1000", None, False, (1000, ""), "up to the most one cluster may ask"),
        (
            "1001",
            None,
            False,
            (None, "annotation flower.flwr.ai/replicas '1001' is not a number from 1 to 1000"),
            "past the most one cluster may ask",
        ),
        (
            "3",
            2,
            True,
            (None, NUMBERED_PAST),
            "federation-wide numbering gives each cluster only the pool's replicas",
        ),
        ("0", 2, False, (None, "annotation flower.flwr.ai/replicas '0' is not a number from 1 to 1000"), "zero"),
    ],
)
def test_replicas_a_cluster_asks(text, pool_replicas, numbered, expected, reason):
    assert cluster_settings.replicas(text, pool_replicas, numbered=numbered) == expected, reason


@pytest.mark.parametrize(
    ("values", "mode", "says", "reason"),
    [
        ({"site": "eu"}, "StatefulSet", "", "a plain value is a pool's nodeConfig"),
        ({"part": "{index}"}, "StatefulSet", "", "a StatefulSet pool numbers its SuperNodes"),
        (
            {"bad key": "x"},
            "DaemonSet",
            "annotation node-config.flower.flwr.ai/bad key: keys are letters",
            "a key Flower would not read as a TOML key holds the cluster back",
        ),
    ],
)
def test_node_config_a_cluster_adds(values, mode, says, reason):
    verdict = cluster_settings.node_config(values, mode)
    assert verdict.startswith(says) and bool(verdict) == bool(says), (reason, verdict)
