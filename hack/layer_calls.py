"""Which layers call which on one request: the numbers of docs/development.md's before/after table.

Runs one RunFunction request (an example claim, rendered as `function render`
would send it) under a profiler and counts, for each pair of layers, the
distinct call edges (caller function -> callee function) that cross from one
layer into another, callbacks included (a layer below calling a function it
was handed by a layer above shows as an upward edge). Prints one line per
pair, most edges first.

    .venv/bin/python hack/layer_calls.py examples/claims/production.yaml
"""

from __future__ import annotations

import collections
import pathlib
import sys
import types
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from function.serving import fn, render  # noqa: E402

PACKAGE = ROOT / "function"


def layer(code: types.CodeType) -> str | None:
    """The layer (function/<package>, or caching) a code object belongs to; None outside function/."""
    path = pathlib.Path(code.co_filename)
    if PACKAGE not in path.parents:
        return None
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def edges(manifest: dict[str, Any]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Distinct (caller, callee) functions by (caller layer, callee layer), for one call of the function."""
    req = render.request(render.composite(manifest), [])
    found: dict[tuple[str, str], set[tuple[str, str]]] = collections.defaultdict(set)

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_code, frame.f_back.f_code
        below, above = layer(callee), layer(caller)
        if below and above and below != above:
            found[(above, below)].add((caller.co_qualname, callee.co_qualname))

    sys.setprofile(profile)
    try:
        fn.run(req)
    finally:
        sys.setprofile(None)
    return found


def main(path: str) -> None:
    """Print each pair of layers with its count of distinct crossing call edges."""
    import yaml  # noqa: PLC0415 - the script's own dependency, from the function's venv

    manifest = next(d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d)
    found = edges(manifest)
    for (above, below), calls in sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{above} -> {below}: {len(calls)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "examples" / "claims" / "production.yaml"))
