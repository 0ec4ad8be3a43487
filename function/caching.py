"""The function's one way of caching, and clear_caches() to empty every cache.

Crossplane sends the same Federation on every reconcile, so the pure steps
that cost most (schema checks, nodeConfig tokens, encoding composed resources)
remember their results: functools.lru_cache, bounded, over hashable arguments.
A JSON value (a dict or list) is passed as Content, which compares by a
digest of its canonical text: the same whatever the order of its maps,
different for any other content (1, 1.0 and true included), so two different
inputs do not share a result. A value the function built itself is passed as
Built, a cheaper key that keeps the order of its maps (see Built).

What a cache keeps of a key is its digest, not the document: once the cached
function has read it, a key forgets its value and text. Documents kept as
keys made the caches of a worker grow by their text (kilobytes an entry), and
kept as values they were scanned by the garbage collector on each full
collection (pauses of 40 to 90 ms every few calls at 128 pools).
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Entries per cache: every pool's values of a few large Federations.
MAXSIZE = 4096

_CACHES: list[functools._lru_cache_wrapper[Any]] = []


def memoize(*, typed: bool = False) -> Callable[[Callable[..., T]], functools._lru_cache_wrapper[T]]:
    """Cache a pure function: functools.lru_cache of MAXSIZE entries, emptied by clear_caches().

    typed keeps True, 1 and 1.0 apart when they are arguments themselves;
    inside a JSON value Content and Built do.
    A Content or Built argument forgets its document once the function has
    read it: the cache keeps the key's digest alone.
    """

    def decorate(func: Callable[..., T]) -> functools._lru_cache_wrapper[T]:
        @functools.wraps(func)
        def forgetting(*args: Any) -> T:
            try:
                return func(*args)
            finally:
                for arg in args:
                    if isinstance(arg, _Key):
                        arg.forget()

        cached = functools.lru_cache(maxsize=MAXSIZE, typed=typed)(forgetting)
        _CACHES.append(cached)
        return cached

    return decorate


def _digest(data: bytes) -> bytes:
    # 128 bits: that two of a cache's 4,096 documents share one is a chance of about 2**-105.
    return hashlib.blake2b(data, digest_size=16).digest()


class _Key:
    """What Content and Built share: equal by the digest (key), which is all a cache keeps of them."""

    __slots__ = ("key", "value")

    def __init__(self, value: Any, key: bytes) -> None:
        self.value = value
        self.key = key

    def forget(self) -> None:
        """Let go of the document: what is left is the key a cache keeps."""
        self.value = None

    def __eq__(self, other: object) -> bool:
        """The same kind of key, of the same content."""
        return isinstance(other, _Key) and type(other) is type(self) and self.key == other.key

    def __hash__(self) -> int:
        """Hash of the digest."""
        return hash(self.key)


class Content(_Key):
    """A JSON value (string keys, as Structs and YAML give) as a cache key.

    Equal to another when their canonical texts are: maps sorted, nothing else
    changed; compared by the text's digest. value is the value as given,
    text the canonical text, until the cached function has read them (forget);
    a result that could show the order of a map is computed from canonical().
    """

    __slots__ = ("text",)

    def __init__(self, value: Any) -> None:
        """Key value by its content."""
        self.text: str | None = json.dumps(value, sort_keys=True, separators=(",", ":"))
        super().__init__(value, _digest(self.text.encode()))

    def canonical(self) -> Any:
        """The value with every map in sorted order."""
        if self.text is None:
            msg = "a Content key is read only by the cached function it is passed to"
            raise RuntimeError(msg)
        return json.loads(self.text)

    def forget(self) -> None:
        """Let go of the document and its text."""
        super().forget()
        self.text = None


class Built(_Key):
    """A JSON value the function built itself (a composed resource) as a cache key.

    Compared by a digest of its pickle, which takes a fifth of the time
    Content's canonical text takes for a call's composed resources (json.dumps
    with sorted keys was a tenth of a call's CPU), because it keeps the order
    of the value's maps instead of sorting them. That order is the function's
    own: its builders run the same steps in the same order, and every map read
    from a request is read in sorted order (serving/wire.to_dict), whichever
    order Crossplane sent it in; so the same Federation builds the same key on
    every call. A pickle tells 1, 1.0 and true apart; two orders of equal
    content are two keys, a miss, never a wrong answer.
    """

    __slots__ = ()

    def __init__(self, value: Any) -> None:
        """Key value by its content, in the order of its maps."""
        super().__init__(value, _digest(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))


class Aside(_Key):
    """A value the cached function reads beside its key, not part of it: every Aside is equal to every other.

    For what a miss can use and a hit does not need: the parsed form of a
    Content key's document, say. Forgotten like the keys once read, so a
    cache never holds it.
    """

    __slots__ = ()

    def __init__(self, value: Any) -> None:
        """Carry value to the cached function."""
        super().__init__(value, b"")


def clear_caches() -> None:
    """Forget every cached result: the next call works as for a Federation never seen before."""
    for cached in _CACHES:
        cached.cache_clear()
