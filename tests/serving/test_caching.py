"""The pure steps Crossplane repeats on every reconcile are done once, and the caches keep no documents."""

from __future__ import annotations

import copy

import pytest

from function import caching
from function.api import nodeconfig, refusals
from function.releases import flower
from support.helpers import BASE, spec


@pytest.fixture(autouse=True)
def _empty_caches():
    caching.clear_caches()
    flower.dialect.cache_clear()
    yield
    caching.clear_caches()


@pytest.mark.parametrize("kind", [caching.Content, caching.Built], ids=["Content", "Built"])
def test_a_key_keeps_only_a_digest_once_the_cached_function_has_read_it(monkeypatch, kind):
    # memoize registers every cache it makes; this one is the test's own and
    # must not join the function's (test_properties counts those).
    monkeypatch.setattr(caching, "_CACHES", list(caching._CACHES))
    seen = []

    @caching.memoize()
    def size(content: caching.Content | caching.Built) -> int:
        seen.append(content.value)
        return len(content.value)

    document = {"a": [1, 2], "b": "x" * 1000}
    key = kind(document)
    assert size(key) == len(document)
    assert seen == [document]
    # The cache holds key: a digest, not the document nor its text.
    assert key.value is None
    assert getattr(key, "text", None) is None
    assert len(key.key) == 16
    assert size(kind({"a": [1, 2], "b": "x" * 1000})) == len(document)
    assert len(seen) == 1


def test_a_value_passed_aside_is_read_on_a_miss_and_never_kept(monkeypatch):
    monkeypatch.setattr(caching, "_CACHES", list(caching._CACHES))
    seen = []

    @caching.memoize()
    def size(content: caching.Content, aside: caching.Aside) -> int:
        seen.append(aside.value)
        return len(content.value)

    parsed = object()
    aside = caching.Aside(parsed)
    assert size(caching.Content("abc"), aside) == 3
    assert seen == [parsed]
    assert aside.value is None, "the cache would hold what was passed aside"
    # Not part of the key: another value aside is a hit, not read.
    assert size(caching.Content("abc"), caching.Aside(object())) == 3
    assert seen == [parsed]
    assert size(caching.Content("abcd"), caching.Aside(parsed)) == 4


def test_a_refused_spec_in_another_order_of_its_maps_gets_the_same_words():
    """Its problems are found from the spec as sent, and worded from the canonical form: one message per content."""
    pools = [{"name": "p", "replicas": 1, "nodeConfig": {"k": "a'b\"c", "j": "x'y\"z"}}]
    reordered = [{"nodeConfig": {"j": "x'y\"z", "k": "a'b\"c"}, "replicas": 1, "name": "p"}]
    with pytest.raises(refusals.SpecError) as first:
        refusals.parse(spec(BASE, supernodes__pools=pools))
    caching.clear_caches()
    with pytest.raises(refusals.SpecError) as second:
        refusals.parse(spec(BASE, supernodes__pools=reordered))
    assert len(first.value.errors) == 2
    assert second.value.errors == first.value.errors


def test_a_spec_is_checked_once_however_often_it_is_sent(monkeypatch):
    calls = []
    check = refusals.check
    monkeypatch.setattr(refusals, "check", lambda s: calls.append(s) or check(s))
    given = spec(BASE)
    first = refusals.parse(copy.deepcopy(given))
    second = refusals.parse(copy.deepcopy(given))
    assert len(calls) == 1
    # Each call still gets a spec parsed from what it was sent.
    assert first == second and first is not second


def test_a_refused_spec_is_refused_again_with_the_same_errors(monkeypatch):
    bad = spec(BASE, supernodes__pools=[{"name": "p", "replicas": 1, "nodeConfig": {"k": "a'b\"c"}}])
    with pytest.raises(refusals.SpecError) as first:
        refusals.parse(copy.deepcopy(bad))
    monkeypatch.setattr(refusals, "check", lambda _spec: pytest.fail("checked again"))
    with pytest.raises(refusals.SpecError) as second:
        refusals.parse(copy.deepcopy(bad))
    assert second.value.errors == first.value.errors
    assert first.value.errors[0][0].startswith("spec.supernodes.pools[0].nodeConfig.k")


def test_a_node_config_value_is_cached_by_itself_not_by_its_pools_context():
    nodeconfig.value_token("{index}-x", "k", nodeconfig.Context("p", replicas=2, total_replicas=4))
    misses = nodeconfig._token.cache_info().misses
    # Another pool's replicas change the total; this value does not use it.
    text = nodeconfig.value_token("{index}-x", "k", nodeconfig.Context("p", replicas=2, total_replicas=5))
    assert nodeconfig._token.cache_info().misses == misses
    assert text == '"$(FLOWER_INDEX)-x"'


def test_a_releases_dialect_is_looked_up_once():
    release = flower.Release(1, 41)
    assert flower.dialect(release) is flower.dialect(release)
    assert flower.dialect.cache_info().hits == 1
