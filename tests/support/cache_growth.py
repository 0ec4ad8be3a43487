"""Run in a fresh process by test_properties: do full caches stop memory growing?

Caches take their size when function/ is imported, so this process sets a
small one first (argv[1] entries) and fills it in a few calls; then it runs
argv[2] more distinct Federations and prints, as JSON, each cache's size and
bound and the traced memory before and after those calls.
"""

from __future__ import annotations

import json
import sys
import tracemalloc

from function import caching

caching.MAXSIZE = int(sys.argv[1])

from function.serving import fn  # noqa: E402 - after the size is set: caches are made at import
from support.helpers import BASE, spec  # noqa: E402
from support.properties import fatal_messages, request  # noqa: E402


def distinct(i: int) -> dict:
    """A 4-pool spec no other i gives: every cached step sees new content."""
    pools = [
        {
            "name": f"p{n}",
            "replicas": 1,
            "env": [{"name": "RUN", "value": f"{i}-{n}"}],
            "nodeConfig": {f"k{k}": f"{i}-{n}-{k}" for k in range(8)},
        }
        for n in range(4)
    ]
    return spec(BASE, supernodes__pools=pools)


def main() -> None:
    more = int(sys.argv[2])
    i = 0
    # Fill: until every cache holds its bound.
    while any(c.cache_info().currsize < c.cache_info().maxsize for c in caching._CACHES):
        assert not fatal_messages(fn.run(request(distinct(i))))
        i += 1
        # Each call brings every cache new entries: one that has not filled by now never will.
        assert i < 10 * caching.MAXSIZE, [c.cache_info() for c in caching._CACHES]
    filled_after = i
    tracemalloc.start()
    for _ in range(more):  # warm-up: allocator pools and interned strings settle
        fn.run(request(distinct(i)))
        i += 1
    full, _ = tracemalloc.get_traced_memory()
    for _ in range(more):
        fn.run(request(distinct(i)))
        i += 1
    later, _ = tracemalloc.get_traced_memory()
    infos = [c.cache_info() for c in caching._CACHES]
    print(  # noqa: T201 - the report the test reads
        json.dumps(
            {
                "filled_after": filled_after,
                "sizes": [info.currsize for info in infos],
                "bounds": [info.maxsize for info in infos],
                "full": full,
                "later": later,
            }
        )
    )


main()
