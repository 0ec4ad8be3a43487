"""The function's one way of caching, and clear_caches() to empty every cache.

Crossplane sends the same Federation on every reconcile, so the pure steps
that cost most (schema checks, nodeConfig tokens, encoding composed resources)
remember their results: functools.lru_cache, bounded, over hashable arguments.
A JSON value (a dict or list) is passed as Content, which compares by its
canonical text: the same whatever the order of its maps, different for any
other content (1, 1.0 and true included), so two different inputs never share
a result.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Entries per cache: every pool's values of a few large Federations.
MAXSIZE = 4096

_CACHES: list[functools._lru_cache_wrapper[Any]] = []


def memoize(*, typed: bool = False) -> Callable[[Callable[..., T]], functools._lru_cache_wrapper[T]]:
    """Cache a pure function: functools.lru_cache of MAXSIZE entries, emptied by clear_caches().

    typed keeps True, 1 and 1.0 apart when they are arguments themselves;
    inside a JSON value Content does.
    A Content argument lets go of its value once the function has read it: the
    cache keeps the key's text, not the document (see Content).
    """

    def decorate(func: Callable[..., T]) -> functools._lru_cache_wrapper[T]:
        @functools.wraps(func)
        def forgetting(*args: Any) -> T:
            try:
                return func(*args)
            finally:
                for arg in args:
                    if isinstance(arg, Content):
                        arg.value = None

        cached = functools.lru_cache(maxsize=MAXSIZE, typed=typed)(forgetting)
        _CACHES.append(cached)
        return cached

    return decorate


class Content:
    """A JSON value (string keys, as Structs and YAML give) as a cache key.

    Equal to another when their canonical texts are: maps sorted, nothing else
    changed. value is the value as given, text the canonical text; a result
    that could show the order of a map is computed from json.loads(text).
    A cache keeps its keys: once the memoized function has run, value is
    None, so that what a cache holds is text (which Python's garbage
    collector does not scan), not every document it has seen (which it did,
    at each full collection: pauses of 40 to 90 ms every few calls at 128
    pools).
    """

    __slots__ = ("text", "value")

    def __init__(self, value: Any) -> None:
        """Key value by its content."""
        self.value = value
        self.text = json.dumps(value, sort_keys=True, separators=(",", ":"))

    def __eq__(self, other: object) -> bool:
        """Same content."""
        return isinstance(other, Content) and self.text == other.text

    def __hash__(self) -> int:
        """Hash of the canonical text."""
        return hash(self.text)


def clear_caches() -> None:
    """Forget every cached result: the next call works as for a Federation never seen before."""
    for cached in _CACHES:
        cached.cache_clear()
