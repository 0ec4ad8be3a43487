"""--node-config: built without a shell, read back by Flower's own parser."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from function.api import nodeconfig
from function.builders import pods
from support.helpers import BASE, container, manifests, pool, spec
from support.nodeconfig import POD_ENV, kubelet_expand
from support.peers import ROOT


def build(config, pool, replicas, cluster="", total=None):
    return nodeconfig.build(config, nodeconfig.Context(pool, replicas, cluster, total))


# (reason, nodeConfig, pool, replicas, what Flower must read in pod index 2 on node gpu-node-1)
CASES = [
    (
        "a pool's own placeholders: the pod's index, the pool's replicas and name",
        {"partition-id": "{index}", "num-partitions": "{replicas}", "name": "client_{pool}_{index}"},
        "default",
        4,
        {"partition-id": 2, "num-partitions": 4, "name": "client_default_2"},
    ),
    (
        "the node a pod runs on, which a pool without replicas (a DaemonSet's) has too",
        {"name": "client_{node}", "node-id": "{node}", "pool": "{pool}"},
        "edge",
        None,
        {"name": "client_gpu-node-1", "node-id": "gpu-node-1", "pool": "edge"},
    ),
    (
        "numeric-looking and boolean strings become typed values, as in the operator",
        {"dataset": "cifar10", "batch-size": "32", "learning-rate": "0.01", "augment": "true", "neg": "-3"},
        "p",
        1,
        {"dataset": "cifar10", "batch-size": 32, "learning-rate": 0.01, "augment": True, "neg": -3},
    ),
    (
        "typed YAML values keep their type, as in the Helm chart",
        {"bool": False, "int": 1, "negative_int": -1, "float": 21.23, "negative_float": -1.34, "string": "value 1"},
        "p",
        1,
        {"bool": False, "int": 1, "negative_int": -1, "float": 21.23, "negative_float": -1.34, "string": "value 1"},
    ),
    (
        "text a shell or the kubelet would have mangled reaches Flower unchanged",
        {"cmd": "$(rm -rf /); echo `id` && $HOME", "dollars": "$$(FLOWER_INDEX) $(FLOWER_INDEX)"},
        "p",
        1,
        {"cmd": "$(rm -rf /); echo `id` && $HOME", "dollars": "$$(FLOWER_INDEX) $(FLOWER_INDEX)"},
    ),
    (
        "quotes, runs of spaces, '=' and braces that are no placeholder reach Flower unchanged",
        {"quoted": 'say "hi"', "single": "it's", "spaces": "a  b\tc", "eq": "k=v x=y", "braces": "{other}"},
        "p",
        1,
        {"quoted": 'say "hi"', "single": "it's", "spaces": "a  b\tc", "eq": "k=v x=y", "braces": "{other}"},
    ),
    (
        "newlines, backslashes and non-ASCII text reach Flower unchanged",
        {"newline": "line1\nline2", "backslash": "C:\\data\\x", "unicode": "données ✓"},
        "p",
        1,
        {"newline": "line1\nline2", "backslash": "C:\\data\\x", "unicode": "données ✓"},
    ),
    (
        "dotted keys, and numbers as TOML reads them: 007 is 7, 1e3 a float",
        {"model.lr": 0.1, "model.layers": 3, "leading-zero": "007", "exp": "1e3"},
        "p",
        1,
        {"model.lr": 0.1, "model.layers": 3, "leading-zero": 7, "exp": 1000.0},
    ),
    (
        "a placeholder with text around it stays a string: '20', not 20",
        {"idx-suffix": "{index}0", "quoted-index": "'{index}'"},
        "p",
        3,
        {"idx-suffix": "20", "quoted-index": "'2'"},
    ),
    (
        "federation-wide placeholders: pod 9 of the federation, in cluster spoke-eu",
        {
            "partition-id": "{globalIndex}",
            "num-partitions": "{totalReplicas}",
            "site": "{cluster}",
            "id": "{cluster}-{globalIndex}",
        },
        "eu",
        3,
        {"partition-id": 9, "num-partitions": 12, "site": "spoke-eu", "id": "spoke-eu-9"},
        "spoke-eu",
        12,
    ),
]


@pytest.fixture(scope="module")
def flower_results(flwr_python):
    texts = []
    for _, config, pool_name, replicas, _, *extra in CASES:
        text, _needs = build(config, pool_name, replicas, *extra)
        texts.append(kubelet_expand(text, POD_ENV))
    proc = subprocess.run(
        [flwr_python, str(ROOT / "tests" / "support" / "flower_parse.py")],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_flower_reads_what_was_meant(case, flower_results):
    reason, expected = CASES[case][0], CASES[case][4]
    assert flower_results[case] == {"ok": expected}, reason
    # Types matter (1 vs 1.0 vs True), not just equality.
    assert {k: type(v).__name__ for k, v in flower_results[case]["ok"].items()} == {
        k: type(v).__name__ for k, v in expected.items()
    }, reason


def test_flower_rejects_what_our_check_rejects(flwr_python):
    # The reason for the quote rule: a value with both quotes breaks Flower's split.
    broken = "q='it's \"x\"'"
    proc = subprocess.run(
        [flwr_python, str(ROOT / "tests" / "support" / "flower_parse.py")],
        input=json.dumps([broken]),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout)[0] != {"ok": {"q": 'it\'s "x"'}}
    assert nodeconfig.check({"q": 'it\'s "x"'}, "StatefulSet", "f")


def test_keys_are_sorted_and_only_needed_env_is_added():
    text, needs = build({"b": "{node}", "a": "x"}, "p", None)
    assert text == 'a="x" b="$(FLOWER_NODE_NAME)"'
    assert needs == ["FLOWER_NODE_NAME"]
    assert build({"a": "{pool}"}, "p", 1) == ('a="p"', [])


def test_supernode_container_gets_downward_api_env():
    s = pool(
        BASE, nodeConfig={"partition-id": "{index}", "host": "{node}"}, env=[{"name": "FLOWER_INDEX", "value": "x"}]
    )
    c = container(s)
    assert c["args"][-2:] == ["--node-config", 'host="$(FLOWER_NODE_NAME)" partition-id=$(FLOWER_INDEX)']
    env = {e["name"]: e for e in c["env"]}
    # Ours replace a user variable of the same name: the args depend on it.
    assert (
        env["FLOWER_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    assert env["FLOWER_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert [e["name"] for e in c["env"]] == ["FLOWER_INDEX", "FLOWER_NODE_NAME", "FLWR_TELEMETRY_ENABLED"]


def test_no_node_config_no_flag():
    assert "--node-config" not in container(BASE)["args"]
    assert container(BASE)["env"] == [pods.TELEMETRY]  # no nodeConfig variables, only the pod default


def test_user_dollar_text_is_escaped_for_the_kubelet():
    text, needs = build({"a": "$(HOME)"}, "p", 1)
    assert text == 'a="$$(HOME)"'
    assert needs == []
    assert kubelet_expand(text, {"HOME": "/root"}) == 'a="$(HOME)"'


def test_every_value_token_matches_flowers_pattern():
    for _, config, pool_name, replicas, _, *extra in CASES:
        text, _ = build(config, pool_name, replicas, *extra)
        pairs = re.findall(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)", kubelet_expand(text, POD_ENV))
        assert sorted(k for k, _ in pairs) == sorted(config)


def test_equal_values_of_other_types_are_not_confused():
    # 1, 1.0 and True are equal in Python; Flower must still see three types.
    assert build({"a": 1}, "p", 1)[0] == "a=1"
    assert build({"a": True}, "p", 1)[0] == "a=true"
    assert build({"a": 1.0}, "p", 1)[0] == "a=1.0"


def _global_ids(out, names):
    ids = []
    for name in names:
        workload = out[name]["spec"]
        start = workload.get("ordinals", {}).get("start", 0)
        # The StatefulSet controller labels pod k with pod-index start + k.
        ids += list(range(start, start + workload["replicas"]))
    return ids


GLOBAL = {"partition-id": "{globalIndex}", "n": "{totalReplicas}"}


def test_global_partition_ids_are_unique_and_dense_across_pools():
    s = spec(
        BASE,
        supernodes__pools=[
            {"name": "a", "replicas": 3, "nodeConfig": GLOBAL},
            {"name": "b", "replicas": 1, "nodeConfig": GLOBAL},
            {"name": "c", "replicas": 2, "nodeConfig": GLOBAL},
        ],
    )
    out = manifests(s)
    assert sorted(_global_ids(out, ["pool-a", "pool-b", "pool-c"])) == list(range(6))
    for name in ("pool-a", "pool-b", "pool-c"):
        args = out[name]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--node-config") + 1] == "n=6 partition-id=$(FLOWER_GLOBAL_INDEX)"
    assert out["pool-c"]["spec"]["ordinals"] == {"start": 4}


def test_a_pool_without_global_index_keeps_its_range_and_its_own_ordinals():
    s = spec(
        BASE,
        supernodes__pools=[
            {"name": "a", "replicas": 3, "nodeConfig": GLOBAL},
            {"name": "b", "replicas": 1, "nodeConfig": {"local": "{index}"}},
            {"name": "c", "replicas": 2, "nodeConfig": GLOBAL},
        ],
    )
    out = manifests(s)
    # Ids stay below {totalReplicas} and unique; b's slot (3) is simply unused.
    assert sorted(_global_ids(out, ["pool-a", "pool-c"])) == [0, 1, 2, 4, 5]
    assert "ordinals" not in out["pool-b"]["spec"]


def test_cluster_placeholder_is_the_pools_provider_config():
    s = spec(
        BASE,
        supernodes__pools=[
            {
                "name": "eu",
                "replicas": 1,
                "providerConfigRef": {"name": "spoke-eu"},
                "nodeConfig": {"site": "{cluster}"},
            }
        ],
    )
    s["superlink"]["externalAddress"] = "fleet.example.com"
    args = manifests(s)["pool-eu"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--node-config") + 1] == 'site="spoke-eu"'
