"""Property-based tests: the function's invariants over specs generated from the model.

tests/support/strategies.py draws the specs from the model's own schema; the
invariants are in tests/support/properties.py. This is the short run of make test
(PROPERTY_EXAMPLES examples per invariant, the same ones on every CI run);
benchmarks/fuzz.py runs the same invariants over 10,000 fresh examples each.
Inputs those runs found wrong are kept as @example cases here.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, example, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from function import caching
from support import properties, strategies
from support.helpers import spec
from support.nodeconfig import POD_ENV, kubelet_expand
from support.peers import IN_CI, ROOT

PROPERTY_EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "80"))

settings.register_profile(
    "suite",
    max_examples=PROPERTY_EXAMPLES,
    # Each example runs the whole function, a few times: no per-example deadline.
    deadline=None,
    # CI runs the same examples every time, so a red run can be run again as it was.
    derandomize=IN_CI,
    database=None if IN_CI else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("suite")

# Found by the generated tests, kept so they are tried on every run.
REFUSED_EXAMPLES = [
    # The XRD refuses a string for an integer; pydantic's lax mode read "3" as 3.
    spec(supernodes__pools__0__replicas="3"),
    # ... and "true" as true.
    spec(insecure="true"),
    # ... and 2.0 as 2 (protobuf Structs carry every number as a double: 2.0
    # arrives as 2, but 2.5 must not become 2).
    spec(supernodes__pools__0__replicas=2.5),
]


def model_fields(node, path=()) -> set[tuple[str, ...]]:
    """Every field path of the schema, Kubernetes-typed and nodeConfig maps as one field each."""
    node = strategies.unwrap(node)
    if node.get(strategies.model.K8S_TYPE) or node.get(strategies.model.NODE_CONFIG):
        return set()
    out = set()
    for key, child in node.get("properties", {}).items():
        out |= {(*path, key), *model_fields(child, (*path, key))}
    if "items" in node:
        out |= model_fields(node["items"], path)
    return out


def drawn_fields(value, path=()) -> set[tuple[str, ...]]:
    if isinstance(value, dict):
        return {f for key, item in value.items() for f in {(*path, key), *drawn_fields(item, (*path, key))}}
    if isinstance(value, list):
        return {f for item in value for f in drawn_fields(item, path)}
    return set()


# Of the tests' own generator, not the function: `make unit-py` leaves it out (a minute of its time).
@pytest.mark.tooling
def test_the_strategies_draw_every_field_of_the_model():
    # A field the walk never draws would never be tested: the generator
    # follows the schema, and this holds it to every property in it.
    drawn: set[tuple[str, ...]] = set()

    @settings(max_examples=300, derandomize=True, database=None)
    @given(strategies.schema_specs())
    def draw(value):
        drawn.update(drawn_fields(value))

    draw()
    # A deep optional field can miss 300 draws by chance (CI's derandomized
    # run missed superlink.service.ports.extra once): each one missed must
    # still be found by a search for it, or the strategies cannot draw it.
    never = []
    search = settings(max_examples=2000, derandomize=True, database=None, phases=[Phase.generate])
    for field in sorted(model_fields(strategies.SCHEMA) - drawn):
        try:
            find(strategies.schema_specs(), lambda value, field=field: field in drawn_fields(value), settings=search)
        except NoSuchExample:
            never.append(field)
    assert never == []


def test_valid_specs_keep_every_invariant(flwr_python, psscheck):
    node_configs: list[tuple[str, dict]] = []
    accepted = []
    workloads: list[dict] = []

    @given(strategies.specs(), st.randoms(use_true_random=False))
    # make fuzz: a whole float crosses the wire as an int, and Flower reads an int.
    @example(
        spec(supernodes__pools__0__nodeConfig={"np0.a": -4.657557454559642e16}),
        random.Random(0),  # noqa: S311 - a shuffle order, not a secret
    )
    def check(value, rng: random.Random):
        rsp = properties.answer(value)
        if properties.fatal_messages(rsp):
            properties.check_refused(value)
        else:
            accepted.append(value)
            node_configs.extend(properties.check_accepted(value, rng))
            workloads.extend(properties.workloads(rsp, f"{len(accepted)}-"))

    check()
    # The run means little if the function refused nearly everything.
    assert len(accepted) >= PROPERTY_EXAMPLES // 6, f"only {len(accepted)} specs were accepted"
    assert node_configs, "no accepted spec had a nodeConfig: Flower read nothing back"
    # Under the default platform policy every pod accepted is restricted, as the API server's own
    # Pod Security admission judges it (tools/psscheck), not only as the function's judge does.
    judged = subprocess.run([psscheck, "-level", "restricted"], input=json.dumps(workloads),
                            capture_output=True, text=True, check=True)  # fmt: skip
    refused = [v for v in json.loads(judged.stdout) if not v["allowed"]]
    assert workloads and refused == [], refused[:3]
    texts = [kubelet_expand(text, POD_ENV) for text, _ in node_configs]
    read = json.loads(
        subprocess.run(
            [flwr_python, str(ROOT / "tests" / "support" / "flower_parse.py")],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    for (text, literal), got in zip(node_configs, read, strict=True):
        assert "ok" in got, (text, got)
        for key, value in literal.items():
            # Flower keeps a dotted key flat (its run config is flat too).
            assert key in got["ok"], (key, text, got)
            node = got["ok"][key]
            assert (node, type(node)) == (value, type(value)), (key, text)


@given(strategies.invalid_specs())
@example(strategies.Broken(REFUSED_EXAMPLES[0], ("supernodes", "pools", 0, "replicas"), "string for an integer"))
@example(strategies.Broken(REFUSED_EXAMPLES[1], ("insecure",), "string for a boolean"))
@example(strategies.Broken(REFUSED_EXAMPLES[2], ("supernodes", "pools", 0, "replicas"), "fraction for an integer"))
# The spec itself not an object: the function failed on its own (AttributeError).
@example(strategies.Broken("x", (), "a string for the spec"))
# An unknown field set to null is still in the input, and named.
@example(
    strategies.Broken({**REFUSED_EXAMPLES[0], "supernodes": {"pools": [], "notAField": None}}, ("supernodes",), "null")
)
# make fuzz: a dotted map key read as two path parts; such keys are bracketed now.
@example(
    strategies.Broken(
        spec(
            supernodes__pools__0__volumeClaimTemplates=[
                {"metadata": {"name": "data", "annotations": {"7lrmbcp.aao/0": []}}, "spec": {}}
            ]
        ),
        ("supernodes", "pools", 0, "volumeClaimTemplates", 0, "metadata", "annotations", "7lrmbcp.aao/0"),
        "a list for a string",
    )
)
def test_invalid_specs_get_one_fatal_result_naming_a_field(broken):
    message = properties.check_refused(broken.spec)
    assert message.startswith(properties.FATAL_PREFIX), (broken.how, message)


@given(
    strategies.specs(),
    st.lists(strategies.json_values, min_size=1, max_size=4),
    st.lists(st.integers(0, 3), min_size=1, max_size=4),
)
def test_garbled_observed_state_changes_nothing(value, noise, where):
    properties.check_garbled_observed(value, noise, where)


def test_content_caches_are_bounded():
    # Crossplane sends every Federation of the company to one process: the
    # caches must forget, or memory grows with every spec ever seen. A small
    # bound (caches take it at import, so in a fresh process) fills in a few
    # calls; the real one is the same code with 4096 entries.
    assert all(c.cache_info().maxsize == caching.MAXSIZE for c in caching._CACHES)
    bound, more = 64, 128
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "cache_growth.py"), str(bound), str(more)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"},
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(proc.stdout)
    assert report["bounds"] == [bound] * len(caching._CACHES)
    assert report["sizes"] == report["bounds"], report
    # Twice as many distinct specs as it took to fill them, and full caches
    # only replace entries: memory stays where it was, give or take noise. The noise
    # is Python's: from one run to the next, 3.11 moved by up to a tenth and 3.13 by
    # up to a fifth, either way, with no trend over 1,000 more calls. Caches that kept
    # every spec would grow by about what each entry holds (full / bound) per call:
    # 0.8 of that measured; allow a quarter.
    assert report["filled_after"] < more
    kept = report["full"] / bound * more
    assert report["later"] - report["full"] < kept / 4, report
