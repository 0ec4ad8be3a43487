"""The --check / write logic the generators share."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable


def main(outputs: dict[pathlib.Path, Callable[[], str]], doc: str | None, script: str) -> int:
    """Write each output from its render function, or with --check report the stale ones; the exit status."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = parser.parse_args()
    stale = []
    for out, render in outputs.items():
        text = render()
        if not args.check:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        elif not out.exists() or out.read_text() != text:
            stale.append(out.name)
    if stale:
        print(f"{', '.join(stale)} stale: run python {script}", file=sys.stderr)
        return 1
    return 0
